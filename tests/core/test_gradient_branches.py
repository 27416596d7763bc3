"""Gradients where the denominators are clamped, on every path that computes gradients, and the
branches of the hand-written backward pass (linattn_core.linear_grad) that other tests do not reach.

Where ``den_i < eps`` the output is ``num_i / eps``: no gradient may flow into ``den_i`` (autograd
through ``clamp_min`` passes none). The clamp only matters for a row whose features are not zero
(``phi(q_i) = 0`` gives ``a_i . num_i = 0`` whatever the mask), so the inputs here have clamped rows
with non-zero features: tiny relu rows, the identity's negative rows, and elu+1 under a large eps.
References: autograd through the quadratic forms, in float64.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from _tolerances import assert_close

from linattn_core import EluPlusOne, get_feature_map, kernel_attention, linear_attention
from linattn_core.decay import decayed_kernel_attention, decayed_linear_attention
from linattn_core.fast import kernel

pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")

N, D, D_V = 20, 4, 3


def clamped_case(case: str):
    """q, k, v (numpy float64, (2, N, .)), the map and eps, with some rows clamped and some not."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, N, D)), rng.standard_normal((2, N, D)), rng.standard_normal((2, N, D_V))
    if case == "relu-tiny-rows":  # den ~ 1e-10 in rows 2, 9, 15, features not zero
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
        q[:, [2, 9, 15]] *= 1e-11
        return q, k, v, "relu", 1e-6
    if case == "identity-negative-rows":  # den < 0 in rows 4, 11, 17
        q, k = np.abs(q) + 0.1, np.abs(k) + 0.1
        q[:, [4, 11, 17]] *= -1
        return q, k, v, "identity", 1e-6
    return q, k, v, "elu+1", 15.0  # the first few rows (den grows with i) are clamped


CASES = ["relu-tiny-rows", "identity-negative-rows", "elu+1-large-eps"]


def dens(q, k, phi, decay=1.0):
    """The causal denominators, for the precondition that both kinds of rows are there."""
    fq, fk = (np.asarray(get_feature_map(phi)(x)) for x in (q, k))
    A = np.tril(fq @ np.swapaxes(fk, -1, -2) * decay ** np.subtract.outer(np.arange(N), np.arange(N)))
    return A.sum(-1)


def grads(fn, *arrays, dtype=torch.float64):
    leaves = [torch.from_numpy(x).to(dtype).requires_grad_() for x in arrays]
    out = fn(*leaves)
    dout = torch.from_numpy(np.random.default_rng(4).standard_normal(tuple(out.shape))).to(dtype)
    return torch.autograd.grad(out, leaves, dout)


def assert_grads(got, want, what, dtype=torch.float64):
    for name, g, w in zip("qkvg", got, want, strict=False):
        assert torch.isfinite(g).all(), f"{what}: d/d{name} not finite"
        scale = w.abs().max().clamp_min(1.0)  # a gradient sums many products: relative to its largest
        assert_close(g / scale, (w / scale).to(dtype), dtype=dtype, what=f"{what}: d/d{name}")


@pytest.mark.parametrize("case", CASES)
def test_the_cases_have_clamped_and_ordinary_rows(case):
    q, k, _, phi, eps = clamped_case(case)
    for decay in (1.0, 0.8):
        den = dens(q, k, phi, decay)
        assert (den < eps).sum() >= 4 and (den > 2 * eps).sum() >= 10, (case, decay)


@pytest.mark.parametrize("method", ["chunked", "auto", "recurrent", "cumsum"])
@pytest.mark.parametrize("case", CASES)
def test_linear_attention_gradients_where_denominators_are_clamped(case, method):
    q, k, v, phi, eps = clamped_case(case)
    want = grads(lambda q, k, v: kernel_attention(q, k, v, phi, causal=True, eps=eps), q, k, v)
    got = grads(lambda q, k, v: linear_attention(q, k, v, phi, causal=True, eps=eps, method=method,
                                                 chunk_size=8), q, k, v)
    assert_grads(got, want, f"linear_attention {method} [{case}]")


