"""The O(N)-memory backward pass (linattn_core.linear_grad) against autograd through the references.

Gradients are compared in float64 with the quadratic references (kernel_attention and
decayed_kernel_attention) differentiated by autograd: the token-by-token recurrence of the equations
(``causal_backward_recurrent``), and the autograd Function that training runs; gradcheck and gradgradcheck
on small sizes. The speed tier's blocked engine, which the Function runs, is held to both in
``tests/fast/test_blocked.py``. The memory of a forward + backward is measured (peak resident set) in
``tests/machine/test_measured_memory.py``.
"""

from __future__ import annotations

import _causal_cases as cases
import pytest
from _tolerances import assert_close

torch = pytest.importorskip("torch")

from linattn_core import fast, get_feature_map, kernel_attention, linear_attention, linear_grad  # noqa: E402
from linattn_core.decay import decayed_kernel_attention, decayed_linear_attention  # noqa: E402

F64 = cases.F64
ELU = get_feature_map("elu+1")


def _function(q, k, v, phi, *, log_g=None, normalize=True, chunk_size=64):
    """The autograd Function with the plan linear_attention would hand it."""
    plan = fast.which(q, k, v, phi, causal=True, method="chunked", log_g=log_g, normalize=normalize)
    return linear_grad.causal_linear_attention(q, k, v, phi, plan, log_g=log_g, normalize=normalize,
                                               chunk_size=chunk_size)


@pytest.mark.parametrize("n", [1, 7, 65])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("decay", [None, "constant", "gated"])
def test_the_recurrence_of_the_equations_equals_autograd_through_the_quadratic_form(n, normalize, decay):
    # causal_backward_recurrent takes the features: the reference differentiates with respect to them
    q, k, v, gates, dout = cases.inputs((2, 3), n)
    phi_q, phi_k = (ELU(x).detach().requires_grad_() for x in (q, k))
    log_g = cases.log_g(decay, gates)
    log_g = None if log_g is None else log_g.requires_grad_()
    ins = [phi_q, phi_k, v.requires_grad_()] + ([log_g] if decay == "gated" else [])
    gates = None if log_g is None else log_g.exp()
    expected = cases.reference(phi_q, phi_k, v, "identity", decay, gates, normalize)
    want = torch.autograd.grad(expected, ins, dout)
    got = linear_grad.causal_backward_recurrent(phi_q, phi_k, v, dout, log_g=log_g, normalize=normalize)
    assert (got[3] is None) == (decay is None)
    for name, g, w in zip(("dphi_q", "dphi_k", "dv", "dlog_g"), got, want, strict=False):
        assert_close(g, w, what=f"{name}, n={n}, decay={decay}, normalize={normalize}")


@pytest.mark.filterwarnings("ignore:.*denominators:RuntimeWarning")
@pytest.mark.parametrize("fm", ["relu", "softplus", "performer", "identity"])
def test_other_feature_maps(fm):
    # relu: some rows have den = 0 < eps, where the clamp is active and passes no gradient;
    # performer is not elementwise (its features enter whole, through ordinary autograd)
    q, k, v, _, dout = cases.inputs((2,), 70, seed=1)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    normalize = fm != "identity"
    phi = linattn_feature(fm)
    expected = cases.reference(q, k, v, phi, None, None, normalize)
    out = _function(q, k, v, phi, normalize=normalize, chunk_size=16)
    assert_close(out, expected)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), dout),
                         torch.autograd.grad(expected, (q, k, v), dout), strict=True):
        assert_close(got, want)


def linattn_feature(name):
    options = {"d": 5, "num_features": 8, "seed": 0} if name == "performer" else {}
    return get_feature_map(name, **options)


def test_relu_rows_with_an_active_clamp_are_covered():
    q, *_ = cases.inputs((2,), 70, seed=1)
    phi_q = torch.relu(q)
    assert bool((phi_q.sum(-1) == 0).any())  # the test above does meet den = 0 rows


@pytest.mark.parametrize("decay", [None, "gated"])
@pytest.mark.parametrize("normalize", [True, False])
def test_gradcheck(decay, normalize):
    q, k, v, gates, _ = cases.inputs((2,), 7, d=3, d_v=2, seed=2)
    q, k, v, gates = (x.requires_grad_() for x in (q, k, v, gates))

    def f(q, k, v, gates):
        return _function(q, k, v, ELU, log_g=cases.log_g(decay, gates), normalize=normalize, chunk_size=3)

    assert torch.autograd.gradcheck(f, (q, k, v, gates))


@pytest.mark.parametrize("decay", [None, "gated"])
def test_gradgradcheck(decay):
    q, k, v, gates, _ = cases.inputs((1,), 5, d=2, d_v=2, seed=3)
    q, k, v, gates = (x.requires_grad_() for x in (q, k, v, gates))

    def f(q, k, v, gates):
        return _function(q, k, v, ELU, log_g=cases.log_g(decay, gates), chunk_size=2)

    assert torch.autograd.gradgradcheck(f, (q, k, v, gates))


