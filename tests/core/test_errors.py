"""Every bad-input path raises the right exception, naming the argument (and the shapes involved),
before any computation; the identity map's bad denominators warn; huge inputs stay finite."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _tolerances import to_numpy

from linattn_core import (
    KVCache,
    LinearAttentionState,
    get_feature_map,
    kernel_attention,
    linear_attention,
    softmax_attention,
)


def mentions(*patterns: str) -> str:
    """A regex (for ``pytest.raises(match=...)``) that requires every pattern somewhere in the message."""
    return "(?s)" + "".join(f"(?=.*{p})" for p in patterns)


def arg(name: str) -> str:
    """The argument ``name`` as a whole word (``k`` must not match inside ``kernel``)."""
    return rf"(?<![\w.]){name}(?!\w)"


def num(n: int) -> str:
    """The number ``n`` as a whole number (a dimension of a shape in the message)."""
    return rf"(?<!\d){n}(?!\d)"


def arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


ATTENTION = {"softmax_attention": softmax_attention, "kernel_attention": kernel_attention,
             "linear_attention": linear_attention}
attention_fns = pytest.mark.parametrize("fn", list(ATTENTION.values()), ids=list(ATTENTION))


# --- shapes ---------------------------------------------------------------------------------------------
@attention_fns
def test_mismatched_batch_dims(fn):
    q, k, v = arrays((2, 5, 7), (3, 5, 7), (3, 5, 4))
    with pytest.raises(ValueError, match=mentions(arg("q"), arg("k"), num(2), num(3))):
        fn(q, k, v)
    q, k, v = arrays((2, 5, 7), (2, 5, 7), (6, 5, 4))
    with pytest.raises(ValueError, match=mentions(arg("v"), num(6))):
        fn(q, k, v)


@attention_fns
def test_mismatched_feature_dim_of_q_and_k(fn):
    q, k, v = arrays((2, 5, 7), (2, 5, 6), (2, 5, 4))
    with pytest.raises(ValueError, match=mentions(arg("q"), arg("k"), num(7), num(6))):
        fn(q, k, v)


@attention_fns
def test_keys_and_values_of_different_length(fn):
    q, k, v = arrays((2, 5, 7), (2, 9, 7), (2, 8, 4))
    with pytest.raises(ValueError, match=mentions(arg("k"), arg("v"), num(9), num(8))):
        fn(q, k, v)


@attention_fns
def test_causal_needs_as_many_queries_as_keys(fn):
    q, k, v = arrays((2, 5, 7), (2, 9, 7), (2, 9, 4))
    with pytest.raises(ValueError, match=mentions(arg("causal"), num(5), num(9))):
        fn(q, k, v, causal=True)


@attention_fns
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_one_dimensional_input(fn, which):
    shapes = {"q": (5, 7), "k": (5, 7), "v": (5, 4)}
    shapes[which] = (7,)
    q, k, v = arrays(shapes["q"], shapes["k"], shapes["v"])
    with pytest.raises(ValueError, match=mentions(arg(which))):
        fn(q, k, v)


# --- types and dtypes -----------------------------------------------------------------------------------
@attention_fns
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_non_array_input(fn, which):
    args = dict(zip("qkv", arrays((5, 7), (5, 7), (5, 4)), strict=True))
    args[which] = args[which].tolist()
    with pytest.raises(TypeError, match=mentions(arg(which))):
        fn(args["q"], args["k"], args["v"])


@attention_fns
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_integer_dtype(fn, backend):
    q, k, v = arrays((5, 7), (5, 7), (5, 4))
    q = np.arange(35).reshape(5, 7)
    if backend == "torch":
        import torch

        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    with pytest.raises(TypeError, match=mentions(arg("q"), "int")):
        fn(q, k, v)


@attention_fns
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_mixed_numpy_and_torch(fn, which):
    import torch

    args = dict(zip("qkv", arrays((5, 7), (5, 7), (5, 4)), strict=True))
    args[which] = torch.from_numpy(args[which])
    with pytest.raises(TypeError, match=mentions(arg(which))):
        fn(args["q"], args["k"], args["v"])


# --- options --------------------------------------------------------------------------------------------
def test_unknown_feature_map_name():
    with pytest.raises(ValueError, match=mentions("bogus")):
        get_feature_map("bogus")
    q, k, v = arrays((5, 7), (5, 7), (5, 4))
    for fn in (kernel_attention, linear_attention):
        with pytest.raises(ValueError, match=mentions("bogus")):
            fn(q, k, v, "bogus")
    with pytest.raises(ValueError, match=mentions("bogus")):
        LinearAttentionState(7, 4, "bogus")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_unknown_method(causal):
    q, k, v = arrays((5, 7), (5, 7), (5, 4))
    with pytest.raises(ValueError, match=mentions(arg("method"), "bogus")):
        linear_attention(q, k, v, causal=causal, method="bogus")


@pytest.mark.parametrize("chunk_size", [0, -3, 2.5, "8"])
def test_bad_chunk_size(chunk_size):
    q, k, v = arrays((5, 7), (5, 7), (5, 4))
    with pytest.raises((ValueError, TypeError), match=mentions(arg("chunk_size"))):
        linear_attention(q, k, v, causal=True, method="chunked", chunk_size=chunk_size)


@pytest.mark.parametrize("eps", [0.0, -1e-6])
def test_non_positive_eps(eps):
    q, k, v = arrays((5, 7), (5, 7), (5, 4))
    with pytest.raises(ValueError, match=mentions(arg("eps"))):
        kernel_attention(q, k, v, eps=eps)
    for method in ("recurrent", "cumsum", "chunked", "auto"):
        with pytest.raises(ValueError, match=mentions(arg("eps"))):
            linear_attention(q, k, v, causal=True, method=method, eps=eps)
    with pytest.raises(ValueError, match=mentions(arg("eps"))):
        linear_attention(q, k, v, eps=eps)
    with pytest.raises(ValueError, match=mentions(arg("eps"))):
        LinearAttentionState(7, 4, eps=eps)


@pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")  # relu features may be all zero
def test_cosformer_position_past_max_len():
    phi = get_feature_map("cosformer", max_len=4)
    assert phi(np.ones((4, 3))).shape == (4, 6)  # positions 0..3 are fine
    with pytest.raises(ValueError, match=mentions(arg("max_len"), num(4))):
        phi(np.ones((5, 3)))
    q, k, v = arrays((5, 3), (5, 3), (5, 2))
    with pytest.raises(ValueError, match=mentions(arg("max_len"))):
        linear_attention(q, k, v, phi, causal=True)
    state = LinearAttentionState(3, 2, phi)
    for t in range(4):
        state.step(q[t], k[t], v[t])
    with pytest.raises(ValueError, match=mentions(arg("max_len"))):
        state.step(q[4], k[4], v[4])


@pytest.mark.parametrize("scale", [float("inf"), float("nan"), "0.5", True])
def test_bad_scale_is_refused_alike_by_softmax_and_the_kv_cache(scale):
    q, k, v = arrays((5, 4), (5, 4), (5, 3))
    with pytest.raises(ValueError, match=mentions(arg("scale"))):
        softmax_attention(q, k, v, scale=scale)
    with pytest.raises(ValueError, match=mentions(arg("scale"))):
        KVCache(4, 3, scale=scale)


def test_numpy_scalar_scale_is_accepted_alike():
    q, k, v = arrays((5, 4), (5, 4), (5, 3))
    cache = KVCache(4, 3, scale=np.float32(0.25))
    ys = np.stack([cache.step(q[t], k[t], v[t]) for t in range(5)])
    expected = softmax_attention(q, k, v, causal=True, scale=np.float32(0.25))
    np.testing.assert_allclose(ys, expected, rtol=1e-10, atol=1e-10)  # atol: entries near zero


@pytest.mark.parametrize("m", [0, -1])
def test_performer_needs_positive_num_features(m):
    with pytest.raises(ValueError, match=mentions(arg("num_features"))):
        get_feature_map("performer", d=4, num_features=m, seed=0)


# --- streaming tokens -----------------------------------------------------------------------------------
def test_state_rejects_tokens_of_the_wrong_shape():
    state = LinearAttentionState(4, 3, batch_shape=(2,))
    k_t, v_t, q_t = arrays((2, 4), (2, 3), (2, 4))
    with pytest.raises(ValueError, match=mentions(arg("k(_t)?"), num(5))):
        state.update(np.zeros((2, 5)), v_t)
    with pytest.raises(ValueError, match=mentions(arg("v(_t)?"), num(7))):
        state.update(k_t, np.zeros((2, 7)))
    with pytest.raises(ValueError, match=mentions(arg("q(_t)?"), num(6))):
        state.query(np.zeros((2, 6)))
    with pytest.raises(ValueError, match=mentions(arg("k(_t)?"), num(9))):  # wrong batch shape
        state.step(q_t, np.zeros((9, 4)), v_t)
    with pytest.raises(ValueError, match=mentions(arg("q(_t)?"))):  # a sequence is not a token
        state.step(np.zeros((2, 8, 4)), k_t, v_t)


def test_kv_cache_rejects_tokens_of_the_wrong_shape():
    cache = KVCache(4, 3, batch_shape=(2,))
    k_t, v_t = arrays((2, 4), (2, 3))
    with pytest.raises(ValueError, match=mentions(arg("k(_t)?"), num(5))):
        cache.append(np.zeros((2, 5)), v_t)
    with pytest.raises(ValueError, match=mentions(arg("v(_t)?"), num(7))):
        cache.append(k_t, np.zeros((2, 7)))
    cache.append(k_t, v_t)
    with pytest.raises(ValueError, match=mentions(arg("q(_t)?"), num(6))):
        cache.attend(np.zeros((2, 6)))


# --- the identity map's denominators ---------------------------------------------------------------------
# no "auto": for these lengths it is the chunked form with the same chunk size (test_defaults.py pins
# which form it picks)
@pytest.mark.parametrize("method", ["kernel", "full", "recurrent", "cumsum", "chunked"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_identity_map_warns_with_the_count_of_bad_denominators(method, backend):
    # positive keys; queries positive except rows 1, 4 and 7, whose denominators q_i . z are negative
    # in the causal and the non-causal forms alike: exactly 3 bad denominators.
    rng = np.random.default_rng(0)
    q = np.abs(rng.standard_normal((10, 4))) + 0.1
    q[[1, 4, 7]] *= -1
    k = np.abs(rng.standard_normal((10, 4))) + 0.1
    v = rng.standard_normal((10, 3))
    if backend == "torch":
        import torch

        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    with pytest.warns(RuntimeWarning, match=num(3)):
        if method == "kernel":
            out = kernel_attention(q, k, v, "identity", causal=True)
        elif method == "full":
            out = linear_attention(q, k, v, "identity")
        else:
            out = linear_attention(q, k, v, "identity", causal=True, method=method, chunk_size=4)
    assert np.isfinite(to_numpy(out)).all()


@pytest.mark.parametrize("name", ["identity", "relu", "cosformer"])
def test_every_map_that_can_give_nonpositive_denominators_warns(name):
    # all-negative queries in rows 2 and 5: relu and cosformer features are all zero there, the
    # identity's q . z < 0 (positive keys); every form counts exactly those 2 rows.
    from linattn_core.decay import decayed_linear_attention

    rng = np.random.default_rng(1)
    q = np.abs(rng.standard_normal((8, 4))) + 0.1
    q[[2, 5]] *= -1
    k = np.abs(rng.standard_normal((8, 4))) + 0.1
    v = rng.standard_normal((8, 3))
    phi = get_feature_map(name, max_len=8) if name == "cosformer" else get_feature_map(name)
    calls = {
        "kernel": lambda: kernel_attention(q, k, v, phi, causal=True),
        "linear": lambda: linear_attention(q, k, v, phi, causal=True),
        "full": lambda: linear_attention(q, k, v, phi),
        "decay": lambda: decayed_linear_attention(q, k, v, phi, decay=0.9),
    }
    for form, call in calls.items():
        with pytest.warns(RuntimeWarning, match=mentions(num(2), f"'{name}'")):
            out = call()
        assert np.isfinite(out).all(), form
    state = LinearAttentionState(4, 3, phi)
    for t in range(8):
        if t in (2, 5):
            with pytest.warns(RuntimeWarning, match=mentions(num(1), f"'{name}'")):
                state.step(q[t], k[t], v[t])
        else:
            state.step(q[t], k[t], v[t])


@pytest.mark.parametrize("name", ["elu+1", "relu+1", "softplus", "performer"])
def test_positive_maps_never_warn(name):
    from linattn_core.decay import decayed_linear_attention

    q, k, v = arrays((20, 4), (20, 4), (20, 3))
    q = -10 - np.abs(q)  # all-negative queries: zero rows for relu, never for these maps
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        kernel_attention(q, k, v, name, causal=True)
        linear_attention(q, k, v, name, causal=True)
        decayed_linear_attention(q, k, v, name)
        state = LinearAttentionState(4, 3, name)
        for t in range(20):
            state.step(q[t], k[t], v[t])


def test_positive_maps_do_not_warn():
    q, k, v = arrays((20, 4), (20, 4), (20, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        linear_attention(q, k, v, "elu+1", causal=True)
        kernel_attention(q, k, v, "softplus")


# --- huge inputs -----------------------------------------------------------------------------------------
HUGE_CASES = [("numpy", "float64"), ("numpy", "float32"), ("torch", "float32")]


@pytest.mark.parametrize("method", ["kernel", "full", "recurrent", "cumsum", "chunked"])
@pytest.mark.parametrize(("backend", "dtype"), HUGE_CASES, ids=[f"{b}-{t}" for b, t in HUGE_CASES])
def test_inputs_of_magnitude_1e3_give_finite_outputs(mk, map_name, backend, dtype, method):
    q, k, v = mk.qkv((2,), 40, d=8, d_v=5, seed=1, scale=1e3, backend=backend, dtype=dtype)
    phi = mk.feature_map(map_name, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the identity map warns about its denominators
        if method == "kernel":
            outs = [kernel_attention(q, k, v, phi, causal=c) for c in (False, True)]
        elif method == "full":
            outs = [linear_attention(q, k, v, phi)]
        else:
            outs = [linear_attention(q, k, v, phi, causal=True, method=method, chunk_size=16)]
    for out in outs:
        assert out.dtype == q.dtype and np.isfinite(to_numpy(out)).all(), f"{map_name} {method} {dtype}"


def test_softmax_with_huge_inputs_is_finite(mk):
    q, k, v = (1e3 * x for x in mk.qkv((2,), 40, d=8, d_v=5, seed=2))
    for causal in (False, True):
        assert np.isfinite(softmax_attention(q, k, v, causal=causal)).all()
