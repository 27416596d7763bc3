"""Every validation boundary pinned from both sides: the last value accepted and the first refused,
with the error's wording (argument, value, interval), for every check of ``_backend`` and of the
public constructors and options.

A check loosened or tightened by one character (``s < 1`` to ``s < 0``, ``b >= 0`` to ``b > 0``, the
causal ``N_q == N_k`` made one-sided) fails a test here.
"""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest
import torch
from _tolerances import assert_close

from linattn_core import (
    DecayedState,
    DeltaRuleState,
    KVCache,
    LinearAttentionState,
    Performer,
    get_feature_map,
    kernel_attention,
    linear_attention,
    softmax_attention,
)
from linattn_core.decay import decayed_kernel_attention, decayed_linear_attention
from linattn_core.delta import delta_rule_attention
from linattn_core.feature_maps import as_feature_map

pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")


def says(message: str) -> str:
    """The exact wording, as a ``pytest.raises(match=...)`` pattern."""
    return re.escape(message)


def qkv(n_q=5, n_k=None, d=4, d_v=3, batch=(2,), seed=0):
    rng = np.random.default_rng(seed)
    n_k = n_q if n_k is None else n_k
    return (rng.standard_normal((*batch, n_q, d)), rng.standard_normal((*batch, n_k, d)),
            rng.standard_normal((*batch, n_k, d_v)))


# --- causal attention needs N_q == N_k, refused on both sides -------------------------------------------
CAUSAL_CALLS = {
    "softmax_attention": lambda q, k, v: softmax_attention(q, k, v, causal=True),
    "kernel_attention": lambda q, k, v: kernel_attention(q, k, v, causal=True),
    **{f"linear_attention-{m}": partial(linear_attention, causal=True, method=m)
       for m in ("recurrent", "cumsum", "chunked", "auto")},
    "decayed_kernel_attention": decayed_kernel_attention,
    "decayed_linear_attention": decayed_linear_attention,
    "delta_rule_attention": delta_rule_attention,
}


@pytest.mark.parametrize(("n_q", "n_k"), [(5, 9), (9, 5)], ids=["Nq<Nk", "Nq>Nk"])
@pytest.mark.parametrize("call", list(CAUSAL_CALLS.values()), ids=list(CAUSAL_CALLS))
def test_causal_refuses_more_or_fewer_queries_than_keys(call, n_q, n_k):
    q, k, v = qkv(n_q, n_k)
    with pytest.raises(ValueError, match=says(
            f"causal attention needs as many queries as keys, but q has shape (2, {n_q}, 4)"
            f" and k has shape (2, {n_k}, 4)")):
        call(q, k, v)


@pytest.mark.parametrize("fn", [softmax_attention, kernel_attention, linear_attention],
                         ids=lambda f: f.__name__)
def test_non_causal_takes_more_or_fewer_queries_than_keys(fn):
    for n_q, n_k in ((5, 9), (9, 5)):
        q, k, v = qkv(n_q, n_k)
        assert fn(q, k, v).shape == (2, n_q, 3)


# --- shapes: the last two dims non-empty ----------------------------------------------------------------
@pytest.mark.parametrize(("which", "shape"), [("q", (2, 0, 4)), ("q", (2, 5, 0)), ("k", (2, 0, 4)),
                                              ("v", (2, 5, 0))], ids=["q-N0", "q-d0", "k-N0", "v-dv0"])
def test_empty_token_or_feature_dims_are_refused(which, shape):
    args = dict(zip("qkv", qkv(), strict=True))
    args[which] = np.zeros(shape)
    if which == "k":
        args["v"] = np.zeros((2, 0, 3))
    with pytest.raises(ValueError, match=says(
            f"{which} has shape {shape}: the last two dims must be non-empty")):
        kernel_attention(args["q"], args["k"], args["v"])