def test_linear_attention_uses_it_when_an_input_needs_a_gradient():
    q, k, v, _, dout = cases.inputs((2, 2), 65, seed=4)
    q.requires_grad_()
    expected = torch.autograd.grad(kernel_attention(q, k, v, causal=True), q, dout)[0]
    for method in ("auto", "chunked", "recurrent", "cumsum"):
        out = linear_attention(q, k, v, causal=True, method=method, chunk_size=16)
        # method is honoured: the chunked forms train through the hand-written backward, the two
        # other forms through plain autograd of their reference (which keeps what they allocate)
        hand = "CausalLinearAttention" in type(out.grad_fn).__name__
        assert hand == (method in ("auto", "chunked")), method
        (got,) = torch.autograd.grad(out, q, dout)
        assert_close(got, expected)
    with torch.no_grad():
        assert linear_attention(q, k, v, causal=True).grad_fn is None
    out = linear_attention(q.detach(), k, v, causal=True)  # nothing needs a gradient
    assert out.grad_fn is None


@pytest.mark.parametrize("normalize", [True, False])
def test_decayed_linear_attention_uses_it(normalize):
    q, k, v, gates, dout = cases.inputs((3,), 50, seed=5)
    gates.requires_grad_()
    out = decayed_linear_attention(q, k, v, decay=gates, normalize=normalize, chunk_size=16)
    assert "CausalLinearAttention" in type(out.grad_fn).__name__
    expected = decayed_kernel_attention(q, k, v, decay=gates, normalize=normalize)
    assert_close(torch.autograd.grad(out, gates, dout)[0], torch.autograd.grad(expected, gates, dout)[0])
    # return_state keeps autograd through the forms (the Function returns no state)
    out, _ = decayed_linear_attention(q, k, v, decay=gates, normalize=normalize, return_state=True)
    assert "CausalLinearAttention" not in type(out.grad_fn).__name__


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("gate", ["decay=1", "log_decay=0", "ones-per-token", "ones-learned"])
def test_gates_of_one_train_through_the_plain_form_unless_they_are_learned(gate, normalize, monkeypatch):
    q, k, v, gates, dout = cases.inputs((2, 3), 50, seed=6, dtype=torch.float32)
    q.requires_grad_()
    ones = torch.ones_like(gates, requires_grad=gate == "ones-learned")
    kwargs = {"decay=1": {"decay": 1.0}, "log_decay=0": {"log_decay": 0.0}}.get(gate, {"decay": ones})
    seen = []
    real = linear_grad.causal_linear_attention
    monkeypatch.setattr(linear_grad, "causal_linear_attention",
                        lambda *a, **kw: seen.append(kw["log_g"]) or real(*a, **kw))
    out = decayed_linear_attention(q, k, v, normalize=normalize, chunk_size=16, **kwargs)
    assert len(seen) == 1 and (seen[0] is None) == (gate != "ones-learned"), gate  # which form trained
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    expected = decayed_kernel_attention(q64, k64, v64, decay=1.0, normalize=normalize)
    assert_close(out, expected.detach(), dtype="float32")
    learned = [ones] if gate == "ones-learned" else []
    dq, *dg = torch.autograd.grad(out, [q, *learned], dout)
    assert_close(dq, torch.autograd.grad(expected, q64, dout.double())[0], dtype="float32")
    assert all(torch.isfinite(g).all() and g.abs().max() > 0 for g in dg)  # a learned gate keeps its gradient


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_strong_gates_train_like_the_reference(normalize, dtype):
    # gates of 0.05 to 0.2: over a chunk of 32, lam falls to about -70, past the factored form's range
    # in float32 (the direct form runs), within it in float64
    q, k, v, _, dout = cases.inputs((2,), 70, seed=8)
    # the log-gates are the inputs: d/dg = (d/dlog g) / g would scale float32's rounding by 1/g
    log_g = (0.05 + 0.15 * torch.rand(2, 70, generator=torch.Generator().manual_seed(9), dtype=F64)).log()
    inputs = [x.to(dtype).requires_grad_() for x in (q, k, v, log_g)]
    out = decayed_linear_attention(*inputs[:3], log_decay=inputs[3], normalize=normalize, chunk_size=32)
    exact = [x.requires_grad_() for x in (q, k, v, log_g)]
    expected = decayed_kernel_attention(*exact[:3], log_decay=exact[3], normalize=normalize)
    tol = "float32" if dtype == torch.float32 else "float64"
    assert_close(out, expected.detach(), dtype=tol)
    for got, want in zip(torch.autograd.grad(out, inputs, dout.to(dtype)),
                         torch.autograd.grad(expected, exact, dout), strict=True):
        assert_close(got, want, dtype=tol)


def test_forward_keeps_only_its_inputs():
    q, k, v, _, _ = cases.inputs((2,), 100, seed=6)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = _function(q, k, v, ELU, chunk_size=16)
    saved = [t for t in out.grad_fn.saved_tensors if t is not None]
    assert {t.data_ptr() for t in saved} <= {q.data_ptr(), k.data_ptr(), v.data_ptr()}


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_device_are_kept(dtype, device):
    q, k, v, gates, dout = cases.inputs((2,), 70, seed=7)
    expected_q = q.clone().requires_grad_()
    ref = kernel_attention(expected_q, k, v, causal=True)
    (want,) = torch.autograd.grad(ref, expected_q, dout)
    q, k, v, gates, dout = (x.to(device=device, dtype=dtype) for x in (q, k, v, gates, dout))
    q.requires_grad_()
    for out in (linear_attention(q, k, v, causal=True, chunk_size=16),
                decayed_linear_attention(q, k, v, decay=1.0, chunk_size=16)):
        (got,) = torch.autograd.grad(out, q, dout)
        assert out.dtype == got.dtype == dtype and got.device.type == out.device.type == device
        assert_close(got, want.to(dtype=dtype), dtype=dtype)
