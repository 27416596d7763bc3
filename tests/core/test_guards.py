"""Every guard against overflow, underflow and 0/0 exercised by inputs that break the formula without it.

Each test feeds values for which the unguarded line gives inf or NaN (or silently rounds to 0), and
checks the output is finite *and* equal to a reference that does not need the guard (computed in
float64, or in log space).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _tolerances import assert_close, to_numpy

from linattn_core import KVCache, get_feature_map, kernel_attention, linear_attention, softmax_attention
from linattn_core.delta import delta_rule_attention, unit_rows
from linattn_core.feature_maps.performer import _MAX_SHIFT

DELTA_METHODS = ("recurrent", "quadratic", "chunked")


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# --- the KV cache's max-shift ---------------------------------------------------------------------------
@pytest.mark.parametrize("sign", [1, -1], ids=["overflow", "underflow"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_kv_cache_attends_to_scores_that_overflow_exp(sign, dtype):
    # |q . k| / sqrt(d) ~ 1e4: exp overflows to inf (sign 1) or every weight underflows to 0 (sign -1),
    # so without the max-shift every row is inf/inf or 0/0
    k = 100 * (np.abs(randn(12, 4, seed=1)) + 0.5)
    q, v = sign * 100 * (np.abs(randn(12, 4, seed=2)) + 0.5), randn(12, 3, seed=3)
    cache = KVCache(4, 3, dtype=dtype)
    ys = np.stack([cache.step(*(x[t].astype(dtype) for x in (q, k, v))) for t in range(12)])
    assert ys.dtype == np.dtype(dtype) and np.isfinite(ys).all()
    expected = softmax_attention(*(x.astype(dtype) for x in (q, k, v)), causal=True)
    assert_close(ys, expected, what="KVCache.step vs causal softmax_attention")


def test_kv_cache_on_torch_attends_to_scores_that_overflow_exp():
    q, k, v = (torch.from_numpy(x).float() for x in (100 * randn(6, 4, seed=4), 100 * randn(6, 4, seed=5),
                                                      randn(6, 3, seed=6)))
    cache = KVCache(4, 3, like=q)
    ys = torch.stack([cache.step(q[t], k[t], v[t]) for t in range(6)])
    assert torch.isfinite(ys).all()
    assert_close(ys, softmax_attention(q, k, v, causal=True), what="KVCache(like=float32 tensor)")


# --- the delta rule's unit rows: a zero row stays zero ---------------------------------------------------
def zero_rows():
    """Keys with an all-zero row 3, queries with an all-zero row 5 (in batch entry 1)."""
    q, k, v = randn(2, 9, 4, seed=7), randn(2, 9, 4, seed=8), randn(2, 9, 3, seed=9)
    k[1, 3] = 0.0
    q[1, 5] = 0.0
    return q, k, v


@pytest.mark.parametrize("method", DELTA_METHODS)
def test_delta_rule_with_a_zero_key_row_writes_nothing(method):
    q, k, v = zero_rows()
    y = delta_rule_attention(q, k, v, method=method, chunk_size=4)
    assert np.isfinite(y).all()
    beta = np.ones((2, 9))
    beta[1, 3] = 0.0  # a zero key writes nothing: the same as a token with beta = 0
    k_any = k.copy()
    k_any[1, 3] = 1.0
    assert_close(y, delta_rule_attention(q, k_any, v, beta, method="recurrent"), what="zero key = no write")
    assert not y[1, 5].any(), "a zero query row reads zero"


def test_delta_rule_with_relu_features_that_are_all_zero_stays_finite():
    q, k, v = randn(12, 4, seed=10), randn(12, 4, seed=11), randn(12, 3, seed=12)
    k[[2, 6]] = -np.abs(k[[2, 6]])  # relu features all zero for these keys
    q[4] = -np.abs(q[4])
    for method in DELTA_METHODS:
        y = delta_rule_attention(q, k, v, 1.0, "relu", method=method, chunk_size=5)
        assert np.isfinite(y).all() and not y[4].any(), method


@pytest.mark.parametrize("method", DELTA_METHODS)
def test_delta_rule_gradient_through_a_zero_row_is_finite(method):
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in zero_rows())
    y = delta_rule_attention(q, k, v, method=method, chunk_size=4)
    y.backward(torch.from_numpy(randn(2, 9, 3, seed=13)))
    for name, x in zip("qkv", (q, k, v), strict=True):
        assert torch.isfinite(x.grad).all(), f"d/d{name} has NaN or inf"


def test_delta_rule_normalizes_a_tiny_row_like_any_other():
    # a key of norm 1e-5 (squared norm 1e-10) is still scaled to unit length: the clamp only stops 0/0
    q, k, v = zero_rows()
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True).clip(1e-300)
    tiny = unit.copy()
    tiny[0, 2] *= 1e-5
    assert_close(delta_rule_attention(q, tiny, v), delta_rule_attention(q, unit, v), what="tiny row")


# scales at which the sum of squares of a row underflows (1e-160 in float64, 1e-20 in float32: squares of
# 1e-40 are 0), or overflows (1e160, 1e20), and subnormal entries (1e-310, 1e-40)
ROW_SCALES = {"float64": (1e-310, 1e-160, 1e-7, 1.0, 1e160, 1e300),
              "float32": (1e-40, 1e-20, 1e-7, 1.0, 1e20, 1e30)}


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_unit_rows_are_unit_for_every_nonzero_row_in_either_dtype(dtype, backend):
    # the squared norm of a row shorter than about 1e-6 (float64 clamp) or longer than 1.8e19 (float32
    # overflow) used to give a row that was not of unit length; scaled by its largest entry first, every
    # nonzero row comes out of length 1 and a zero row stays zero
    base = randn(6, 8, seed=20)
    rows = np.concatenate([s * base for s in ROW_SCALES[dtype]] + [np.zeros((1, 8))]).astype(dtype)
    x = torch.from_numpy(rows) if backend == "torch" else rows
    with np.errstate(all="raise"):  # no step of it overflows or divides 0 by 0
        y = unit_rows(x)
    # the reference: each (rounded) row times an exact power of two that brings it near 1, then normalised
    exact = rows.astype(np.float64)
    top = np.abs(exact).max(-1, keepdims=True)
    scaled = np.ldexp(exact, -np.frexp(np.where(top > 0, top, 1.0))[1])
    expected = scaled / np.linalg.norm(scaled, axis=-1, keepdims=True).clip(1e-300)
    assert_close(y, expected, dtype=dtype, what=f"unit rows of every length, {dtype}")
    assert_close(np.linalg.norm(to_numpy(y), axis=-1)[:-1], np.ones(len(rows) - 1), dtype=dtype,
                 what="every nonzero row has length 1")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_delta_rule_with_the_stabilised_performer_is_the_unit_row_result(dtype):
    # the default stabilised Performer gives some key rows of norm < 1e-6 on ordinary inputs: they are
    # scaled to unit length like any other, so the output equals the unstabilised map's (same rows, up
    # to a positive constant per row that unit rows remove)
    q, k, v = (3 * randn(1, 64, 8, seed=s).astype(dtype) for s in (21, 22, 23))
    kw = {"d": 8, "num_features": 32, "seed": 0}
    stab, plain = (get_feature_map("performer", stabilize=s, **kw) for s in (True, False))
    assert (np.linalg.norm(stab.keys(k.astype(np.float64)), axis=-1) < 1e-6).any(), "no short row drawn"
    y = delta_rule_attention(q, k, v, 0.5, stab, method="recurrent")
    wide = (x.astype(np.float64) for x in (q, k, v))
    expected = delta_rule_attention(*wide, 0.5, plain, method="recurrent")
    assert_close(y, expected.astype(dtype), what="stabilised Performer, unit rows")


# --- elu+1 and softplus: no exp of a large positive x, no 1 - 1 rounding --------------------------------
X = np.array([-1e3, -40.0, -1e-3, 0.0, 1e-3, 40.0, 88.0, 1e3])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", ["elu+1", "softplus"])
def test_numpy_features_never_overflow(name, dtype):
    with np.errstate(over="raise", invalid="raise"):  # an exp(1e3) anywhere raises FloatingPointError
        y = get_feature_map(name)(X.astype(dtype))
    assert np.isfinite(y).all()


def test_elu_plus_one_of_a_very_negative_x_is_exp_x_not_zero():
    # elu(x) + 1 = (exp(x) - 1) + 1 rounds to 0 below x ~ -37; the map stays > 0, as it promises
    phi = get_feature_map("elu+1")
    x = np.array([-40.0, -100.0])
    assert_close(phi(x) / np.exp(x), np.ones(2), what="numpy elu+1 at -40, -100")
    assert_close(to_numpy(phi(torch.from_numpy(x))) / np.exp(x), np.ones(2), what="torch elu+1 at -40, -100")


@pytest.mark.parametrize("name", ["elu+1", "softplus", "relu+1"])
def test_torch_feature_gradients_at_large_inputs_are_finite(name):
    # torch.where differentiates both branches: exp(1e3) = inf in the unused one gives 0 * inf = NaN
    x = torch.from_numpy(X).requires_grad_()
    get_feature_map(name)(x).sum().backward()
    slope = {"elu+1": np.where(X > 0, 1.0, np.exp(np.minimum(X, 0))),
             "softplus": np.exp(-np.logaddexp(0.0, -X)), "relu+1": (X > 0).astype(float)}[name]
    assert_close(x.grad, slope, what=f"d {name} / dx")


@pytest.mark.parametrize("name", ["elu+1", "softplus", "relu+1"])
def test_training_on_inputs_of_magnitude_1e3_gives_finite_equal_gradients(name):
    # the backward pass recomputes phi and dphi/dx a block at a time (value_and_slope): the same guards
    q, k, v = (torch.from_numpy(x) for x in (1e3 * randn(2, 20, 4, seed=14), 1e3 * randn(2, 20, 4, seed=15),
                                              randn(2, 20, 3, seed=16)))
    dout = torch.from_numpy(randn(2, 20, 3, seed=17))

    def grads(fn):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = fn(*leaves, name, causal=True)
        assert torch.isfinite(out).all()
        return torch.autograd.grad(out, leaves, dout)

    for got, want, what in zip(grads(linear_attention), grads(kernel_attention), "qkv", strict=True):
        assert torch.isfinite(got).all()
        assert_close(got, want, what=f"d/d{what} [{name}, 1e3]")


# --- the Performer's stabilisers -------------------------------------------------------------------------
def logits(phi, x):
    """FAVOR+ exponents ``W x' - |x'|^2 / 2`` (x' = x d^-1/4), in float64: (..., N, m)."""
    xs = np.asarray(x, dtype=np.float64) * phi.d ** -0.25
    return xs @ phi.projection.T - 0.5 * (xs**2).sum(-1, keepdims=True)


def log_space_attention(phi, q, k, v, causal):
    """Normalized FAVOR+ attention with every product taken in log space: needs no stabiliser.

    log(phi(q_i) . phi(k_j)) = logsumexp_m(l_q[i, m] + l_k[j, m]) - log m; then a softmax over j.
    """
    lq, lk = logits(phi, q), logits(phi, k)
    pair = lq[..., :, None, :] + lk[..., None, :, :]  # (..., N_q, N_k, m)
    top = pair.max(-1, keepdims=True)
    score = (top + np.log(np.exp(pair - top).sum(-1, keepdims=True)))[..., 0]
    if causal:
        score = np.where(np.tril(np.ones(score.shape[-2:], dtype=bool)), score, -np.inf)
    w = np.exp(score - score.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn", [kernel_attention, linear_attention], ids=lambda f: f.__name__)
def test_performer_queries_of_very_different_norms_each_keep_their_own_shift(fn, dtype, causal):
    # query rows with norms from 1 to 60: their exponents lie ~1e3 apart, so one shift for all rows
    # underflows the small ones to 0 (0/0, clamped to eps); each row shifted by its own maximum is exact
    phi = get_feature_map("performer", d=4, num_features=16, seed=0)
    q = randn(2, 10, 4, seed=18) * np.linspace(1, 60, 10)[:, None]
    k, v = randn(2, 10, 4, seed=19), randn(2, 10, 3, seed=20)
    lk = logits(phi, k)
    assert (lk.max((-2, -1))[:, None] - np.maximum.accumulate(lk.max(-1), -1) < _MAX_SHIFT - 10).all()
    args = [x.astype(dtype) for x in (q, k, v)]
    assert_close(fn(*args, phi, causal=causal), log_space_attention(phi, *args, causal), dtype=dtype,
                 what="stabilised Performer vs log space")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_causal_performer_shift_is_clipped_so_early_queries_stay_finite(dtype):
    # Keys whose norms fall along the sequence: the prefix maximum of the key exponents r_i starts
    # ~400 below the final R. A query is scaled by exp(R - r_i), clipped at exp(_MAX_SHIFT), which
    # keeps float32 finite; the rows whose gap is under the clip are exact.
    phi = get_feature_map("performer", d=4, num_features=16, seed=0)
    k = randn(24, 4, seed=21) * np.linspace(12, 0.5, 24)[:, None]
    q, v = randn(24, 4, seed=22), randn(24, 3, seed=23)
    lk = logits(phi, k.astype(dtype))
    gap = lk.max() - np.maximum.accumulate(lk.max(-1))
    assert gap[0] > 100 and (gap < _MAX_SHIFT - 10).sum() >= 8  # the clip is active early, idle late
    args = [x.astype(dtype) for x in (q, k, v)]
    for out in (linear_attention(*args, phi, causal=True), kernel_attention(*args, phi, causal=True)):
        assert np.isfinite(out).all()
        exact = gap < _MAX_SHIFT - 10
        assert_close(out[exact], log_space_attention(phi, *args, True)[exact], dtype=dtype,
                     what="rows whose shift is under the clip")