# --- dtypes and devices ---------------------------------------------------------------------------------
def test_inputs_of_two_float_dtypes_are_refused_by_name():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=says("k has dtype float32 but q has dtype float64")):
        linear_attention(q, k.astype(np.float32), v)
    with pytest.raises(TypeError, match=says("v has dtype float16 but q has dtype float64")):
        softmax_attention(q, k, v.astype(np.float16))


@pytest.mark.parametrize("dtype", [np.complex128, np.int32, np.bool_])
def test_non_float_numpy_dtypes_are_refused(dtype):
    q, k, v = (x.astype(dtype) for x in qkv())
    wording = f"q has dtype {np.dtype(dtype)}: attention needs floating inputs"
    with pytest.raises(TypeError, match=says(wording)):
        kernel_attention(q, k, v)


def test_torch_inputs_on_two_devices_are_refused_by_name():
    q, k, v = (torch.from_numpy(x) for x in qkv())
    with pytest.raises(TypeError, match=says("k is on meta but q is on cpu")):
        softmax_attention(q, k.to("meta"), v)


def test_torch_complex_inputs_are_refused():
    q, k, v = (torch.from_numpy(x).to(torch.complex128) for x in qkv())
    wording = "q has dtype torch.complex128: attention needs floating inputs"
    with pytest.raises(TypeError, match=says(wording)):
        linear_attention(q, k, v)


# --- eps: a positive finite number ----------------------------------------------------------------------
EPS_CALLS = {
    "kernel_attention": lambda eps: kernel_attention(*qkv(), eps=eps),
    "linear_attention": lambda eps: linear_attention(*qkv(), eps=eps),
    "linear_attention-causal": lambda eps: linear_attention(*qkv(), causal=True, eps=eps),
    "decayed_kernel_attention": lambda eps: decayed_kernel_attention(*qkv(), eps=eps),
    "decayed_linear_attention": lambda eps: decayed_linear_attention(*qkv(), eps=eps),
    "LinearAttentionState": lambda eps: LinearAttentionState(4, 3, eps=eps),
}
eps_calls = pytest.mark.parametrize("call", list(EPS_CALLS.values()), ids=list(EPS_CALLS))


@eps_calls
def test_eps_accepts_the_smallest_positive_float_ints_and_numpy_scalars(call):
    for eps in (5e-324, 1, np.float32(1e-3), np.int64(2)):
        call(eps)


@eps_calls
@pytest.mark.parametrize("eps", [0.0, -1e-300, float("inf"), float("nan")], ids=["0", "neg", "inf", "nan"])
def test_eps_refuses_zero_negative_and_non_finite(call, eps):
    with pytest.raises(ValueError, match=says(f"eps must be a positive finite float, got {eps!r}")):
        call(eps)


@eps_calls
@pytest.mark.parametrize("eps", [True, "1e-6", None], ids=["bool", "str", "None"])
def test_eps_refuses_booleans_and_non_numbers(call, eps):
    with pytest.raises(TypeError, match=says(f"eps must be a positive float, got {type(eps).__name__}")):
        call(eps)


# --- flags: real booleans -------------------------------------------------------------------------------
FLAG_CALLS = {
    "causal-softmax": lambda x: softmax_attention(*qkv(), causal=x),
    "causal-kernel": lambda x: kernel_attention(*qkv(), causal=x),
    "causal-linear": lambda x: linear_attention(*qkv(), causal=x),
    "return_weights-softmax": lambda x: softmax_attention(*qkv(), return_weights=x),
    "return_weights-kernel": lambda x: kernel_attention(*qkv(), return_weights=x),
    "return_weights-decayed": lambda x: decayed_kernel_attention(*qkv(), return_weights=x),
    "normalize-decayed_kernel": lambda x: decayed_kernel_attention(*qkv(), normalize=x),
    "normalize-decayed_linear": lambda x: decayed_linear_attention(*qkv(), normalize=x),
    "return_state-decayed": lambda x: decayed_linear_attention(*qkv(), return_state=x),
    "normalize_qk-delta": lambda x: delta_rule_attention(*qkv(), normalize_qk=x),
    "return_state-delta": lambda x: delta_rule_attention(*qkv(), return_state=x),
    "orthogonal-performer": lambda x: Performer(4, 8, orthogonal=x),
    "stabilize-performer": lambda x: Performer(4, 8, stabilize=x),
}


