"""Generation speed: the time of one decoding step with a KV cache against a fixed-size state.

At context length ``t`` a softmax head reads all ``t`` cached keys and values for every new token
(``t (d + d_v)`` numbers of memory traffic), while a linear-attention head reads its ``d_phi x d_v``
state ``S`` and ``z`` whatever ``t`` is. :func:`decode_times` measures both with this library's
:class:`~linattn_core.KVCache` and :class:`~linattn_core.LinearAttentionState`, for all the heads
of a model batched together, so the numbers are the attention part of one generated token.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from ...streaming import KVCache, LinearAttentionState

__all__ = ["MEMORIES", "decode_times"]

MEMORIES = ("kvcache", "state")


def _memory(which: str, batch: int, heads: int, d: int, proto: Any) -> KVCache | LinearAttentionState:
    if which == "kvcache":
        return KVCache(d, d, batch_shape=(batch, heads), like=proto)
    return LinearAttentionState(d, d, "elu+1", batch_shape=(batch, heads), like=proto)


def decode_times(which: str, contexts: Sequence[int], *, batch: int = 1, heads: int = 8, d: int = 16,
                 repeats: int = 16, seed: int = 0, device: str = "cpu",
                 threads: int | None = 1) -> list[dict]:
    """Median seconds per decoding step at each context length, and the memory per sequence.

    ``which`` is ``"kvcache"`` or ``"state"``; ``heads`` counts every head of the model (layers
    times heads per layer); tokens are float32 of width ``d = d_v``. One memory is filled token by
    token through all the ``contexts`` (ascending); at each, ``repeats`` steps are timed, the last of
    them at exactly that context length. Returns one dict per context:
    ``{"N", "median_s", "bytes_per_sequence"}``. ``threads`` caps torch's CPU threads while timing
    (one by default: a decoding step is a few small products, and on a busy machine a second thread
    mostly waits at a barrier); ``None`` keeps torch's setting.
    """
    import torch

    if which not in MEMORIES:
        raise ValueError(f"which must be one of {MEMORIES}, got {which!r}")
    contexts = [int(n) for n in contexts]
    if contexts != sorted(contexts) or contexts[0] < repeats:
        raise ValueError(f"contexts must be ascending and at least repeats = {repeats}, got {contexts}")
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _time(which, contexts, batch, heads, d, repeats, seed, device)
    finally:
        torch.set_num_threads(before)


def _time(which: str, contexts: list, batch: int, heads: int, d: int, repeats: int, seed: int,
          device: str) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(seed)
    pool = torch.randn((64, 3, batch, heads, d), generator=g).to(device)  # q, k, v of 64 tokens, cycled
    mem = _memory(which, batch, heads, d, pool)
    add = mem.append if which == "kvcache" else mem.update
    rows = []
    for n in contexts:
        while mem.t < n - repeats:
            _, k, v = pool[mem.t % 64]
            add(k, v)
        times = []
        for _ in range(repeats):
            q, k, v = pool[mem.t % 64]
            start = time.perf_counter()
            y = mem.step(q, k, v)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        del y
        rows.append({"N": n, "median_s": statistics.median(times), "bytes_per_sequence": mem.nbytes // batch})
    return rows
