"""Generation speed: the time of one decoding step with a KV cache against a fixed-size state.

At context length ``t`` a softmax head reads all ``t`` cached keys and values for every new token
(``t (d + d_v)`` numbers of memory traffic), while a linear-attention head reads its ``d_phi x d_v``
state ``S`` and ``z`` whatever ``t`` is. :func:`decode_times` measures both with this library's
:class:`~linattn_core.KVCache` and :class:`~linattn_core.LinearAttentionState`, for all the heads
of a model batched together, so the numbers are the attention part of one generated token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...streaming import KVCache, LinearAttentionState
from .clock import time_steps

__all__ = ["MEMORIES", "decode_times"]

MEMORIES = ("kvcache", "state")


def _memory(which: str, batch: int, heads: int, d: int, proto: Any) -> KVCache | LinearAttentionState:
    if which == "kvcache":
        return KVCache(d, d, batch_shape=(batch, heads), like=proto)
    return LinearAttentionState(d, d, "elu+1", batch_shape=(batch, heads), like=proto)


def decode_times(which: str, contexts: Sequence[int], *, batch: int = 1, heads: int = 8, d: int = 16,
                 repeats: int = 16, seed: int = 0, device: str = "cpu",
                 threads: int | None = 1) -> list[dict]:
    """Seconds per decoding step at each context length (median and quartiles), and the memory per
    sequence.

    ``which`` is ``"kvcache"`` or ``"state"``; ``heads`` counts every head of the model (layers
    times heads per layer); tokens are float32 of width ``d = d_v``. Each context gets its own memory,
    filled token by token to ``repeats + 1`` tokens short of it; then the contexts take turns, one step
    each per round (an untimed round first, then ``repeats`` timed ones, each round starting one
    context further on), so the last step of each is at exactly its context length, a machine that
    speeds up or slows down over the run moves every context alike instead of whichever ran last,
    and every step finds the processor's caches holding another context's memory (as in a model,
    where other layers run between two steps of one). Returns one dict per context:
    ``{"N", "median_s", "q25_s", "q75_s", "repeats", "bytes_per_sequence"}``.
    ``threads`` caps torch's CPU threads while timing (one by default: a
    decoding step is a few small products, and on a busy machine a second thread mostly waits at a
    barrier); ``None`` keeps torch's setting.
    """
    import torch

    if which not in MEMORIES:
        raise ValueError(f"which must be one of {MEMORIES}, got {which!r}")
    contexts = [int(n) for n in contexts]
    if contexts != sorted(set(contexts)) or contexts[0] <= repeats:
        raise ValueError(f"contexts must be ascending, distinct and more than repeats = {repeats} "
                         f"(one untimed step, then the timed ones), got {contexts}")
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
    mems = [_filled(which, n - repeats - 1, batch, heads, d, pool) for n in contexts]

    def stepper(mem: Any) -> Any:
        return lambda: mem.step(*pool[mem.t % 64])

    # the one interleaved timer for steps that grow their memory: an untimed round, then `repeats`
    timings = time_steps({j: stepper(mem) for j, mem in enumerate(mems)}, repeats, device=device, warmup=1)
    return [{"N": n, "median_s": t.median_s, "q25_s": t.q25_s, "q75_s": t.q75_s, "repeats": t.repeats,
             "bytes_per_sequence": mem.nbytes // batch}
            for n, mem, t in zip(contexts, mems, timings.values(), strict=True)]


def _filled(which: str, t: int, batch: int, heads: int, d: int, pool: Any) -> KVCache | LinearAttentionState:
    # a memory that has seen t tokens of the pool
    mem = _memory(which, batch, heads, d, pool)
    add = mem.append if which == "kvcache" else mem.update
    while mem.t < t:
        _, k, v = pool[mem.t % 64]
        add(k, v)
    return mem

