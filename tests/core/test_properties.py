"""Hypothesis properties on signed values and varied shapes: phi >= 0, rows of the implied attention sum
to 1, causality, and permutation equivariance of non-causal linear attention."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from linattn_core import kernel_attention, linear_attention, softmax_attention

# relu, cosformer and identity features can give denominators <= 0; the library warns (tested in
# test_core_errors.py). Here those rows are compared like any other, so the warning is only noise.
pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")

BATCHES = st.sampled_from([(), (2,), (1, 3)])
SEEDS = st.integers(0, 2**32 - 1)


def signed(seed, shape, scale):
    return scale * np.random.default_rng(seed).standard_normal(shape)


@st.composite
def problems(draw, *, max_n=24, max_scale=3.0, cross=False):
    """A seeded (q, k, v) of drawn shapes and magnitude: signed normals times ``scale``."""
    batch, d, d_v = draw(BATCHES), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    n_q = draw(st.integers(1, max_n))
    n_k = draw(st.integers(1, max_n)) if cross else n_q
    seed, scale = draw(SEEDS), draw(st.floats(0.1, max_scale))
    return (signed(seed, (*batch, n_q, d), scale), signed(seed + 1, (*batch, n_k, d), scale),
            signed(seed + 2, (*batch, n_k, d_v), 1.0))


# --- phi >= 0 where promised ------------------------------------------------------------------------
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=4, max_side=6),
                    elements=st.floats(-1e3, 1e3, allow_subnormal=False)))
def test_phi_is_non_negative(mk, nonneg_map, x):
    y = to_numpy(mk.feature_map(nonneg_map, x.shape[-1], num_features=16)(x))
    assert np.isfinite(y).all() and (y >= 0).all(), f"{nonneg_map} gave {y.min()}"


# --- implied attention rows sum to 1 ------------------------------------------------------------------
@pytest.mark.parametrize("map_name", ["elu+1", "softplus", "performer"])
@given(p=problems(max_scale=1.0), causal=st.booleans())
def test_kernel_attention_weight_rows_sum_to_one(mk, map_name, p, causal):
    # with strictly positive features of moderate inputs every denominator exceeds eps, so each row
    # of the implied attention is a distribution
    q, k, v = p
    _, w = kernel_attention(q, k, v, mk.feature_map(map_name, q.shape[-1], num_features=16),
                            causal=causal, return_weights=True)
    w = to_numpy(w)
    assert (w >= 0).all()
    assert_close(w.sum(-1), np.ones(w.shape[:-1]), what=f"rows of the {map_name} weights")
    if causal:
        assert (np.triu(w, 1) == 0).all(), "causal weights on the future"


@given(causal=st.booleans(), data=st.data())
def test_softmax_weight_rows_sum_to_one(causal, data):
    q, k, v = data.draw(problems(max_scale=30.0, cross=not causal), label="q, k, v")
    out, w = softmax_attention(q, k, v, causal=causal, return_weights=True)
    w = to_numpy(w)
    assert (w >= 0).all()
    assert_close(w.sum(-1), np.ones(w.shape[:-1]), what="rows of the softmax weights")
    assert_close(out, w @ v, what="softmax output = weights @ v")


# --- causality ----------------------------------------------------------------------------------------
CAUSAL_FORMS = {
    "softmax": lambda q, k, v, phi: softmax_attention(q, k, v, causal=True),
    "kernel": lambda q, k, v, phi: kernel_attention(q, k, v, phi, causal=True),
    "recurrent": lambda q, k, v, phi: linear_attention(q, k, v, phi, causal=True, method="recurrent"),
    "cumsum": lambda q, k, v, phi: linear_attention(q, k, v, phi, causal=True, method="cumsum"),
    "chunked": lambda q, k, v, phi: linear_attention(q, k, v, phi, causal=True, method="chunked",
                                                     chunk_size=5),
    "auto": lambda q, k, v, phi: linear_attention(q, k, v, phi, causal=True, method="auto"),
}


@pytest.mark.parametrize("form", list(CAUSAL_FORMS))
@pytest.mark.parametrize("map_name", ["elu+1", "performer", "cosformer"])
@given(p=problems(), data=st.data())
def test_future_tokens_do_not_change_the_past(mk, form, map_name, p, data):
    q, k, v = p
    n = q.shape[-2]
    t = data.draw(st.integers(0, n - 1), label="t")
    seed = data.draw(SEEDS, label="seed")
    q2, k2, v2 = q.copy(), k.copy(), v.copy()  # change every token after t, queries, keys and values
    for x, s in ((q2, seed), (k2, seed + 1), (v2, seed + 2)):
        x[..., t + 1:, :] = signed(s, x[..., t + 1:, :].shape, 3.0)
    # cosformer's positions depend on max_len; fix it so the sequence length is not what changes
    phi = mk.feature_map(map_name, q.shape[-1], num_features=16, max_len=n)
    fn = CAUSAL_FORMS[form]
    before, after = fn(q, k, v, phi), fn(q2, k2, v2, phi)
    assert_close(after[..., : t + 1, :], before[..., : t + 1, :], what=f"{form}: y[:t+1] with t={t}")


# --- permutation equivariance of the non-causal form ---------------------------------------------------
@pytest.mark.parametrize("map_name", ["identity", "elu+1", "relu", "softplus", "performer"])
@given(p=problems(cross=True), data=st.data())
def test_noncausal_linear_attention_is_permutation_equivariant(mk, map_name, p, data):
    q, k, v = p
    if map_name == "identity":  # keep the identity map's denominators away from zero
        q, k = np.abs(q), np.abs(k)
    phi = mk.feature_map(map_name, q.shape[-1], num_features=16)
    perm_q = np.asarray(data.draw(st.permutations(range(q.shape[-2])), label="query order"))
    perm_k = np.asarray(data.draw(st.permutations(range(k.shape[-2])), label="key order"))
    out = linear_attention(q, k, v, phi)
    assert_close(linear_attention(q[..., perm_q, :], k, v, phi), out[..., perm_q, :],
                 what="permuting queries permutes outputs")
    assert_close(linear_attention(q, k[..., perm_k, :], v[..., perm_k, :], phi), out,
                 what="permuting keys and values together changes nothing")