@pytest.mark.parametrize("name", list(FLAG_CALLS))
def test_flags_take_booleans_and_numpy_booleans_only(name):
    call, arg = FLAG_CALLS[name], name.split("-")[0]
    for ok in (True, False, np.bool_(True)):
        call(ok)
    for bad in (1, "no", None):
        with pytest.raises(TypeError, match=says(f"{arg} must be True or False, got {bad!r}")):
            call(bad)


# --- sizes: positive integers ---------------------------------------------------------------------------
INT_CALLS = {
    "chunk_size-linear": lambda n: linear_attention(*qkv(), causal=True, method="chunked", chunk_size=n),
    "chunk_size-decayed": lambda n: decayed_linear_attention(*qkv(), method="chunked", chunk_size=n),
    "chunk_size-delta": lambda n: delta_rule_attention(*qkv(), method="chunked", chunk_size=n),
    "d-LinearAttentionState": lambda n: LinearAttentionState(n, 3),
    "d_v-LinearAttentionState": lambda n: LinearAttentionState(4, n),
    "d-KVCache": lambda n: KVCache(n, 3),
    "d_v-KVCache": lambda n: KVCache(4, n),
    "d-performer": lambda n: get_feature_map("performer", d=n),
    "num_features-performer": lambda n: get_feature_map("performer", d=4, num_features=n),
    "max_len-cosformer": lambda n: get_feature_map("cosformer", max_len=n),
}


@pytest.mark.parametrize("name", list(INT_CALLS))
def test_sizes_accept_one_and_numpy_integers_and_refuse_zero_bools_and_floats(name):
    call, arg = INT_CALLS[name], name.split("-")[0]
    call(1)
    call(np.int64(3))
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match=says(f"{arg} must be a positive integer, got {bad!r}")):
            call(bad)


def test_chunk_size_one_is_the_exact_chunked_form():
    q, k, v = qkv(7)
    for got in (linear_attention(q, k, v, causal=True, method="chunked", chunk_size=1),
                decayed_linear_attention(q, k, v, decay=1.0, method="chunked", chunk_size=1)):
        assert_close(got, kernel_attention(q, k, v, causal=True), what="chunk_size=1")


# --- scale: None or a finite number ---------------------------------------------------------------------
SCALE_CALLS = {"softmax_attention": lambda s: softmax_attention(*qkv(), scale=s),
               "KVCache": lambda s: KVCache(4, 3, scale=s)}


@pytest.mark.parametrize("call", list(SCALE_CALLS.values()), ids=list(SCALE_CALLS))
def test_scale_accepts_zero_negative_and_integers_and_refuses_the_rest(call):
    for ok in (0, -2.5, np.int64(3), np.float32(0.5), None):
        call(ok)
    for bad in (True, "0.5", float("inf"), float("-inf"), float("nan")):
        with pytest.raises(ValueError, match=says(f"scale must be a finite number or None, got {bad!r}")):
            call(bad)


def test_softmax_with_scale_zero_averages_the_values():
    q, k, v = qkv()
    assert_close(softmax_attention(q, k, v, scale=0), np.broadcast_to(v.mean(-2, keepdims=True), (2, 5, 3)),
                 what="scale=0: uniform weights")


