"""Inputs and quadratic references shared by the backward's tests (tests/core/test_backward.py) and the
blocked engine's (tests/fast/test_blocked.py): causal attention with no decay, a constant decay of 0.8 or
a gate per token in (0.5, 1]."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from linattn_core import kernel_attention  # noqa: E402 - after the importorskip
from linattn_core.decay import decayed_kernel_attention  # noqa: E402

F64 = torch.float64


def inputs(lead, n, d=5, d_v=4, seed=0, dtype=F64):
    """q, k: (..., n, d), v and dout: (..., n, d_v), gates: (..., n), drawn in float64, then cast."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(*lead, n, d, generator=gen, dtype=F64) for _ in range(2))
    v = torch.randn(*lead, n, d_v, generator=gen, dtype=F64)
    gates = 0.5 + 0.5 * torch.rand(*lead, n, generator=gen, dtype=F64)  # in (0.5, 1]
    dout = torch.randn(*lead, n, d_v, generator=gen, dtype=F64)
    return [x.to(dtype) for x in (q, k, v, gates, dout)]


def decay_of(decay, gates):
    """The ``decay`` argument of decayed_kernel_attention for a case: None, "constant" or "gates"."""
    return 1.0 if decay is None else (0.8 if decay == "constant" else gates)


def reference(q, k, v, fm, decay, gates, normalize):
    if decay is None and normalize:
        return kernel_attention(q, k, v, fm, causal=True)
    return decayed_kernel_attention(q, k, v, fm, decay=decay_of(decay, gates), normalize=normalize)


def log_g(decay, gates):
    """``log g_t`` per token, as linear_grad takes it (None without decay)."""
    if decay is None:
        return None
    return torch.full_like(gates, math.log(0.8)) if decay == "constant" else gates.log()
