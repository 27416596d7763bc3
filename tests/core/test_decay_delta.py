"""Decay/gating and the delta rule: every fast form against its reference, gradients, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _tolerances import assert_close

from linattn_core import linear_attention
from linattn_core.decay import decayed_kernel_attention, decayed_linear_attention
from linattn_core.delta import delta_rule_attention

LENGTHS = (1, 63, 64, 65, 200)


def _inputs(n, *, batch=(2,), d=6, d_v=5, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, *batch, n, d))
    v = rng.standard_normal((*batch, n, d_v))
    gates = rng.uniform(0.5, 1.0, (*batch, n))
    betas = rng.uniform(0.0, 2.0, (*batch, n))
    return q, k, v, gates, betas


# --- decay ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", LENGTHS, ids=lambda n: f"T{n}")
@pytest.mark.parametrize("decay_kind", ["gamma", "gates"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
@pytest.mark.parametrize(
    ("method", "chunk"), [("recurrent", 64), ("chunked", 7), ("chunked", 64), ("auto", 500)]
)
def test_decay_forms_equal_quadratic_reference(n, decay_kind, normalize, method, chunk):
    q, k, v, gates, _ = _inputs(n)
    decay = 0.9 if decay_kind == "gamma" else gates
    expected = decayed_kernel_attention(q, k, v, decay=decay, normalize=normalize)
    got = decayed_linear_attention(q, k, v, decay=decay, normalize=normalize, method=method, chunk_size=chunk)
    assert_close(got, expected, what=f"decay {decay_kind} {method} C={chunk}")


def test_decay_one_is_plain_causal_linear_attention():
    q, k, v, _, _ = _inputs(65)
    assert_close(decayed_linear_attention(q, k, v, decay=1.0), linear_attention(q, k, v, causal=True))


def test_decay_weights_are_the_masked_kernel_times_gamma_powers():
    q, k, v, _, _ = _inputs(9, batch=())
    gamma = 0.7
    _, w = decayed_kernel_attention(q, k, v, "relu", decay=gamma, normalize=False, return_weights=True)
    phi = np.maximum
    i, j = np.indices((9, 9))
    expected = np.where(j <= i, (phi(q, 0) @ phi(k, 0).T) * gamma ** (i - j).clip(0), 0.0)
    assert_close(w, expected, what="implied decayed weights")


def test_decay_final_state_matches_the_recurrence_and_torch():
    q, k, v, gates, _ = _inputs(37)
    out_c, (S_c, z_c) = decayed_linear_attention(q, k, v, decay=gates, chunk_size=8, return_state=True)
    _, (S_r, z_r) = decayed_linear_attention(q, k, v, decay=gates, method="recurrent", return_state=True)
    assert_close(S_c, S_r, what="S")
    assert_close(z_c, z_r, what="z")
    t = [torch.from_numpy(x) for x in (q, k, v, gates)]
    assert_close(decayed_linear_attention(*t[:3], decay=t[3], chunk_size=8), out_c, what="torch vs numpy")


def test_decay_long_sequence_stays_finite_in_float32():
    # 100k steps of gamma = 0.5: a naive product of gates would underflow to 0 and give 0/0
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 1, 100_000, 4)).astype(np.float32)
    out = decayed_linear_attention(q, k, v, decay=0.5, chunk_size=128)
    assert np.isfinite(out).all()


def test_decay_gradcheck():
    # gates that need a gradient train through linear_grad whatever the method: one method is enough
    q, k, v, gates, _ = _inputs(9)
    args = [torch.tensor(x, requires_grad=True) for x in (q, k, v, gates)]
    fn = lambda a, b, c, g: decayed_linear_attention(a, b, c, decay=g, method="chunked", chunk_size=4)  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"decay": 0.0}, ValueError, "decay must lie in"),
        ({"decay": 1.5}, ValueError, "decay must lie in"),
        ({"decay": np.full((2, 5), 1.2)}, ValueError, r"decay must lie in \(0, 1\]; 10 of its 10"),
        ({"decay": np.full((2, 4), 0.5)}, ValueError, r"decay has shape \(2, 4\)"),
        ({"decay": "fast"}, TypeError, "decay must be a number"),
        ({"method": "cumsum"}, ValueError, "method must be one of"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
    ],
)
def test_decay_bad_inputs(kwargs, exc, match):
    q, k, v, _, _ = _inputs(5)
    with pytest.raises(exc, match=match):
        decayed_linear_attention(q, k, v, **kwargs)


# --- delta rule -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", LENGTHS, ids=lambda n: f"T{n}")
@pytest.mark.parametrize("beta_kind", ["one", "per-token"])
@pytest.mark.parametrize(
    ("method", "chunk"), [("quadratic", 64), ("chunked", 7), ("chunked", 64), ("auto", 500)]
)
def test_delta_forms_equal_recurrent_reference(n, beta_kind, method, chunk):
    q, k, v, _, betas = _inputs(n)
    beta = 1.0 if beta_kind == "one" else betas
    expected = delta_rule_attention(q, k, v, beta, method="recurrent")
    got = delta_rule_attention(q, k, v, beta, method=method, chunk_size=chunk)
    assert_close(got, expected, what=f"delta {method} C={chunk}")


def test_delta_with_a_feature_map_and_torch_float32():
    q, k, v, _, betas = _inputs(50)
    ref = delta_rule_attention(q, k, v, betas, "elu+1", method="recurrent")
    t = [torch.from_numpy(x).float() for x in (q, k, v, betas)]
    got = delta_rule_attention(*t[:3], t[3], "elu+1", method="chunked", chunk_size=16)
    assert got.dtype == torch.float32
    assert_close(got, torch.from_numpy(ref).float(), what="torch float32 chunked vs numpy float64")


def test_delta_overwrites_a_key_where_plain_linear_attention_piles_up():
    # the same key written twice with different values: the delta rule keeps the newer one
    rng = np.random.default_rng(3)
    key = rng.standard_normal((1, 8))
    k = np.concatenate([key, key])
    v = rng.standard_normal((2, 4))
    _, S = delta_rule_attention(k, k, v, 1.0, return_state=True)
    unit = key / np.linalg.norm(key)
    assert_close(unit @ S, v[1:], what="the value read back is the latest one")


def test_delta_retrieves_up_to_d_orthogonal_pairs_exactly():
    d = 16
    rng = np.random.default_rng(4)
    keys = np.linalg.qr(rng.standard_normal((d, d)))[0]
    values = rng.standard_normal((d, 5))
    _, S = delta_rule_attention(keys, keys, values, 1.0, return_state=True)
    assert_close(keys @ S, values, what="retrieval of d orthonormal keys")


@pytest.mark.parametrize("method", ["recurrent", "quadratic", "chunked"])
def test_delta_gradcheck(method):
    q, k, v, _, betas = _inputs(9)
    args = [torch.tensor(x, requires_grad=True) for x in (q, k, v, np.clip(betas, 0.1, 1.9))]
    fn = lambda a, b, c, g: delta_rule_attention(a, b, c, g, method=method, chunk_size=4)  # noqa: E731
    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"beta": -0.1}, ValueError, r"beta must lie in \[0, 2\]"),
        ({"beta": 2.5}, ValueError, r"beta must lie in \[0, 2\]"),
        ({"beta": np.full((2, 5), 3.0)}, ValueError, r"beta must lie in \[0, 2\]"),
        ({"beta": np.ones((2, 6))}, ValueError, r"beta has shape \(2, 6\)"),
        ({"beta": [1.0]}, TypeError, "beta must be a number"),
        ({"method": "cumsum"}, ValueError, "method must be one of"),
        ({"normalize_qk": "yes"}, TypeError, "normalize_qk"),
    ],
)
def test_delta_bad_inputs(kwargs, exc, match):
    q, k, v, _, _ = _inputs(5)
    with pytest.raises(exc, match=match):
        delta_rule_attention(q, k, v, **kwargs)


def test_delta_causal_needs_equal_lengths():
    q, k, v, _, _ = _inputs(5)
    with pytest.raises(ValueError, match="as many queries as keys"):
        delta_rule_attention(q[..., :3, :], k, v)


# --- forms that do not normalize, with the Performer's stabiliser ------------------------------------
# A stabilised Performer scales phi(q_i) and phi(k_j) by data-dependent constants that cancel only in a
# normalized output; the unnormalized forms must refuse it, be exact without it, and the normalized
# forms must stay exact with it.


def _performer(stabilize, d=6, m=16):
    from linattn_core import get_feature_map

    return get_feature_map("performer", d=d, num_features=m, seed=3, stabilize=stabilize)


def _small_inputs(n=20, seed=5):
    q, k, v, gates, betas = _inputs(n, seed=seed)
    return 0.5 * q, 0.5 * k, v, gates, betas  # small: the unnormalized delta rule stays contracting


def _favor_features(x, phi):
    """phi(x) from the FAVOR+ formula, in float64: exp(W x' - |x'|^2 / 2) / sqrt(m), x' = x d^-1/4."""
    xs = x * x.shape[-1] ** -0.25
    return np.exp(xs @ phi.projection.T - 0.5 * (xs**2).sum(-1, keepdims=True)) / np.sqrt(phi.d_phi)