# --- per-token parameters: beta in [0, 2], decay in (0, 1] ----------------------------------------------
def test_beta_zero_is_accepted_and_writes_nothing():
    q, k, v = qkv(9)
    for method in ("recurrent", "quadratic", "chunked"):
        for zero in (0.0, 0, np.zeros((2, 9))):
            y, S = delta_rule_attention(q, k, v, zero, method=method, chunk_size=4, return_state=True)
            assert not y.any() and not S.any(), f"beta=0 wrote into the state ({method})"


def test_beta_two_is_accepted_and_every_form_agrees():
    q, k, v = qkv(9)
    expected = delta_rule_attention(q, k, v, 2.0, method="recurrent")
    assert np.isfinite(expected).all()
    for method in ("quadratic", "chunked"):
        assert_close(delta_rule_attention(q, k, v, 2, method=method, chunk_size=4), expected, what=method)


@pytest.mark.parametrize("beta", [2 + 1e-9, -1e-9, float("inf"), float("nan")])
def test_beta_just_outside_zero_two_is_refused(beta):
    with pytest.raises(ValueError, match=says(f"beta must lie in [0, 2], got {beta!r}")):
        delta_rule_attention(*qkv(), beta)


def test_per_token_betas_take_both_ends_and_count_the_entries_outside():
    q, k, v = qkv()
    beta = np.array([[0.0, 2.0, 1.0, 0.0, 2.0]] * 2)
    delta_rule_attention(q, k, v, beta)
    beta[0, 1], beta[1, 3], beta[1, 4] = 2 + 1e-9, -1e-9, np.nan
    with pytest.raises(ValueError, match=says("beta must lie in [0, 2]; 3 of its entries do not")):
        delta_rule_attention(q, k, v, beta)


def test_decay_one_is_accepted_and_is_plain_causal_linear_attention():
    q, k, v = qkv(9)
    expected = linear_attention(q, k, v, causal=True)
    for fn in (decayed_kernel_attention, decayed_linear_attention):
        assert_close(fn(q, k, v, decay=1), expected, what=f"{fn.__name__}(decay=1)")
        assert_close(fn(q, k, v, decay=np.ones((2, 9))), expected, what=f"{fn.__name__}(gates of 1)")


def test_the_smallest_positive_decay_is_accepted_and_forgets_everything_before():
    q, k, v = qkv(9)
    for fn in (decayed_kernel_attention, decayed_linear_attention):
        assert_close(fn(q, k, v, decay=5e-324), v, what=f"{fn.__name__}: each token sees only itself")


@pytest.mark.parametrize("fn", [decayed_kernel_attention, decayed_linear_attention], ids=lambda f: f.__name__)
@pytest.mark.parametrize("decay", [1 + 1e-9, 0.0, -0.5, float("nan")])
def test_decay_just_outside_zero_one_is_refused(fn, decay):
    with pytest.raises(ValueError, match=says(f"decay must lie in (0, 1], got {decay!r}")):
        fn(*qkv(), decay=decay)


def test_per_token_gates_count_the_entries_outside():
    q, k, v = qkv()
    gates = np.full((2, 5), 0.5)
    gates[0, 0], gates[1, 2], gates[1, 4] = 0.0, 1 + 1e-9, np.inf
    with pytest.raises(ValueError, match=says("decay must lie in (0, 1]; 3 of its 10 entries do not")):
        decayed_linear_attention(q, k, v, decay=gates)


@pytest.mark.parametrize(("value", "error", "wording"), [
    (True, TypeError, "beta must be a number in [0, 2] or an array like q's of shape (2, 5) (one per token),"
                      " got bool"),
    (torch.ones(2, 5, dtype=torch.float64), TypeError, "got Tensor"),
    (np.ones((2, 1)), ValueError, "beta has shape (2, 1) but q has shape (2, 5, 4): per-token values need"
                                  " shape (2, 5)"),
], ids=["bool", "other-backend", "shape"])
def test_per_token_values_are_numbers_or_arrays_like_q(value, error, wording):
    with pytest.raises(error, match=says(wording)):
        delta_rule_attention(*qkv(), value)


