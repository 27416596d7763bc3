"""Each feature map phi against its formula, on signed inputs, for numpy and torch."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy

from linattn_core import get_feature_map

# name -> the formula, written for float64 numpy (np.logaddexp(0, x) is log(1 + e^x) without overflow)
FORMULAS = {
    "identity": lambda x: x,
    "elu+1": lambda x: np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0))),
    "relu": lambda x: np.maximum(x, 0.0),
    "softplus": lambda x: np.logaddexp(0.0, x),
}


def signed_values(backend="numpy", dtype="float64", device="cpu"):
    """(2, 3, 7, 6) standard normals with a few extremes (+-30, 0) planted; seeded."""
    x = np.random.default_rng(0).standard_normal((2, 3, 7, 6))
    x[0, 0, 0, :3] = [30.0, -30.0, 0.0]
    if backend == "torch":
        import torch

        return torch.from_numpy(x).to(device=device, dtype=getattr(torch, dtype))
    return x.astype(dtype)


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_elementwise_map_matches_formula(name, backend, device):
    if backend == "numpy" and device != "cpu":
        pytest.skip("numpy runs on the CPU only")
    x = signed_values(backend, device=device)
    phi = get_feature_map(name)
    y = phi(x)
    assert type(y) is type(x) and y.dtype == x.dtype and tuple(y.shape) == tuple(x.shape)
    if backend == "torch":
        assert y.device == x.device
    assert_close(y, FORMULAS[name](to_numpy(x)), what=f"phi = {name}")


@pytest.mark.parametrize("name", sorted(FORMULAS))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_elementwise_map_keeps_low_precision_dtype(name, dtype):
    x = signed_values(dtype=dtype)
    y = get_feature_map(name)(x)
    assert y.dtype == x.dtype
    assert_close(y, FORMULAS[name](x.astype(np.float64)), dtype=dtype, what=f"{name} in {dtype}")


@pytest.mark.parametrize("name", sorted(FORMULAS))
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_into_writes_the_same_features_into_a_strided_buffer(name, dtype):
    # FeatureMap.into, the CPU fast path's allocation-free form, must give phi(x) exactly as __call__
    # does (up to rounding), also when out is a transposed view, as the chunked path uses it
    import torch

    x = signed_values("torch", dtype=dtype)  # (2, 3, 7, 6)
    phi = get_feature_map(name)
    out = torch.full((3, 2, 7, 6), float("nan"), dtype=x.dtype).transpose(0, 1)
    tmp = torch.empty_like(x)
    y = phi.into(x, out, tmp)
    assert y.data_ptr() == out.data_ptr() and not torch.isnan(out).any()
    assert_close(out.double(), FORMULAS[name](x.double().numpy()), dtype=dtype, what=f"{name}.into, {dtype}")
    assert_close(out, phi(x), dtype=dtype, what=f"{name}.into against {name}(x), {dtype}")


def test_softplus_and_elu_do_not_overflow():
    x = np.array([[-1e3, -50.0, 50.0, 1e3]])
    for name in ("softplus", "elu+1"):
        y = get_feature_map(name)(x)
        assert np.isfinite(y).all(), f"{name} overflowed: {y}"
        assert_close(y, FORMULAS[name](x), what=f"{name} at +-1e3")


# --- performer ----------------------------------------------------------------------------------------
def performer(d=6, m=32, seed=0, **options):
    return get_feature_map("performer", d=d, num_features=m, seed=seed, **options)


def test_performer_shapes(backend):
    phi = performer(d=6, m=32)
    x = signed_values(backend)
    y = phi(x)
    assert tuple(y.shape) == (2, 3, 7, 32) and y.dtype == x.dtype and type(y) is type(x)
    assert phi.d_phi == 32
    assert tuple(phi.projection.shape) == (32, 6)


@pytest.mark.parametrize("orthogonal", [True, False], ids=["orthogonal", "iid"])
def test_unstabilised_performer_is_the_favor_plus_estimator(orthogonal):
    # phi(q) . phi(k) = (1/m) sum_r exp(w_r . q' - |q'|^2 / 2) exp(w_r . k' - |k'|^2 / 2), x' = x d^-1/4,
    # with w_r the rows of .projection: the positive random-feature estimate of exp(q . k / sqrt(d)).
    d, m = 6, 32
    phi = performer(d=d, m=m, seed=3, stabilize=False, orthogonal=orthogonal)
    x = signed_values()[1, 2]  # (7, 6), no planted extremes
    w = to_numpy(phi.projection)
    xs = x * d**-0.25
    f = np.exp(xs @ w.T - 0.5 * (xs**2).sum(-1, keepdims=True))  # (7, m)
    assert_close(to_numpy(phi(x)) @ to_numpy(phi(x)).T, f @ f.T / m, what="phi(x) phi(x)^T")


def test_stabiliser_cancels_in_normalised_attention():
    # the stabiliser may only subtract constants that cancel in the normalised output
    from linattn_core import kernel_attention

    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((3, 2, 20, 6))
    plain, stable = performer(seed=5, stabilize=False), performer(seed=5, stabilize=True)
    assert_close(stable.projection, plain.projection, what="same seed, same projection")
    for causal in (False, True):
        assert_close(kernel_attention(q, k, v, stable, causal=causal),
                     kernel_attention(q, k, v, plain, causal=causal), what=f"stabilised, causal={causal}")


def test_performer_is_positive_even_for_huge_inputs():
    phi = performer(d=6, m=32)
    x = signed_values() * 1e3
    y = to_numpy(phi(x))
    assert np.isfinite(y).all() and (y >= 0).all()


# --- cosformer ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_len", [None, 7, 50], ids=["M=N", "M7", "M50"])
def test_cosformer_scores_are_relu_scores_times_cos_of_distance(backend, max_len):
    # cos(a_i) cos(a_j) + sin(a_i) sin(a_j) = cos(a_i - a_j): the re-weighting depends on i - j only.
    x = signed_values(backend)  # (2, 3, 7, 6): positions 0..6
    phi = get_feature_map("cosformer") if max_len is None else get_feature_map("cosformer", max_len=max_len)
    y = phi(x)
    assert tuple(y.shape) == (2, 3, 7, 12) and y.dtype == x.dtype and type(y) is type(x)
    m = 7 if max_len is None else max_len
    pos = np.arange(7)
    relu = np.maximum(to_numpy(x), 0)
    expected = (relu @ np.swapaxes(relu, -1, -2)) * np.cos(np.pi * (pos[:, None] - pos[None, :]) / (2 * m))
    yy = to_numpy(y)
    assert_close(yy @ np.swapaxes(yy, -1, -2), expected, what=f"cosformer scores, M={m}")
    assert (yy >= 0).all()


def test_cosformer_position_weights():
    # one token of ones at each position i: the features are cos(pi i / 2M) and sin(pi i / 2M) copies
    x = np.ones((5, 1))
    y = get_feature_map("cosformer", max_len=10)(x)  # (5, 2)
    angles = np.pi * np.arange(5) / 20
    assert_close(np.sort(y, axis=-1), np.sort(np.stack([np.cos(angles), np.sin(angles)], -1), axis=-1),
                 what="cosformer weights at positions 0..4")