@pytest.mark.parametrize("form", ["kernel", "recurrent", "chunked"])
def test_unnormalized_decay_is_the_exact_numerator_without_the_stabiliser(form):
    q, k, v, gates, _ = _small_inputs()
    phi = _performer(stabilize=False)
    fq, fk = _favor_features(q, phi), _favor_features(k, phi)  # (2, N, m)
    n = q.shape[-2]
    i, j = np.indices((n, n))
    logb = np.cumsum(np.log(gates), -1)  # decay from j to i: exp(b_i - b_j)
    w = np.where(j <= i, (fq @ np.swapaxes(fk, -1, -2)) * np.exp(logb[..., :, None] - logb[..., None, :]), 0)
    if form == "kernel":
        got = decayed_kernel_attention(q, k, v, phi, decay=gates, normalize=False)
    else:
        got = decayed_linear_attention(q, k, v, phi, decay=gates, normalize=False, method=form, chunk_size=7)
    assert_close(got, w @ v, what=f"unnormalized decayed numerator, {form}")


@pytest.mark.parametrize("form", ["kernel", "recurrent", "chunked", "auto"])
def test_unnormalized_decay_refuses_stabilised_performer_features(form):
    q, k, v, _, _ = _small_inputs()
    with pytest.raises(ValueError, match=r"normalize=False.*stabilize=False.*normalize=True"):
        if form == "kernel":
            decayed_kernel_attention(q, k, v, _performer(stabilize=True), normalize=False)
        else:
            decayed_linear_attention(q, k, v, _performer(stabilize=True), normalize=False, method=form)
    with pytest.raises(ValueError, match="stabilize=False"):  # the default Performer is stabilised
        decayed_linear_attention(q, k, v, "performer", normalize=False)