def test_beta_on_another_device_is_refused_where_it_enters():
    # a beta on another device used to fail deep inside Tensor.item(); the "meta" device needs no GPU
    q, k, v = (torch.from_numpy(x) for x in qkv())
    with pytest.raises(TypeError, match=says("beta is on meta but the inputs are on cpu")):
        delta_rule_attention(q, k, v, torch.ones(2, 5, dtype=torch.float64, device="meta"))
    state = DeltaRuleState(4, 3, batch_shape=(2,), like=q)
    with pytest.raises(TypeError, match=says("beta_t is on meta but the inputs are on cpu")):
        state.update(k[:, 0], v[:, 0], torch.ones(2, dtype=torch.float64, device="meta"))
    with pytest.raises(TypeError, match=says("log_decay is on meta but the inputs are on cpu")):
        decayed_linear_attention(q, k, v, log_decay=torch.zeros(2, 5, dtype=torch.float64, device="meta"))


@pytest.mark.parametrize("cls", [LinearAttentionState, KVCache, DecayedState, DeltaRuleState],
                         ids=lambda c: c.__name__)
def test_a_token_on_another_device_is_refused_not_copied(cls):
    state = cls(4, 3, like=torch.zeros(1, dtype=torch.float64))
    k = torch.ones(4, dtype=torch.float64, device="meta")
    with pytest.raises(TypeError, match=says(f"k_t is on meta but this {cls.__name__} is on cpu")):
        (state.append if cls is KVCache else state.update)(k, torch.ones(3, dtype=torch.float64),
                                                            *STATES[cls])


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_integer_or_boolean_betas_and_gates_are_refused(backend):
    wrap = torch.from_numpy if backend == "torch" else np.asarray
    q, k, v = (wrap(x) for x in qkv())
    ones = np.ones((2, 5), dtype=np.int64)
    with pytest.raises(TypeError, match=r"beta has dtype .*int64: it must be a floating"):
        delta_rule_attention(q, k, v, wrap(ones))
    with pytest.raises(TypeError, match=r"decay has dtype .*bool: it must be a floating"):
        decayed_linear_attention(q, k, v, decay=wrap(ones.astype(bool)))


def test_the_step_rules_are_the_top_level_names_and_live_beside_their_rules():
    import linattn_core
    import linattn_core.decay
    import linattn_core.delta
    import linattn_core.streaming

    assert linattn_core.delta_rule_attention is linattn_core.delta.delta_rule_attention
    assert linattn_core.DecayedState is linattn_core.decay.DecayedState
    assert linattn_core.DeltaRuleState is linattn_core.delta.DeltaRuleState
    # streaming holds the plain state and the cache; it imports neither rule (one import direction)
    assert not hasattr(linattn_core.streaming, "DecayedState")


# --- streaming states: batch_shape of positive sizes ----------------------------------------------------
STATES = {LinearAttentionState: (), KVCache: (), DecayedState: (0.5,), DeltaRuleState: (1.0,)}  # step's extra
states = pytest.mark.parametrize("cls", list(STATES), ids=lambda c: c.__name__)


@states
def test_batch_shape_of_size_one_is_accepted(cls):
    rng = np.random.default_rng(0)
    y = cls(4, 3, batch_shape=(1,)).step(*rng.standard_normal((2, 1, 4)), rng.standard_normal((1, 3)),
                                         *STATES[cls])
    assert y.shape == (1, 3)


@states
@pytest.mark.parametrize("shape", [(0,), (2, 0), (-1,)])
def test_batch_shape_with_a_zero_or_negative_size_is_refused(cls, shape):
    with pytest.raises(ValueError, match=says(f"batch_shape must hold positive sizes, got {shape}")):
        cls(4, 3, batch_shape=shape)


