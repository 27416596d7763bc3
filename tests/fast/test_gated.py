"""The factored form of gates per key channel (linattn_core/fast/gated.py) against decay.py's log-space form.

Where ``fast.gated_chunked`` applies (torch, gates per key channel, each chunk's fall within the dtype's
exponent range) it must give ``decay._chunked``'s ``num``, ``den``, ``S`` and ``z`` and the same
gradients through autograd, for lengths and chunk sizes that do not divide each other; where it does not
apply it returns None. And the decline is needed: the factored products, forced on the gates it
declines, overflow.
"""

from __future__ import annotations

import math

import pytest
from _tolerances import assert_close

from linattn_core import fast
from linattn_core.decay import _chunked
from linattn_core.fast import gated

torch = pytest.importorskip("torch")

NAMES = ("num", "den", "S", "z")


def _inputs(n, *, f=5, d_v=3, batch=(2, 3), fall=0.7, dtype=torch.float64, seed=0):
    """Features q, k: (*batch, n, f), v: (*batch, n, d_v), log-gates in [-fall, 0]: (*batch, n, f)."""
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, *batch, n, f, generator=g, dtype=torch.float64)
    v = torch.randn(*batch, n, d_v, generator=g, dtype=torch.float64)
    log_g = -fall * torch.rand(*batch, n, f, generator=g, dtype=torch.float64)
    return [x.to(dtype) for x in (q, k, v, log_g)]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100], ids=lambda n: f"T{n}")
@pytest.mark.parametrize("C", [1, 4, 16, 64], ids=lambda c: f"C{c}")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_the_factored_form_is_the_log_space_form(n, C, dtype):
    q, k, v, log_g = _inputs(n, dtype=dtype)
    got = fast.gated_chunked(q, k, v, log_g, C)
    want = _chunked(*(x.double() for x in (q, k, v, log_g)), C)  # the same rounded inputs, in float64
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert a.dtype == dtype
        assert_close(a, b, dtype=dtype, what=f"{name}, T={n} C={C}")


@pytest.mark.parametrize("C", [4, 16], ids=lambda c: f"C{c}")
def test_gradients_are_those_of_the_log_space_form(C):
    ins = [x.requires_grad_() for x in _inputs(37, fall=3.0, seed=1)]
    g = torch.Generator().manual_seed(2)
    dnum = torch.randn(2, 3, 37, 3, generator=g, dtype=torch.float64)
    dden = torch.randn(2, 3, 37, generator=g, dtype=torch.float64)

    def loss(num, den, S, z):  # every output counts, so that every path of the backward pass does
        return (num * dnum).sum() + (den * dden).sum() + S.square().sum() + z.square().sum()

    got = torch.autograd.grad(loss(*fast.gated_chunked(*ins, C)), ins)
    want = torch.autograd.grad(loss(*_chunked(*ins, C)), ins)
    for name, a, b in zip(("q", "k", "v", "log_g"), got, want, strict=True):
        assert_close(a, b, what=f"d{name}, C={C}")


def test_where_it_does_not_apply_it_says_none():
    q, k, v, log_g = _inputs(20)
    assert fast.gated_chunked(q, k, v, log_g, 8) is not None
    assert fast.gated_chunked(*(x.numpy() for x in (q, k, v, log_g)), 8) is None  # numpy: the reference
    assert fast.gated_chunked(q, k, v, log_g[..., :1], 8) is None  # a gate per token: C x C exps are cheap
    assert fast.gated_chunked(q, k, v, log_g - 200.0, 8) is None  # a fall of 1400 in 8 tokens: > 709


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_the_threshold_is_the_exponent_range_of_the_dtype(dtype):
    # a chunk of C tokens falls by the log-gates of its last C - 1 tokens: R <= log(max) is accepted
    C, R = 8, math.log(torch.finfo(dtype).max)
    log_g = torch.zeros(1, 2 * C, 3, dtype=dtype)
    log_g[0, C + 1 :, 1] = -0.999 * R / (C - 1)  # the second chunk, one channel, just inside
    assert gated.factored_ok(log_g, C)
    log_g[0, C, :] = -1e4  # a chunk's first gate only scales the whole chunk: it is not in R
    assert gated.factored_ok(log_g, C)
    log_g[0, C + 1 :, 1] = -1.001 * R / (C - 1)  # just outside
    assert not gated.factored_ok(log_g, C)
    assert gated.factored_ok(log_g, 4)  # the same gates in shorter chunks fall less per chunk


def test_the_factored_products_overflow_where_it_declines(monkeypatch):
    # gates of e^-12 per token fall by 180 over a chunk of 16: the factors e^(+-90) overflow float32.
    # decay's chunked form then runs in log space; forced, the factored form gives no number
    q, k, v, _ = _inputs(40, dtype=torch.float32)
    log_g = torch.full((2, 3, 40, 5), -12.0)
    assert fast.gated_chunked(q, k, v, log_g, 16) is None
    monkeypatch.setattr(gated, "factored_ok", lambda *args: True)
    forced = fast.gated_chunked(q, k, v, log_g, 16)
    assert not torch.isfinite(forced[0]).all()
    monkeypatch.undo()
    want = _chunked(*(x.double() for x in (q, k, v, log_g)), 16)
    for name, a, b in zip(NAMES, _chunked(q, k, v, log_g, 16), want, strict=True):
        assert_close(a, b, dtype=torch.float32, what=f"{name}, the log-space form in float32")