@pytest.mark.parametrize("form", ["kernel", "recurrent", "chunked"])
def test_normalized_decay_with_stabilised_performer_equals_the_unstabilised_one(form):
    q, k, v, gates, _ = _small_inputs()
    kw = {"decay": gates} if form == "kernel" else {"decay": gates, "method": form, "chunk_size": 7}
    fn = decayed_kernel_attention if form == "kernel" else decayed_linear_attention
    stable, plain = (fn(q, k, v, _performer(stabilize=s), **kw) for s in (True, False))
    assert_close(stable, plain, what=f"stabiliser cancels after normalization, {form}")


def _delta_reference(fq, fk, v, beta):
    """The literal delta-rule recurrence in float64 numpy, no normalization. fq, fk: (N, f)."""
    S = np.zeros((fk.shape[-1], v.shape[-1]))
    ys = []
    for t in range(fk.shape[0]):
        S = S + beta[t] * np.outer(fk[t], v[t] - fk[t] @ S)
        ys.append(fq[t] @ S)
    return np.stack(ys)


@pytest.mark.parametrize("method", ["recurrent", "quadratic", "chunked"])
def test_unnormalized_delta_rule_is_exact_without_the_stabiliser(method):
    q, k, v, _, betas = _small_inputs()
    q, k, v, betas = q[0], k[0], v[0], 0.5 * betas[0]  # one sequence, beta in [0, 1]
    phi = _performer(stabilize=False)
    expected = _delta_reference(_favor_features(q, phi), _favor_features(k, phi), v, betas)
    got = delta_rule_attention(q, k, v, betas, phi, normalize_qk=False, method=method, chunk_size=7)
    assert_close(got, expected, what=f"unnormalized delta rule with Performer features, {method}")


@pytest.mark.parametrize("method", ["recurrent", "quadratic", "chunked", "auto"])
def test_unnormalized_delta_rule_refuses_stabilised_performer_features(method):
    q, k, v, _, _ = _small_inputs()
    with pytest.raises(ValueError, match=r"normalize_qk=False.*stabilize=False.*normalize_qk=True"):
        delta_rule_attention(q, k, v, 1.0, _performer(stabilize=True), normalize_qk=False, method=method)


@pytest.mark.parametrize("method", ["recurrent", "quadratic", "chunked"])
def test_delta_rule_with_unit_features_is_exact_with_the_stabiliser(method):
    # L2-normalising each feature row removes any positive per-row constant
    q, k, v, _, betas = _small_inputs()
    got = delta_rule_attention(q, k, v, betas, _performer(stabilize=True), method=method, chunk_size=7)
    assert_close(got, delta_rule_attention(q, k, v, betas, _performer(stabilize=False), method=method,
                                           chunk_size=7), what=f"stabilised vs plain, {method}")