@pytest.mark.parametrize("how", ["recurrent", "chunked", "gates", "return_state"])
@pytest.mark.parametrize("case", CASES)
def test_decayed_linear_attention_gradients_where_denominators_are_clamped(case, how):
    # recurrent, chunked: linear_grad with a constant decay; gates: per-token gates that need a
    # gradient; return_state: autograd through the chunked form itself
    q, k, v, phi, eps = clamped_case(case)
    method = "recurrent" if how == "recurrent" else "chunked"
    arrays = (q, k, v, np.full((2, N), 0.8)) if how == "gates" else (q, k, v)

    def call(fn, **kw):
        def run(q, k, v, g=0.8):
            out = fn(q, k, v, phi, decay=g, eps=eps, **kw)
            return out[0] if kw.get("return_state") else out
        return run

    want = grads(call(decayed_kernel_attention), *arrays)
    extra = {"return_state": True} if how == "return_state" else {}
    got = grads(call(decayed_linear_attention, method=method, chunk_size=8, **extra), *arrays)
    assert_grads(got, want, f"decayed_linear_attention {how} [{case}]")


@pytest.mark.parametrize("case", CASES)
def test_float32_gradients_of_the_torch_backward_where_denominators_are_clamped(case):
    # the torch backward in float32, as on a GPU (here with the compiled kernel switched off)
    q, k, v, phi, eps = clamped_case(case)
    want = grads(lambda q, k, v: kernel_attention(q, k, v, phi, causal=True, eps=eps), q, k, v)
    with kernel.switched_off():
        got = grads(lambda q, k, v: linear_attention(q, k, v, phi, causal=True, eps=eps, chunk_size=8),
                    q, k, v, dtype=torch.float32)
    assert_grads(got, want, f"float32 torch backward [{case}]", dtype=torch.float32)


# --- feature maps the backward differentiates by autograd, a block at a time ---------------------------
class ShiftedElu(EluPlusOne):
    """elu+1 plus 0.5: elementwise, but not a map whose derivative is written out (a subclass)."""

    def __call__(self, x, *, offset=0):
        return super().__call__(x) + 0.5


@pytest.mark.parametrize("phi", [ShiftedElu(), "relu+1", "cosformer", lambda x: torch.sigmoid(x) + x**2],
                         ids=["elementwise-subclass", "relu+1", "cosformer", "callable"])
def test_backward_of_maps_without_a_written_derivative(phi):
    q, k, v, *_ = clamped_case("elu+1-large-eps")
    want = grads(lambda q, k, v: kernel_attention(q, k, v, phi, causal=True), q, k, v)
    got = grads(lambda q, k, v: linear_attention(q, k, v, phi, causal=True, chunk_size=8), q, k, v)
    assert_grads(got, want, f"linear_attention backward [{phi}]")


# --- boundaries of the backward: den == eps exactly, features at x == 0 exactly --------------------------
def test_a_denominator_exactly_at_eps_passes_its_gradient_as_clamp_min_does():
    # powers of two: row 0's denominator is q_0 . k_0 = 0.5 = eps exactly (clamp_min passes the gradient
    # at equality: max(den, eps) = den there), row 1's is 0.25 < eps (clamped), the rest > eps
    q = np.array([[0.5, 0.0], [0.125, 0.0], [1.0, 1.0], [2.0, 0.5]])
    k = np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 2.0], [1.0, 1.0]])
    v = np.random.default_rng(5).standard_normal((4, 3))
    want = grads(lambda q, k, v: kernel_attention(q, k, v, "identity", causal=True, eps=0.5), q, k, v)
    for method in ("chunked", "recurrent"):
        got = grads(partial(linear_attention, feature_map="identity", causal=True, eps=0.5, method=method,
                            chunk_size=2), q, k, v)
        assert_grads(got, want, f"den == eps [{method}]")


@pytest.mark.parametrize("name", ["relu", "relu+1"])
def test_relu_gradient_at_exactly_zero_is_zero_like_autograd(name):
    # the written-out slope [x > 0] must agree with torch's relu'(0) = 0 at inputs that are exactly 0
    q, k, v, *_ = clamped_case("elu+1-large-eps")
    q[:, ::3, :2] = 0.0
    k[:, 1::3, 1:] = 0.0
    want = grads(lambda q, k, v: kernel_attention(q, k, v, name, causal=True), q, k, v)
    got = grads(lambda q, k, v: linear_attention(q, k, v, name, causal=True, chunk_size=8), q, k, v)
    assert_grads(got, want, f"{name} at 0")
