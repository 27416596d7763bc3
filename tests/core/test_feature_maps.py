"""Each feature map phi against its formula, on signed inputs, for numpy and torch."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy

from linattn_core import FEATURE_MAPS, get_feature_map

# name -> the formula, written for float64 numpy (np.logaddexp(0, x) is log(1 + e^x) without overflow)
FORMULAS = {
    "identity": lambda x: x,
    "elu+1": lambda x: np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0))),
    "relu": lambda x: np.maximum(x, 0.0),
    "relu+1": lambda x: np.maximum(x, 0.0) + 1.0,
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


def test_softplus_and_elu_do_not_overflow():
    x = np.array([[-1e3, -50.0, 50.0, 1e3]])
    for name in ("softplus", "elu+1"):
        y = get_feature_map(name)(x)
        assert np.isfinite(y).all(), f"{name} overflowed: {y}"
        assert_close(y, FORMULAS[name](x), what=f"{name} at +-1e3")


# --- softplus: one function on both backends ---------------------------------------------------------
# torch.nn.functional.softplus returns x itself above x = 20, numpy's logaddexp keeps log1p(exp(-x));
# the map must give the same numbers on both, to a few units of the last place, at every x.
SOFTPLUS_X = np.concatenate([[-1e3, -100.0, -30.0, -20.0, -1e-3, 0.0, 1e-3, 100.0, 1e3],
                             np.linspace(15.0, 25.0, 41)])


def _ulps(dtype: str) -> tuple[float, float]:
    """(rtol, atol) of 4 units in the last place; atol covers subnormal results (softplus(-100))."""
    import torch

    info = torch.finfo(getattr(torch, dtype))
    return 4 * float(info.eps), 4 * float(info.smallest_normal) * float(info.eps)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_softplus_numpy_and_torch_agree_across_the_switch_point(dtype):
    import torch

    x_t = torch.from_numpy(SOFTPLUS_X).to(getattr(torch, dtype))
    x64 = x_t.double().numpy()  # the rounded inputs, for the reference
    exact = np.logaddexp(0.0, x64)
    phi = get_feature_map("softplus")
    y_t = phi(x_t)
    assert y_t.dtype == x_t.dtype and torch.isfinite(y_t).all()
    rtol, atol = _ulps(dtype)
    np.testing.assert_allclose(to_numpy(y_t), exact, rtol=rtol, atol=atol, err_msg=f"torch {dtype}")
    if dtype != "bfloat16":  # numpy has no bfloat16
        y_np = phi(x64.astype(dtype))
        assert y_np.dtype == np.dtype(dtype)
        np.testing.assert_allclose(to_numpy(y_t), to_numpy(y_np), rtol=rtol, atol=atol,
                                   err_msg=f"torch vs numpy {dtype}")


def test_softplus_gradient_is_the_sigmoid_and_finite():
    import torch

    x = torch.from_numpy(SOFTPLUS_X).requires_grad_()
    get_feature_map("softplus")(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    sigmoid = np.exp(-np.logaddexp(0.0, -SOFTPLUS_X))  # 1 / (1 + e^-x) without overflow
    assert_close(x.grad, sigmoid, what="d softplus / dx = sigmoid(x)")


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


def test_stabiliser_cancels_in_normalized_attention():
    # the stabiliser may only subtract constants that cancel in the normalized output
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


# --- numpy and torch: the same features for every map and input range -----------------------------------
RANGES = {"tiny": 1e-3, "unit": 1.0, "large": 30.0, "huge": 1e3}


def _condition(name: str, phi, x64: np.ndarray) -> float:
    """How many units of rounding a feature may differ by: 1 for the elementwise maps and cosFormer;
    for the Performer, the size of its exponent (a sum of d products), since exp turns an absolute
    rounding error of its argument into a relative error of the feature."""
    if name != "performer":
        return 1.0
    xs = x64 * x64.shape[-1] ** -0.25
    sizes = np.abs(xs) @ np.abs(phi.projection).T + 0.5 * (xs**2).sum(-1, keepdims=True)
    return x64.shape[-1] * (1.0 + float(sizes.max()))


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
@pytest.mark.parametrize("scale", list(RANGES.values()), ids=list(RANGES))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numpy_and_torch_give_the_same_features(name, scale, dtype):
    import torch

    rng = np.random.default_rng(7)
    q, k = (scale * rng.standard_normal((2, 2, 9, 6))).astype(dtype)
    options = {"d": 6, "num_features": 16, "seed": 1} if name == "performer" else {}
    phi = get_feature_map(name, **options)
    u = float(np.finfo(dtype).eps)
    rtol = 8 * u * _condition(name, phi, np.concatenate([q, k]).astype(np.float64))
    for causal in (False, True):
        ours = phi.pair(q, k, causal=causal)
        theirs = phi.pair(torch.from_numpy(q), torch.from_numpy(k), causal=causal)
        for side, a, b in zip(("queries", "keys"), ours, theirs, strict=True):
            a, b = to_numpy(a), to_numpy(b)
            assert np.isfinite(a).all() and np.isfinite(b).all(), f"{name} {side} not finite"
            # elementwise maps: every feature to rounding; the Performer's stabilised features span
            # many orders of magnitude, so there the error is relative to the largest one
            atol = rtol * np.abs(a).max() if name == "performer" else np.finfo(dtype).tiny
            np.testing.assert_allclose(b, a, rtol=rtol, atol=atol,
                                       err_msg=f"{name} {side}, |x| ~ {scale}, {dtype}, causal={causal}")


# --- the one resolver ------------------------------------------------------------------------------------
def test_as_feature_map_gives_the_performer_that_the_attention_functions_use():
    from linattn_core import kernel_attention, linear_attention
    from linattn_core.feature_maps import as_feature_map

    q, k, v = np.random.default_rng(8).standard_normal((3, 2, 12, 6))
    phi = as_feature_map("performer", 6)
    assert (phi.d, phi.num_features, phi.seed, phi.stabilize) == (6, 256, 0, True)
    assert_close(phi.projection, get_feature_map("performer", d=6).projection, what="same projection")
    for fn in (kernel_attention, linear_attention):
        assert_close(fn(q, k, v, phi), fn(q, k, v, "performer"), what=f"{fn.__name__}: object vs name")
    lazy = as_feature_map("performer")  # no d yet: drawn at the first input, with the same seed
    assert_close(lazy(q), phi(q), what="performer fitted to d on first use")


def test_as_feature_map_options_objects_and_callables():
    from linattn_core.feature_maps import CallableFeatureMap, as_feature_map

    phi = as_feature_map("performer", 6, num_features=16, seed=3, stabilize=False)
    assert (phi.d_phi, phi.seed, phi.stabilize) == (16, 3, False)
    assert as_feature_map("cosformer", 4, max_len=9).max_len == 9
    assert as_feature_map(phi, 6) is phi
    wrapped = as_feature_map(np.tanh, 6)
    assert isinstance(wrapped, CallableFeatureMap) and wrapped.name == "tanh"
    with pytest.raises(TypeError, match="only apply to a feature-map name"):
        as_feature_map(phi, 6, seed=1)
    with pytest.raises(ValueError, match="built for d=6"):
        as_feature_map(phi, 5)
    with pytest.raises(ValueError, match="unknown feature map"):
        as_feature_map("gelu", 6)
    with pytest.raises(TypeError, match="feature_map must be"):
        as_feature_map(3, 6)