@states
@pytest.mark.parametrize("shape", [3, (2.5,), ("2",), (True,)], ids=["int", "float", "str", "bool"])
def test_batch_shape_that_is_not_a_tuple_of_ints_is_refused(cls, shape):
    with pytest.raises(ValueError, match=says(f"batch_shape must be a tuple of ints, got {shape!r}")):
        cls(4, 3, batch_shape=shape)


@pytest.mark.parametrize("cls", [LinearAttentionState, KVCache], ids=lambda c: c.__name__)
def test_state_dtype_and_like_are_checked(cls):
    for dtype in ("nonsense", np.int64, np.complex128, torch.int32):
        wording = f"dtype must be a numpy or torch floating dtype, got {dtype!r}"
        with pytest.raises(TypeError, match=says(wording)):  # names dtype=, not like=
            cls(4, 3, dtype=dtype)
    with pytest.raises(TypeError, match=says("like must be a numpy array or a torch tensor, got list")):
        cls(4, 3, like=[1.0])


def test_tokens_of_the_other_backend_are_refused():
    state, cache = LinearAttentionState(4, 3), KVCache(4, 3)
    k_t, v_t = torch.zeros(4, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    with pytest.raises(TypeError, match=says("k_t is a Tensor but this LinearAttentionState holds numpy")):
        state.update(k_t, v_t)
    with pytest.raises(TypeError, match=says("k_t is a Tensor but this KVCache holds numpy")):
        cache.append(k_t, v_t)
    with pytest.raises(TypeError, match=says("q_t is a ndarray but this KVCache holds torch")):
        KVCache(4, 3, like=k_t).attend(np.zeros(4))


def test_an_empty_cache_refuses_to_attend():
    with pytest.raises(ValueError, match=says("KVCache.attend: the cache is empty")):
        KVCache(4, 3).attend(np.zeros(4))


# --- feature-map options --------------------------------------------------------------------------------
def test_feature_map_names_and_options_are_checked():
    with pytest.raises(ValueError, match=says("unknown feature map None; choose one of")):
        get_feature_map(None)
    with pytest.raises(TypeError, match=says("feature map 'elu+1': ")):
        get_feature_map("elu+1", max_len=3)
    with pytest.raises(ValueError, match=says("kind must be 'positive' or 'trig', got 'cos'")):
        get_feature_map("performer", d=4, kind="cos")
    with pytest.raises(ValueError, match=says("Performer.redraw needs the input dimension")):
        Performer().redraw(1)
    with pytest.raises(ValueError, match=says("built for d=4, but the input has last dim 5")):
        linear_attention(*qkv(d=5), get_feature_map("performer", d=4))
    wording = "feature_map must be a name, a FeatureMap or a callable, got int"
    with pytest.raises(TypeError, match=says(wording)):
        as_feature_map(3)


def test_cosformer_takes_the_last_position_before_max_len_and_refuses_a_negative_one():
    phi = get_feature_map("cosformer", max_len=3)
    assert phi(np.ones((1, 2)), offset=2).shape == (1, 4)  # position 2 = M - 1
    with pytest.raises(ValueError, match=says("cosformer: positions 3..3 do not fit in max_len M=3")):
        phi(np.ones((1, 2)), offset=3)
    with pytest.raises(ValueError, match=says("cosformer: positions -1..-1 do not fit in max_len M=3")):
        phi(np.ones((1, 2)), offset=-1)


def test_callable_feature_maps_must_return_the_same_kind_and_leading_shape():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=says("returned list for a ndarray input")):
        kernel_attention(q, k, v, lambda x: x.tolist())
    with pytest.raises(TypeError, match=says("returned ndarray for a Tensor input")):
        kernel_attention(*(torch.from_numpy(x) for x in (q, k, v)), lambda x: x.numpy())
    with pytest.raises(ValueError, match=says("maps shape (2, 5, 4) to (2, 4, 5)")):
        kernel_attention(q, k, v, lambda x: np.swapaxes(x, -1, -2))
