"""Every documented default observed through behaviour: the call without the argument equals the call
with the documented value and differs from the call with a neighbouring one.

A default changed in one place (``decay=0.9`` to ``0.8``, ``eps=1e-6`` to ``1e-5``, the score scale's
``d`` taken from the values) fails a test here, even where every form still agrees with every other.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from _tolerances import assert_close, to_numpy, tolerance

from linattn_core import (
    DecayedState,
    DeltaRuleState,
    KVCache,
    LinearAttentionState,
    _backend,
    get_feature_map,
    kernel_attention,
    linear_attention,
    softmax_attention,
)
from linattn_core.decay import decayed_kernel_attention, decayed_linear_attention
from linattn_core.delta import delta_rule_attention
from linattn_core.feature_maps.performer import draw_projection


def assert_differs(actual, other, what: str) -> None:
    """``actual`` and ``other`` differ by more than the tolerance of their dtype somewhere."""
    rtol, atol = tolerance(getattr(actual, "dtype", "float64"))
    a, b = to_numpy(actual), to_numpy(other)
    assert not np.allclose(a, b, rtol=rtol, atol=atol), f"{what}: indistinguishable"


def qkv(n=12, d=4, d_v=3, batch=(2,), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, n, d)),
            rng.standard_normal((*batch, n, d_v)))


def stream(cell, q, k, v, *extra):
    """Step ``cell`` through the sequence (``extra``: the gate or beta of every step)."""
    steps = [cell.step(q[..., t, :], k[..., t, :], v[..., t, :], *extra) for t in range(q.shape[-2])]
    return np.stack(steps, -2)


# --- decay = 0.9 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [decayed_kernel_attention, decayed_linear_attention], ids=lambda f: f.__name__)
def test_decay_defaults_to_0_9(fn):
    q, k, v = qkv()
    default = fn(q, k, v)
    assert_close(default, fn(q, k, v, decay=0.9), what=f"{fn.__name__}() vs decay=0.9")
    for other in (0.8, 1.0):
        assert_differs(default, fn(q, k, v, decay=other), f"{fn.__name__}() vs decay={other}")


# --- eps = 1e-6 -----------------------------------------------------------------------------------------
def clamped_inputs():
    """relu features whose rows 3 and 7 have denominators of about 1e-9: clamped by any eps >= 1e-8, and
    never <= 0 (nothing to warn about); every other row far above eps."""
    rng = np.random.default_rng(1)
    q = np.abs(rng.standard_normal((10, 4))) + 0.1
    q[[3, 7]] *= 1e-10
    k = np.abs(rng.standard_normal((10, 4))) + 0.1
    return q, k, rng.standard_normal((10, 3))


EPS_CALLS = {
    "kernel_attention": lambda q, k, v, **kw: kernel_attention(q, k, v, "relu", causal=True, **kw),
    "linear_attention-full": lambda q, k, v, **kw: linear_attention(q, k, v, "relu", **kw),
    **{f"linear_attention-{m}": partial(linear_attention, feature_map="relu", causal=True, method=m,
                                        chunk_size=4) for m in ("recurrent", "cumsum", "chunked")},
    "decayed_kernel_attention": lambda q, k, v, **kw: decayed_kernel_attention(q, k, v, "relu", **kw),
    **{f"decayed_linear_attention-{m}": partial(decayed_linear_attention, feature_map="relu", method=m,
                                                chunk_size=4) for m in ("recurrent", "chunked")},
    "LinearAttentionState": lambda q, k, v, **kw: stream(LinearAttentionState(4, 3, "relu", **kw), q, k, v),
    "DecayedState": lambda q, k, v, **kw: stream(DecayedState(4, 3, "relu", **kw), q, k, v, 0.9),
}


@pytest.mark.parametrize("call", list(EPS_CALLS.values()), ids=list(EPS_CALLS))
def test_eps_defaults_to_1e_minus_6(call):
    q, k, v = clamped_inputs()
    default = call(q, k, v)
    assert_close(default, call(q, k, v, eps=1e-6), what="default vs eps=1e-6")
    for other in (1e-5, 1e-7):
        assert_differs(default, call(q, k, v, eps=other), f"default vs eps={other}")


def test_eps_defaults_to_1e_minus_6_under_autograd():
    q, k, v = (torch.from_numpy(x).requires_grad_() for x in clamped_inputs())
    default = linear_attention(q, k, v, "relu", causal=True)
    assert_close(default, linear_attention(q, k, v, "relu", causal=True, eps=1e-6), what="eps=1e-6")
    assert_differs(default, linear_attention(q, k, v, "relu", causal=True, eps=1e-5), "eps=1e-5")


# --- chunk_size = 64 and method = "auto" ----------------------------------------------------------------
@pytest.fixture
def mask_sizes(monkeypatch):
    """The sizes of the causal masks the forms build: a chunked form builds one per chunk length."""
    seen: list[int] = []
    real = _backend.causal_mask

    def spy(n, like):
        seen.append(n)
        return real(n, like)

    monkeypatch.setattr(_backend, "causal_mask", spy)
    return seen


CHUNKED_CALLS = {
    "linear_attention": lambda q, k, v: linear_attention(q, k, v, causal=True, method="chunked"),
    "linear_attention-auto": lambda q, k, v: linear_attention(q, k, v, causal=True),
    "linear_attention-autograd": lambda q, k, v: linear_attention(
        *(torch.from_numpy(x).requires_grad_() for x in (q, k, v)), causal=True),
    "decayed_linear_attention": lambda q, k, v: decayed_linear_attention(q, k, v, method="chunked"),
    "decayed_linear_attention-auto": lambda q, k, v: decayed_linear_attention(q, k, v),
    "decayed_linear_attention-autograd": lambda q, k, v: decayed_linear_attention(
        *(torch.from_numpy(x).requires_grad_() for x in (q, k, v))),
    "delta_rule_attention": lambda q, k, v: delta_rule_attention(q, k, v, method="chunked"),
    "delta_rule_attention-auto": lambda q, k, v: delta_rule_attention(q, k, v),
}


@pytest.mark.parametrize("call", list(CHUNKED_CALLS.values()), ids=list(CHUNKED_CALLS))
def test_chunk_size_defaults_to_64(call, mask_sizes):
    call(*qkv(n=140, batch=()))  # 140 = 64 + 64 + 12
    assert max(mask_sizes) == 64 and 12 in mask_sizes, mask_sizes


def test_auto_runs_the_recurrent_loop_up_to_8_tokens_and_chunks_from_9(mask_sizes):
    for n in (1, 8):
        linear_attention(*qkv(n=n), causal=True)
    assert mask_sizes == [], "the recurrent loop builds no mask"
    linear_attention(*qkv(n=9), causal=True)
    assert mask_sizes and max(mask_sizes) == 9, "9 tokens: one chunk"


# --- scale = 1 / sqrt(d), d of the queries and keys (not of the values) ----------------------------------
def test_softmax_scale_defaults_to_one_over_sqrt_d():
    q, k, v = qkv(d=9, d_v=4)
    default = softmax_attention(q, k, v)
    assert_close(default, softmax_attention(q, k, v, scale=1 / 3), what="scale=1/sqrt(9)")
    for other in (1.0, 0.5, 1 / 9):
        assert_differs(default, softmax_attention(q, k, v, scale=other), f"scale={other}")


def test_kv_cache_scale_defaults_to_one_over_sqrt_d():
    q, k, v = qkv(d=9, d_v=4, batch=())
    cache = KVCache(9, 4)
    assert cache.scale == 1 / 3
    default = stream(cache, q, k, v)
    assert_close(default, softmax_attention(q, k, v, causal=True, scale=1 / 3), what="KVCache()")
    assert_differs(default, softmax_attention(q, k, v, causal=True, scale=0.5), "scale=1/sqrt(d_v)")


# --- feature maps: elu+1 for the kernel forms, the identity for the delta rule -----------------------
DEFAULT_MAP_CALLS = {
    "kernel_attention": (lambda q, k, v, *phi: kernel_attention(q, k, v, *phi, causal=True), "elu+1"),
    "linear_attention": (lambda q, k, v, *phi: linear_attention(q, k, v, *phi), "elu+1"),
    "linear_attention-causal": (lambda q, k, v, *phi: linear_attention(q, k, v, *phi, causal=True), "elu+1"),
    "decayed_kernel_attention": (decayed_kernel_attention, "elu+1"),
    "decayed_linear_attention": (decayed_linear_attention, "elu+1"),
    "LinearAttentionState": (lambda q, k, v, *phi: stream(LinearAttentionState(4, 3, *phi), q, k, v),
                             "elu+1"),
    "delta_rule_attention": (lambda q, k, v, *phi: delta_rule_attention(q, k, v, 1.0, *phi), "identity"),
    "DecayedState": (lambda q, k, v, *phi: stream(DecayedState(4, 3, *phi), q, k, v, 0.9), "elu+1"),
    "DeltaRuleState": (lambda q, k, v, *phi: stream(DeltaRuleState(4, 3, *phi), q, k, v, 1.0), "identity"),
}


@pytest.mark.parametrize("name", list(DEFAULT_MAP_CALLS))
def test_default_feature_map(name):
    call, documented = DEFAULT_MAP_CALLS[name]
    q, k, v = qkv(batch=())
    default = call(q, k, v)
    assert_close(default, call(q, k, v, documented), what=f"{name}: default vs {documented!r}")
    other = "softplus" if documented != "softplus" else "elu+1"
    assert_differs(default, call(q, k, v, other), f"{name}: default vs {other!r}")


# --- delta rule: beta = 1, unit features ----------------------------------------------------------------
def test_delta_rule_beta_defaults_to_one_and_features_to_unit_length():
    q, k, v = qkv()
    default = delta_rule_attention(q, k, v)
    assert_close(default, delta_rule_attention(q, k, v, 1.0, normalize_qk=True), what="beta=1, unit rows")
    assert_differs(default, delta_rule_attention(q, k, v, 0.5), "beta=0.5")
    assert_differs(default, delta_rule_attention(0.5 * q, 0.5 * k, v, normalize_qk=False), "raw rows")


def test_decay_normalizes_by_default():
    q, k, v = qkv()
    for fn in (decayed_kernel_attention, decayed_linear_attention):
        assert_close(fn(q, k, v), fn(q, k, v, normalize=True), what=fn.__name__)
        assert_differs(fn(q, k, v), fn(q, k, v, normalize=False), fn.__name__)


# --- the Performer: 256 orthogonal features, seed 0, stabilised, positive -------------------------------
def test_performer_defaults_through_its_features():
    phi = get_feature_map("performer", d=6)
    assert phi.d_phi == 256
    assert_close(phi.projection, draw_projection(256, 6, 0, orthogonal=True), what="seed 0, orthogonal")
    assert_differs(phi.projection, draw_projection(256, 6, 0, orthogonal=False), "i.i.d. rows")
    x = np.random.default_rng(2).standard_normal((3, 5, 6))
    assert_close(phi(x), get_feature_map("performer", d=6, num_features=256, seed=0, orthogonal=True,
                                          stabilize=True, kind="positive")(x), what="explicit defaults")
    # stabilised: the largest key feature of each batch entry is exp(0) / sqrt(m), whatever the inputs
    assert_close(phi(100 * x).max(axis=(-2, -1)), np.full(3, 1 / 16), what="stabilised features")


def test_orthogonal_rows_take_either_sign():
    # QR's Q follows LAPACK's sign convention (its first entry is never positive); the signs of
    # diag(R) folded into Q make it uniformly distributed, so the first row's first entry takes both
    first = np.array([draw_projection(4, 4, seed)[0, 0] for seed in range(40)])
    assert (first > 0).sum() >= 10 and (first < 0).sum() >= 10, first


def test_redraw_gives_the_features_of_a_fresh_map_with_that_seed():
    x = np.random.default_rng(3).standard_normal((5, 6))
    phi = get_feature_map("performer", d=6, num_features=16, seed=0)
    phi(x), phi(torch.from_numpy(x))  # the projection is cached per backend
    phi.redraw(4)
    fresh = get_feature_map("performer", d=6, num_features=16, seed=4)
    assert_close(phi(x), fresh(x), what="numpy features after redraw")
    assert_close(phi(torch.from_numpy(x)), fresh(x), what="torch features after redraw")


def test_performer_by_name_in_the_attention_functions_is_the_default_one():
    q, k, v = qkv(d=6)
    explicit = get_feature_map("performer", d=6, num_features=256, seed=0)
    for fn in (kernel_attention, linear_attention):
        default = fn(q, k, v, "performer")
        assert_close(default, fn(q, k, v, explicit), what=f"{fn.__name__}('performer')")
        assert_differs(default, fn(q, k, v, get_feature_map("performer", d=6, seed=1)), "seed 1")
        assert_differs(default, fn(q, k, v, get_feature_map("performer", d=6, num_features=128)), "m=128")
    with pytest.raises(ValueError, match="stabilize=False"):  # stabilised: refused where z is dropped
        delta_rule_attention(q, k, v, 1.0, "performer", normalize_qk=False)


# --- streaming states: float64 by default -----------------------------------------------------------------
@pytest.mark.parametrize("cls", [LinearAttentionState, KVCache], ids=lambda c: c.__name__)
def test_streaming_states_default_to_float64(cls):
    cell = cls(4, 3)
    y = cell.step(*(x.astype(np.float32) for x in np.ones((2, 4))), np.ones(3, dtype=np.float32))
    assert y.dtype == np.float64
    if cls is LinearAttentionState:
        assert cell.S.dtype == cell.z.dtype == np.float64
