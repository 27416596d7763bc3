"""Gates per key channel (GLA): ``S_t = diag(g_t) S_{t-1} + phi(k_t) v_t^T``, every form against a literal.

The literal below multiplies the gates a pair has lived through one by one (no logs, no cumulative
sums), so it shares nothing with the library's log-space forms. The quadratic reference is checked
against it; the recurrent and chunked forms against the reference, for one gate, a gate per token and
a gate per token and channel, given as ``decay`` or as ``log_decay``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _tolerances import assert_close, to_numpy

from linattn_core import fast, get_feature_map
from linattn_core.decay import decayed_kernel_attention, decayed_linear_attention

LENGTHS = (1, 63, 64, 65, 200)
GATES = ("gamma", "per-token", "per-channel", "log-per-channel")
FORMS = [("recurrent", 64), ("chunked", 7), ("chunked", 48), ("chunked", 64), ("auto", 500)]
D, D_V = 6, 5  # elu+1: d_phi = d


def _inputs(n, *, batch=(2,), seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, *batch, n, D))
    v = rng.standard_normal((*batch, n, D_V))
    gates = rng.uniform(0.5, 1.0, (*batch, n, D))  # one per token and channel
    return q, k, v, gates


def _gate_kwargs(kind, gates):
    """The gates of a test as keyword arguments, and the same gates per channel (..., N, d_phi)."""
    if kind == "gamma":
        return {"decay": 0.8}, np.full(gates.shape, 0.8)
    if kind == "per-token":
        return {"decay": gates[..., 0]}, np.repeat(gates[..., :1], gates.shape[-1], -1)
    if kind == "per-channel":
        return {"decay": gates}, gates
    return {"log_decay": np.log(gates)}, gates


def _elu1(x):
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _literal(q, k, v, gates, normalize, eps=1e-6):
    """w_ij = sum_c phi(q_i)_c phi(k_j)_c prod_{j < l <= i} g_lc, by products of the gates themselves.

    q, k: (..., N, d), v: (..., N, d_v), gates: (..., N, d_phi); elu+1 features; float64 numpy.
    """
    fq, fk = _elu1(q), _elu1(k)
    n = q.shape[-2]
    w = np.zeros(q.shape[:-1] + (n,))
    for j in range(n):
        lived = np.cumprod(gates[..., j + 1 :, :], axis=-2)  # (..., N - j - 1, f): prod_{j < l <= i}
        through = np.concatenate([np.ones_like(gates[..., :1, :]), lived], axis=-2)  # i = j .. N-1
        w[..., j:, j] = (fq[..., j:, :] * fk[..., j, None, :] * through).sum(-1)
    if normalize:
        w = w / np.maximum(w.sum(-1, keepdims=True), eps)
    return w @ v


def _literal_state(k, v, gates):
    """S = sum_j diag(prod_{l > j} g_l) phi(k_j) v_j^T and z likewise: the state after the last token."""
    fk = _elu1(k)
    after = np.concatenate([np.cumprod(gates[..., ::-1, :], -2)[..., ::-1, :][..., 1:, :],
                            np.ones_like(gates[..., :1, :])], axis=-2)  # (..., N, f): prod_{l > j}
    return np.swapaxes(fk * after, -1, -2) @ v, (fk * after).sum(-2)


# --- the forms agree ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 9, 33, 65], ids=lambda n: f"T{n}")
@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
def test_quadratic_reference_equals_the_literal_products(n, kind, normalize):
    q, k, v, gates = _inputs(n)
    kwargs, per_channel = _gate_kwargs(kind, gates)
    got = decayed_kernel_attention(q, k, v, normalize=normalize, **kwargs)
    assert_close(got, _literal(q, k, v, per_channel, normalize), what=f"reference vs literal, {kind}")


@pytest.mark.parametrize("n", LENGTHS, ids=lambda n: f"T{n}")
@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
@pytest.mark.parametrize(("method", "chunk"), FORMS, ids=[f"{m}-C{c}" for m, c in FORMS])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_forms_equal_the_quadratic_reference(n, kind, normalize, method, chunk, backend):
    q, k, v, gates = _inputs(n)
    kwargs, _ = _gate_kwargs(kind, gates)
    expected = decayed_kernel_attention(q, k, v, normalize=normalize, **kwargs)
    if backend == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
        kwargs = {key: torch.from_numpy(x) if isinstance(x, np.ndarray) else x for key, x in kwargs.items()}
    got = decayed_linear_attention(q, k, v, normalize=normalize, method=method, chunk_size=chunk, **kwargs)
    assert type(got) is type(q)
    assert_close(got, expected, what=f"{method} C={chunk} vs reference, {kind}, {backend}")


def test_equal_channels_are_one_gate_per_token_and_log_decay_is_decay():
    q, k, v, gates = _inputs(40, batch=(2, 3))
    per_token = gates[..., 0]
    same = np.repeat(per_token[..., None], D, -1)
    expected = decayed_linear_attention(q, k, v, decay=per_token, chunk_size=16)
    got = decayed_linear_attention(q, k, v, decay=same, chunk_size=16)
    assert_close(got, expected, what="equal channels")
    assert_close(decayed_linear_attention(q, k, v, log_decay=np.log(per_token), chunk_size=16), expected,
                 what="log_decay per token")
    assert_close(decayed_linear_attention(q, k, v, log_decay=np.log(0.8)),
                 decayed_linear_attention(q, k, v, decay=0.8), what="log_decay as a number")


def test_default_gate_is_gamma_0_9():
    q, k, v, _ = _inputs(20)
    got = decayed_linear_attention(q, k, v)
    assert_close(got, decayed_linear_attention(q, k, v, decay=0.9), what="default")


def test_per_channel_gates_follow_the_feature_dimension():
    # a Performer with 16 random features has d_phi = 16 != d: the gates' last dim is d_phi
    phi = get_feature_map("performer", d=D, num_features=16, seed=1)
    assert phi.output_dim(D) == 16
    q, k, v, _ = _inputs(30)
    gates = np.random.default_rng(2).uniform(0.5, 1.0, (2, 30, 16))
    expected = decayed_kernel_attention(q, k, v, phi, decay=gates)
    got = decayed_linear_attention(q, k, v, phi, decay=gates, chunk_size=8)
    assert_close(got, expected, what="d_phi = 16")
    with pytest.raises(ValueError, match=r"\(\.\.\., N, d_phi\) = \(2, 30, 16\)"):
        decayed_linear_attention(q, k, v, phi, decay=gates[..., :D])


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_final_state_is_equal_across_forms(kind, backend):
    q, k, v, gates = _inputs(37, batch=(2, 3))
    kwargs, per_channel = _gate_kwargs(kind, gates)
    S_ref, z_ref = _literal_state(k, v, per_channel)
    if backend == "torch":
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
        kwargs = {key: torch.from_numpy(x) if isinstance(x, np.ndarray) else x for key, x in kwargs.items()}
    for method, chunk in (("recurrent", 64), ("chunked", 8), ("chunked", 64)):
        out, (S, z) = decayed_linear_attention(q, k, v, method=method, chunk_size=chunk, return_state=True,
                                               **kwargs)
        assert tuple(S.shape) == (2, 3, D, D_V) and tuple(z.shape) == (2, 3, D)
        assert_close(S, S_ref, what=f"S, {method} C={chunk}, {kind}")
        assert_close(z, z_ref, what=f"z, {method} C={chunk}, {kind}")
        assert_close(out, decayed_linear_attention(q, k, v, method=method, chunk_size=chunk, **kwargs),
                     what="the output does not change with return_state")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gates_near_zero_over_a_long_sequence_stay_finite(dtype):
    # half the channels forget almost everything at every token (g = e^-70 ~ 4e-31), half barely
    # forget: products over 500 tokens underflow to 0 long before the end, exponents never overflow
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 2, 500, D))
    log_g = np.where(np.arange(D) < D // 2, -70.0, -1e-3) * np.ones((2, 500, D))
    q, k, v, log_g = (torch.from_numpy(x).to(dtype).requires_grad_() for x in (q, k, v, log_g))
    outs = {}
    for method, chunk in (("recurrent", 64), ("chunked", 64), ("chunked", 100)):
        for normalize in (True, False):
            out = decayed_linear_attention(q, k, v, log_decay=log_g, normalize=normalize, method=method,
                                           chunk_size=chunk)
            grads = torch.autograd.grad(out.sum(), (q, k, v, log_g))
            assert torch.isfinite(out).all(), (method, chunk, normalize)
            assert all(torch.isfinite(g).all() for g in grads), (method, chunk, normalize)
            outs[method, chunk, normalize] = out.detach()
    gates = torch.exp(log_g.detach())  # the same gates written as numbers in (0, 1]
    assert torch.isfinite(decayed_linear_attention(q, k, v, decay=gates, chunk_size=64)).all()
    if dtype == torch.float32:
        return  # finite is the point; 500 unnormalized float32 sums differ by more than 2e-5 anyway
    for normalize in (True, False):
        for key in (("chunked", 64), ("chunked", 100)):
            assert_close(outs[(*key, normalize)], outs["recurrent", 64, normalize], dtype=dtype,
                         what=f"{key} vs recurrent, gates near 0")
    out = decayed_linear_attention(q, k, v, decay=gates, chunk_size=64)
    assert_close(out, outs["chunked", 64, True], dtype=dtype, what="decay=exp(log_decay)")


# torch and gates per channel: the chunked form runs the speed tier's factored scores where a chunk's fall
# R = -sum log g fits the dtype's exponent range (R <= log(max): float32 88.7, float64 709), else the
# log-space form; both must be the reference, values and gradients. (dtype, log g of the steep channels,
# which form runs)
BRANCHES = [
    (torch.float64, -0.3, "factored"),
    (torch.float32, -0.3, "factored"),
    (torch.float32, -5.5, "factored"),  # R = 15 * 5.5 = 82.5: the edge of float32's range
    (torch.float32, -12.0, "log-space"),  # R = 180: the factors e^(+-90) overflow float32 ...
    (torch.float64, -12.0, "factored"),  # ... but not float64
    (torch.float64, -50.0, "log-space"),  # R = 750: e^(+-375) overflows float64
]


@pytest.mark.parametrize(("dtype", "steep", "form"), BRANCHES,
                         ids=[f"{str(d)[6:]}-logg{s}-{f}" for d, s, f in BRANCHES])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
def test_per_channel_gates_take_the_factored_form_only_where_it_is_safe(dtype, steep, form, normalize):
    chunk, n = 16, 70  # chunks of 16 tokens (GLA's), the last one short
    q, k, v, gates, dout = _torch_inputs(n, seed=8)
    log_g = torch.where(torch.arange(D) < D // 2, steep, gates.log())  # half the channels steep
    low = [x.to(dtype).requires_grad_() for x in (q, k, v, log_g)]
    ins = [x.detach().double().requires_grad_() for x in low]  # the reference sees the same rounded inputs
    expected = decayed_kernel_attention(*ins[:3], log_decay=ins[3], normalize=normalize)
    want = torch.autograd.grad(expected, ins, dout)
    out = decayed_linear_attention(*low[:3], log_decay=low[3], normalize=normalize, method="chunked",
                                   chunk_size=chunk)
    got = torch.autograd.grad(out, low, dout.to(dtype))
    assert out.dtype == dtype
    assert_close(out, expected, dtype=dtype, what=f"out, {form}")
    for name, a, b in zip(("q", "k", "v", "log_decay"), got, want, strict=True):
        assert_close(a, b, dtype=dtype, what=f"d{name}, {form}")
    declined = fast.gated_chunked(*low, chunk) is None  # the form is chosen by the gates alone
    assert declined == (form == "log-space"), f"expected the {form} form to run"


# --- gradients ---------------------------------------------------------------------------------------


def _torch_inputs(n, batch=(2,), seed=4):
    q, k, v, gates = _inputs(n, batch=batch, seed=seed)
    dout = np.random.default_rng(seed + 1).standard_normal(v.shape)
    return [torch.from_numpy(x) for x in (q, k, v, gates, dout)]


@pytest.mark.parametrize("n", [1, 63, 65], ids=lambda n: f"T{n}")
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
@pytest.mark.parametrize(("method", "chunk"), [("recurrent", 64), ("chunked", 16), ("chunked", 48)])
@pytest.mark.parametrize("gate_arg", ["decay", "log_decay"])
def test_gradients_equal_autograd_through_the_reference(n, normalize, method, chunk, gate_arg):
    q, k, v, gates, dout = _torch_inputs(n)
    g = (gates if gate_arg == "decay" else gates.log()).requires_grad_()
    ins = [x.requires_grad_() for x in (q, k, v)] + [g]
    expected = decayed_kernel_attention(q, k, v, normalize=normalize, **{gate_arg: g})
    want = torch.autograd.grad(expected, ins, dout)
    out = decayed_linear_attention(q, k, v, normalize=normalize, method=method, chunk_size=chunk,
                                   **{gate_arg: g})
    got = torch.autograd.grad(out, ins, dout)
    for name, a, b in zip(("q", "k", "v", gate_arg), got, want, strict=True):
        assert_close(a, b, what=f"d{name}, {method} C={chunk}")


@pytest.mark.parametrize("method", ["recurrent", "chunked"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
def test_gradcheck_per_channel(method, normalize):
    q, k, v, gates, _ = _torch_inputs(9, seed=6)
    args = [x.requires_grad_() for x in (q, k, v, gates)]

    def fn(a, b, c, g):
        return decayed_linear_attention(a, b, c, decay=g, normalize=normalize, method=method, chunk_size=4)

    assert torch.autograd.gradcheck(fn, args)
    log_args = [*args[:3], gates.detach().log().requires_grad_()]
    assert torch.autograd.gradcheck(
        lambda a, b, c, lg: decayed_linear_attention(a, b, c, log_decay=lg, method=method, chunk_size=4),
        log_args)


def test_gates_per_token_train_through_linear_grad_and_per_channel_through_autograd():
    q, k, v, gates, _ = _torch_inputs(20)
    q.requires_grad_()
    per_token = decayed_linear_attention(q, k, v, decay=gates[..., 0], chunk_size=8)
    per_channel = decayed_linear_attention(q, k, v, decay=gates, chunk_size=8)
    assert "CausalLinearAttention" in type(per_token.grad_fn).__name__
    assert "CausalLinearAttention" not in type(per_channel.grad_fn).__name__
    with torch.no_grad():
        assert decayed_linear_attention(q, k, v, decay=gates).grad_fn is None


# --- bad inputs --------------------------------------------------------------------------------------

ACCEPTED = (r"the accepted shapes are \(\) \(one number\), \(\.\.\., N\) = \(2, 5\),"
            r" \(\.\.\., N, d_phi\) = \(2, 5, 6\)")
LOG_RANGE = r"log_decay must lie in \(-inf, 0\]"


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"decay": np.full((2, 5, 7), 0.5)}, ValueError, r"decay has shape \(2, 5, 7\); " + ACCEPTED),
        ({"decay": np.full((2, 5, 6, 1), 0.5)}, ValueError, r"decay has shape \(2, 5, 6, 1\); " + ACCEPTED),
        ({"decay": np.full((5, 6), 0.5)}, ValueError, r"decay has shape \(5, 6\); " + ACCEPTED),
        ({"log_decay": np.zeros((2, 4))}, ValueError, r"log_decay has shape \(2, 4\); " + ACCEPTED),
        ({"decay": np.full((2, 5, 6), 1.5)}, ValueError, r"decay must lie in \(0, 1\]; 60 of its 60"),
        ({"decay": np.zeros((2, 5, 6))}, ValueError, r"decay must lie in \(0, 1\]; 60 of its 60"),
        ({"decay": np.full((2, 5, 6), -0.5)}, ValueError, r"decay must lie in \(0, 1\]"),
        ({"decay": np.where(np.arange(6) == 2, np.nan, 0.5) * np.ones((2, 5, 6))}, ValueError,
         r"decay must lie in \(0, 1\]; 10 of its 60"),
        ({"decay": np.where(np.arange(6) == 2, np.inf, 0.5) * np.ones((2, 5, 6))}, ValueError,
         r"decay must lie in \(0, 1\]; 10 of its 60"),
        ({"decay": float("nan")}, ValueError, r"decay must lie in \(0, 1\], got nan"),
        ({"log_decay": 0.5}, ValueError, r"log_decay must lie in \(-inf, 0\], got 0.5"),
        ({"log_decay": -float("inf")}, ValueError, r"log_decay must lie in \(-inf, 0\], got -inf"),
        ({"log_decay": np.full((2, 5, 6), 0.1)}, ValueError, LOG_RANGE + "; 60 of its 60"),
        ({"log_decay": np.full((2, 5), -np.inf)}, ValueError, LOG_RANGE + "; 10 of its 10"),
        ({"decay": 0.5, "log_decay": -0.1}, ValueError, "give decay or log_decay, not both"),
        ({"decay": [0.5] * 5}, TypeError, r"decay must be a number in \(0, 1\] or a numpy array of shape"),
        ({"decay": True}, TypeError, "decay must be a number"),
        ({"log_decay": torch.zeros(2, 5)}, TypeError, r"log_decay must be a number .* or a numpy array"),
    ],
)
@pytest.mark.parametrize("fn", [decayed_linear_attention, decayed_kernel_attention])
def test_bad_gates(kwargs, exc, match, fn):
    q, k, v, _ = _inputs(5)
    with pytest.raises(exc, match=match):
        fn(q, k, v, **kwargs)


def test_numpy_gates_for_torch_inputs_are_refused():
    q, k, v, gates = (torch.from_numpy(x) for x in _inputs(5))
    with pytest.raises(TypeError, match=r"decay must be a number .* or a torch tensor of shape"):
        decayed_linear_attention(q, k, v, decay=gates.numpy())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_gates_on_another_device_are_refused():
    q, k, v, gates = (torch.from_numpy(x) for x in _inputs(5))
    with pytest.raises(TypeError, match="decay is on cuda"):
        decayed_linear_attention(q, k, v, decay=gates.cuda())


def test_float32_inputs_keep_their_dtype_with_float64_gates():
    q, k, v, gates = (torch.from_numpy(x) for x in _inputs(30))
    out = decayed_linear_attention(q.float(), k.float(), v.float(), decay=gates, chunk_size=8)
    assert out.dtype == torch.float32
    assert_close(out, decayed_kernel_attention(q, k, v, decay=gates), dtype="float32", what="float32")
    assert np.isfinite(to_numpy(out)).all()
