"""The compiled backward pass (linattn_core/fast/_chunked_back.h) against autograd in float64.

Every instruction set, feature map and normalization, the shapes of the forward kernel's tests (chunk
sizes that do not divide N, widths that are not a multiple of the vector length, one token, one chunk
per token), fewer sequences than threads; the clamped denominators; how ``linear_attention`` hands a
float32 CPU backward to it (and what it keeps); every bad argument of the checked call.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _tolerances import assert_close
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernel import CASES, ISAS, KERNEL_MAPS, case_id, needs_kernel, qkv, spy_on

from linattn_core import fast, get_feature_map, kernel_attention, linear_attention
from linattn_core.fast import kernel

torch = pytest.importorskip("torch")
pytestmark = [needs_kernel, pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")]


def reference_grads(q, k, v, dout, map_name, normalize, eps=1e-6):
    """dq, dk, dv by autograd through the float64 quadratic form, from the same float32 inputs."""
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    if normalize:
        out = kernel_attention(q, k, v, map_name, causal=True, eps=eps)
    else:
        phi = get_feature_map(map_name)
        out = torch.tril(phi(q) @ phi(k).transpose(-1, -2)) @ v
    return torch.autograd.grad(out, (q, k, v), dout.double())


def assert_grads(got, want, what):
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        assert g.dtype == torch.float32 and g.shape == w.shape, f"{what}: {name} {g.dtype} {tuple(g.shape)}"
        # a gradient sums up to N products: compare it relative to its largest entry
        scale = w.abs().max().clamp_min(1.0)
        assert_close(g / scale, w / scale, dtype=torch.float32, what=f"{what}: {name}")


def inputs(case, map_name, seed):
    nb, n, d, d_v, _ = case
    q, k, v = qkv(nb, n, d, d_v, seed=seed, map_name=map_name)
    dout = torch.from_numpy(np.random.default_rng(seed + 1).standard_normal((nb, n, d_v))).float()
    return q, k, v, dout


@functools.cache
def _inputs_and_reference_grads(map_name, case, normalize):
    """The inputs of a case and the float64 reference gradients, computed once for every ISA and thread
    count."""
    q, k, v, dout = inputs(case, map_name, seed=case[1] + case[2])
    return (q, k, v, dout), reference_grads(q, k, v, dout, map_name, normalize)


@pytest.mark.parametrize("threads", [1, 3], ids=lambda t: f"t{t}")
@pytest.mark.parametrize("normalize", [True, False], ids=["normalized", "numerator"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("map_name", KERNEL_MAPS)
@pytest.mark.parametrize("isa", ISAS)
def test_backward_equals_autograd_through_the_reference(isa, map_name, case, normalize, threads):
    (q, k, v, dout), want = _inputs_and_reference_grads(map_name, case, normalize)
    got = kernel.chunked_backward(q.clone(), k.clone(), v.clone(), dout.clone(), get_feature_map(map_name),
                                  1e-6, case[4], normalize, threads=threads, isa=isa)
    assert_grads(got, want, f"{isa} backward, {map_name}, {case_id(case)}, normalize={normalize}, t{threads}")


@settings(max_examples=25, deadline=None)
@given(nb=st.integers(1, 4), n=st.integers(1, 150), d=st.integers(1, 40), d_v=st.integers(1, 40),
       C=st.integers(1, 80), threads=st.integers(1, 5), normalize=st.booleans(),
       map_name=st.sampled_from(KERNEL_MAPS), isa=st.sampled_from(ISAS or ["none"]))
def test_any_shape_equals_autograd(nb, n, d, d_v, C, threads, normalize, map_name, isa):
    q, k, v, dout = inputs((nb, n, d, d_v, C), map_name, seed=nb * n + d)
    got = kernel.chunked_backward(q, k, v, dout, get_feature_map(map_name), 1e-6, C, normalize,
                                  threads=threads, isa=isa)
    want = reference_grads(q, k, v, dout, map_name, normalize)
    assert_grads(got, want, f"{isa} B{nb}-T{n}-D{d}x{d_v}-C{C}")


@pytest.mark.parametrize("isa", ISAS)
def test_clamped_denominators_pass_no_gradient_to_them(isa):
    # relu features of all-negative keys are zero: den = 0 < eps is clamped, and torch's clamp_min
    # passes no gradient where it is active; half the tokens are such, half ordinary
    q, k, v, dout = inputs((2, 96, 8, 8, 32), "relu", seed=3)
    k[:, ::2] = -k[:, ::2].abs() - 0.1
    q[:, :10] = -q[:, :10].abs() - 0.1  # and rows whose queries see nothing
    got = kernel.chunked_backward(q, k, v, dout, get_feature_map("relu"), 1e-6, 32, True, isa=isa)
    assert_grads(got, reference_grads(q, k, v, dout, "relu", True), f"{isa} clamped denominators")
    assert torch.isfinite(torch.cat([g.flatten() for g in got])).all()


def test_threads_and_instruction_sets_agree():
    q, k, v, dout = inputs((5, 333, 24, 40, 50), "elu+1", seed=11)
    phi = get_feature_map("elu+1")
    base = kernel.chunked_backward(q, k, v, dout, phi, 1e-6, 50, True, threads=1, isa=ISAS[0])
    for isa in ISAS:
        for threads in (1, 2, 7):
            other = kernel.chunked_backward(q, k, v, dout, phi, 1e-6, 50, True, threads=threads, isa=isa)
            for a, b in zip(other, base, strict=True):  # one sequence per thread: the same sums
                if isa == ISAS[0]:
                    assert torch.equal(a, b), f"{isa}, {threads} threads: not bitwise equal to 1 thread"
                else:
                    assert_close(a, b, what=f"{isa} vs {ISAS[0]}")


# --- through linear_attention -------------------------------------------------------------------


def spy_on_backward(monkeypatch):
    return spy_on(monkeypatch, "chunked_backward", 4)


@pytest.mark.parametrize("map_name", ["elu+1", "relu", "performer", "cosformer"])
def test_linear_attention_trains_through_the_compiled_backward(monkeypatch, map_name):
    calls = spy_on_backward(monkeypatch)
    q, k, v, dout = inputs((2, 130, 16, 8, 64), "elu+1", seed=5)
    q, k, v = (x.view(2, 1, 130, -1).requires_grad_() for x in (q, k, v))  # batch dims are flattened
    out = linear_attention(q, k, v, map_name, causal=True, method="chunked")
    got = torch.autograd.grad(out, (q, k, v), dout.view(2, 1, 130, -1))
    assert len(calls) == 1, f"{map_name}: the compiled backward ran {len(calls)} times"
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    want = torch.autograd.grad(kernel_attention(q64, k64, v64, map_name, causal=True), (q64, k64, v64),
                               dout.view(2, 1, 130, -1).double())
    assert_grads(got, want, f"linear_attention({map_name}) gradients")


def test_double_backward_float64_and_switched_off_use_the_torch_form(monkeypatch):
    calls = spy_on_backward(monkeypatch)
    q, k, v, dout = inputs((1, 70, 8, 8, 64), "elu+1", seed=6)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = linear_attention(q, k, v, causal=True, method="chunked")
    (dq,) = torch.autograd.grad(out, (q,), dout, create_graph=True)  # double backward: differentiable ops
    dq.sum().backward()
    assert calls == [], "create_graph=True must keep the differentiable torch backward"
    with kernel.switched_off():
        torch.autograd.grad(linear_attention(q, k, v, causal=True, method="chunked"), (q,), dout)
    q64 = q.detach().double().requires_grad_()
    torch.autograd.grad(linear_attention(q64, k.double(), v.double(), causal=True, method="chunked"), (q64,),
                        dout.double())
    assert calls == [], "the compiled backward is float32 and on only while the kernel is"


def test_gradients_are_the_callers_own():
    q, k, v, dout = inputs((2, 100, 8, 8, 64), "elu+1", seed=7)
    got = kernel.chunked_backward(q, k, v, dout, get_feature_map("elu+1"), 1e-6, 64, True)
    again = kernel.chunked_backward(q, k, v, dout, get_feature_map("elu+1"), 1e-6, 64, True)
    pointers = {g.untyped_storage().data_ptr() for g in (*got, *again)}
    assert len(pointers) == 6, "each gradient has storage of its own"
    got[0].zero_()
    assert not torch.equal(got[0], again[0])


# --- the checked call ---------------------------------------------------------------------------

def good():
    q, k, v, dout = inputs((2, 10, 4, 3, 8), "elu+1", seed=0)
    return {"Q": q, "K": k, "V": v, "dout": dout}


def call(t, phi="elu+1", C=8, eps=1e-6, **kw):
    phi = get_feature_map(phi)
    return kernel.chunked_backward(t["Q"], t["K"], t["V"], t["dout"], phi, eps, C, True, **kw)


@pytest.mark.parametrize("name", ["Q", "K", "V", "dout"])
def test_bad_tensors_are_refused_by_name(name):
    t = good()
    bad = dict(t, **{name: t[name].double()})
    with pytest.raises(TypeError, match=f"{name} must be a CPU float32 torch tensor"):
        call(bad)
    bad = dict(t, **{name: t[name].transpose(0, 1)})
    with pytest.raises(ValueError, match=f"{name} must be contiguous" if name != "Q" else "must"):
        call(bad)
    if name != "Q":
        bad = dict(t, **{name: t[name][:, :-1].contiguous()})
        with pytest.raises(ValueError, match=f"{name} must have shape"):
            call(bad)
    bad = dict(t, **{name: t[name].numpy()})
    with pytest.raises(TypeError, match=name):
        call(bad)


def test_bad_options_are_refused():
    t = good()
    with pytest.raises(ValueError, match="no feature map"):
        call(t, phi="softplus")
    for C in (0, -1, 2.5):
        with pytest.raises((TypeError, ValueError), match="chunk_size"):
            call(t, C=C)
    with pytest.raises(ValueError, match="eps"):
        call(t, eps=-1.0)
    with pytest.raises(ValueError, match="threads"):
        call(t, threads=0)
    with pytest.raises(ValueError, match="isa must be one of"):
        call(t, isa="sse2")


def test_the_plan_gives_the_compiled_backward_only_what_it_takes():
    q, k, v, dout = inputs((1, 20, 4, 4, 8), "identity", seed=1)  # positive: identity features
    trained, causal = q.clone().requires_grad_(), {"causal": True, "method": "chunked"}
    assert fast.which(trained, k, v, get_feature_map("softplus"), **causal).backward == "torch"
    as64 = (x.double() for x in (trained, k, v))
    assert fast.which(*as64, get_feature_map("identity"), **causal).backward == "torch"
    plan = fast.which(trained, k, v, get_feature_map("softplus"), **causal, features=True)
    assert plan.backward == "kernel"
    # features given (phi None), a chunk longer than the sequence, leading dims kept
    *got, dlog_g = fast.causal_backward(plan, *(x.view(1, 1, 20, 4) for x in (q, k, v)), None,
                                        dout.view(1, 1, 20, 4), None, 1e-6, 64, True)
    want = reference_grads(q, k, v, dout, "identity", True)
    assert_grads([g.view(1, 20, 4) for g in got], want, "features given, C > N")
    assert all(g.shape == (1, 1, 20, 4) for g in got) and dlog_g is None
