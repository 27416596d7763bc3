"""The training part of the benchmark: forward + backward of causal attention, measured in one run.

Three methods, each ``out = f(q, k, v)`` then the gradients of ``q, k, v`` for a fixed ``dout``:

``sdpa_train``              ``torch.nn.functional.scaled_dot_product_attention`` with the causal mask
``chunked_train``           ``linear_attention(method="chunked")``: the backward of
                            :mod:`linattn_core.linear_grad` (the chunked form run in reverse, O(N) memory)
``chunked_train_autograd``  the chunked form of ``linear.py`` (:func:`~linattn_core.linear.causal_chunked`)
                            under plain autograd

Used by :func:`linattn_core.tools.bench.run`; the targets are reported there, never tested.
FLOPs are counted as three forward passes (the usual estimate for forward + backward).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import timing as T
from .targets import Target, find, ratio_target

__all__ = ["check_train", "train_methods", "train_sweep", "train_targets"]

_FORWARD = {"sdpa_train": "sdpa", "chunked_train": "chunked", "chunked_train_autograd": "chunked"}
#: Largest |gradient - autograd through the reference| accepted in float64: the contract's 1e-10.
GRAD_ATOL = 1e-10


def train_methods(chunk_size: int = 64, feature_map: Any = "elu+1") -> dict[str, Callable[..., Any]]:
    """``name -> f(q, k, v)``, the forward of each training method (the caller differentiates it)."""
    import torch.nn.functional as F

    from ...feature_maps import as_feature_map
    from ...linear import causal_chunked, linear_attention

    phi = as_feature_map(feature_map)

    def chunked(q: Any, k: Any, v: Any) -> Any:
        return linear_attention(q, k, v, phi, causal=True, method="chunked", chunk_size=chunk_size)

    def chunked_autograd(q: Any, k: Any, v: Any) -> Any:  # linear.py's chunked form under plain autograd
        return causal_chunked(phi(q), phi(k), v, 1e-6, chunk_size)[0]

    return {"sdpa_train": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "chunked_train": chunked, "chunked_train_autograd": chunked_autograd}


def train_sweep_methods(chunk_size: int = 64) -> list[T.Method]:
    """The training methods as :class:`~linattn_core.tools.timing.Method` objects with ``grad``: the one
    sweep (:func:`~linattn_core.tools.timing.sweep`) times forward + backward, FLOPs as three forwards."""
    return [T.Method(name, True, f, chunk_size=chunk_size, grad=True, cost=_FORWARD[name])
            for name, f in train_methods(chunk_size).items()]


def _step(f: Callable[..., Any], q: Any, k: Any, v: Any, dout: Any) -> Callable[[], Any]:
    import torch

    def step() -> Any:
        out = f(q, k, v)
        return out, torch.autograd.grad(out, (q, k, v), dout)

    return step


def check_train(device: Any, *, N: int = 67, d: int = 16, d_v: int = 8, seed: int = 0,
                chunk_size: int = 64) -> dict[str, float]:
    """Each method's gradients against autograd through its float64 quadratic reference (elu+1 kernel
    attention, or softmax attention for SDPA), at a length no chunk size divides: max |difference|."""
    import torch

    from ...attention import kernel_attention, softmax_attention

    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 3, N, d, generator=gen, dtype=torch.float64).to(device) for _ in range(2))
    v = torch.randn(2, 3, N, d_v, generator=gen, dtype=torch.float64).to(device)
    dout = torch.randn(2, 3, N, d_v, generator=gen, dtype=torch.float64).to(device)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    errors = {}
    for name, f in train_methods(chunk_size).items():
        ref = (softmax_attention if name == "sdpa_train" else kernel_attention)
        want = _step(lambda q, k, v, ref=ref: ref(q, k, v, causal=True), q, k, v, dout)()[1]
        got = _step(f, q, k, v, dout)()[1]
        errors[name] = max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True))
    return errors


def train_sweep(lengths: Sequence[int], *, batch_heads: int, d: int, d_v: int, dtype: str, device: Any,
                chunk_size: int, min_run_time: float, max_run_time: float, max_call_s: float,
                budget_s: float | None, seed: int = 0, min_repeats: int = 5) -> list[T.Record]:
    """Time forward + backward of every training method at every length, interleaved per length, with
    the one sweep of the timing tools (:func:`linattn_core.tools.timing.sweep`: its time guard, memory
    guard, budget and peak memory)."""
    return T.sweep(train_sweep_methods(chunk_size), lengths, d=d, d_v=d_v, batch_heads=batch_heads,
                   dtype=dtype, device=device, seed=seed, min_run_time=min_run_time, min_repeats=min_repeats,
                   max_run_time=max_run_time, max_call_s=max_call_s, budget_s=budget_s, progress=False)


def train_targets(records: Sequence[T.Record], errors: dict[str, float], *, itemsize: int = 4) -> list:
    """The training targets (see the module docstring), as :class:`.targets.Target`."""
    out = [
        ratio_target(records, "training: chunked_train vs sdpa_train at N=16384", ("sdpa_train", True),
                      ("chunked_train", True), 16384, 25),
        ratio_target(records, "training: chunked_train vs chunked_train_autograd at N=16384",
                      ("chunked_train_autograd", True), ("chunked_train", True), 16384, 3),
    ]
    r = find(records, "chunked_train", True, 65536)
    name = "training: chunked_train peak memory at N=65536 / bytes of q, k, v, out and their gradients"
    if r is None or not r.measured or r.peak_bytes is None:
        out.append(Target(name, "<= 1.25x", None, None, "not measured" if r is None else (r.skipped or "")))
    else:
        token = r.batch_heads * r.N * itemsize
        io = token * 2 * (2 * r.d + 2 * r.d_v)  # q, k, v, out and dq, dk, dv, dout
        before = token * (2 * r.d + 2 * r.d_v)  # q, k, v and dout are alive before the step
        ratio = (r.peak_bytes + before) / io
        out.append(Target(name, "<= 1.25x", ratio, ratio <= 1.25, "peak = measured extra + q, k, v, dout"))
    err = errors.get("chunked_train")
    out.append(Target("training: chunked_train gradient error / float64 tolerance 1e-10", "<= 1x",
                      None if err is None else err / GRAD_ATOL, None if err is None else err <= GRAD_ATOL,
                      "" if err is None else f"max |grad - autograd through the reference| = {err:.1e}"))
    return out
