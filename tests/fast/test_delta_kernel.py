"""The compiled delta rule (linattn_core/fast/_delta.h) against the float64 reference, forward and backward.

Every instruction set; the sizes the kernel specialises (16, 32, 64) and others (widths that are not a
multiple of the vector length, d != d_v, one token, chunk sizes that do not divide N); one to many
sequences and threads; with and without a gradient for the final state; hypothesis for the shapes.
Then how ``delta_rule_attention`` hands float32 CPU tensors to it (and what it keeps for the reference:
float64, gradients of gradients, the kernel switched off), and every bad argument of the checked calls.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from _tolerances import assert_close
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernel import ISAS, needs_kernel

from linattn_core import fast
from linattn_core.delta import _chunked as reference_chunked
from linattn_core.delta import delta_rule_attention
from linattn_core.fast import kernel

torch = pytest.importorskip("torch")
pytestmark = needs_kernel

# (B, N, d, d_v, C): the specialised sizes, odd ones (d not a multiple of the vector length while d_v is),
# one token, C past N, C not dividing N
CASES = [(3, 37, 5, 7, 8), (4, 128, 16, 16, 64), (2, 96, 32, 32, 32), (2, 70, 64, 64, 64), (2, 1, 3, 2, 4),
         (4, 100, 33, 17, 16), (1, 9, 8, 8, 64), (5, 50, 16, 9, 7), (3, 29, 5, 16, 8), (2, 40, 21, 24, 16)]


def case_id(case):
    nb, n, d, d_v, C = case
    return f"B{nb}-T{n}-D{d}x{d_v}-C{C}"


def unit(x):
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)


@functools.cache
def inputs(case, seed=0):
    """Seeded float32 unit-row q, k, signed v, beta in (0, 2), and output gradients dy, dS."""
    nb, n, d, d_v, _ = case
    rng = np.random.default_rng(seed + n + d)
    q, k = (unit(torch.from_numpy(rng.standard_normal((nb, n, d))).float()) for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((nb, n, d_v))).float()
    beta = torch.from_numpy(rng.uniform(0.0, 2.0, (nb, n))).float()
    dy = torch.from_numpy(rng.standard_normal((nb, n, d_v))).float()
    dS = torch.from_numpy(rng.standard_normal((nb, d, d_v))).float()
    return q, k, v, beta, dy, dS


@functools.cache
def reference(case, with_dS):
    """y, S and the gradients of the float64 chunked reference from the same float32 inputs."""
    q, k, v, beta, dy, dS = inputs(case)
    x = [t.double().requires_grad_() for t in (q, k, v, beta)]
    y, S = reference_chunked(*x, case[-1])
    loss = (y * dy.double()).sum() + ((S * dS.double()).sum() if with_dS else 0.0)
    return y.detach(), S.detach(), torch.autograd.grad(loss, x)


def scaled_close(got, want, what):
    """float32 against float64, relative to the largest entry (a gradient sums up to N products)."""
    assert got.dtype == torch.float32 and got.shape == want.shape, f"{what}: {got.dtype} {tuple(got.shape)}"
    scale = want.abs().max().clamp_min(1.0)
    assert_close(got / scale, want / scale, dtype=torch.float32, what=what)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_forward_and_gradients_match_the_float64_reference(case, isa, threads):
    q, k, v, beta, dy, dS = inputs(case)
    C = case[-1]
    y, S, kept = kernel.delta_rule(q, k, v, beta, C, keep=True, threads=threads, isa=isa)
    y_ref, S_ref, _ = reference(case, False)
    scaled_close(y, y_ref, f"y {isa}")
    scaled_close(S, S_ref, f"S {isa}")
    for with_dS in (False, True):
        got = kernel.delta_rule_backward(q, k, v, beta, kept, dy, dS if with_dS else None, C, threads=threads,
                                         isa=isa)
        for name, g, w in zip(("dq", "dk", "dv", "dbeta"), got, reference(case, with_dS)[2], strict=True):
            scaled_close(g, w, f"{name} {isa} dS={with_dS}")


@pytest.mark.parametrize("isa", ISAS)
def test_the_thread_count_does_not_change_a_bit(isa):
    # each sequence is one thread's, in the same order: deterministic whatever the team
    q, k, v, beta, dy, dS = inputs(CASES[5])
    runs = []
    for threads in (1, 2, 5):
        y, S, kept = kernel.delta_rule(q, k, v, beta, 16, keep=True, threads=threads, isa=isa)
        runs.append((y, S, kept, *kernel.delta_rule_backward(q, k, v, beta, kept, dy, dS, 16, threads=threads,
                                                               isa=isa)))
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other, strict=True))


def test_the_kept_states_are_the_states_before_each_chunk():
    case = (2, 37, 5, 7, 8)
    q, k, v, beta, _, _ = inputs(case)
    _, _, kept = kernel.delta_rule(q, k, v, beta, 8, keep=True)
    assert kept.shape == (2, 5, 5, 7)
    assert torch.equal(kept[:, 0], torch.zeros(2, 5, 7)), "the first chunk starts from S = 0"
    for c in range(1, 5):
        _, S_before = reference_chunked(*(t[:, : 8 * c].double() for t in (q, k, v, beta)), 8)
        scaled_close(kept[:, c], S_before, f"kept[{c}]")
    assert kernel.delta_rule(q, k, v, beta, 8)[2] is None, "nothing is kept unless asked"


@settings(max_examples=25, deadline=None)
@given(nb=st.integers(1, 4), n=st.integers(1, 40), d=st.integers(1, 20), d_v=st.integers(1, 20),
       C=st.integers(1, 50), threads=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_any_shape_matches_the_reference(nb, n, d, d_v, C, threads, seed):
    rng = np.random.default_rng(seed)
    q, k = (unit(torch.from_numpy(rng.standard_normal((nb, n, d))).float()) for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((nb, n, d_v))).float()
    beta = torch.from_numpy(rng.uniform(0.0, 2.0, (nb, n))).float()
    dy = torch.from_numpy(rng.standard_normal((nb, n, d_v))).float()
    x = [t.double().requires_grad_() for t in (q, k, v, beta)]
    y_ref, S_ref = reference_chunked(*x, C)
    want = torch.autograd.grad((y_ref * dy.double()).sum(), x)
    y, S, kept = kernel.delta_rule(q, k, v, beta, C, keep=True, threads=threads)
    scaled_close(y, y_ref.detach(), "y")
    scaled_close(S, S_ref.detach(), "S")
    got = kernel.delta_rule_backward(q, k, v, beta, kept, dy, None, C, threads=threads)
    for name, g, w in zip(("dq", "dk", "dv", "dbeta"), got, want, strict=True):
        scaled_close(g, w, name)


def test_results_are_the_callers_own():
    q, k, v, beta, dy, _ = inputs(CASES[1])
    y, S, kept = kernel.delta_rule(q, k, v, beta, 64, keep=True)
    y2, S2, _ = kernel.delta_rule(q, k, v, beta, 64)
    grads = kernel.delta_rule_backward(q, k, v, beta, kept, dy, None, 64)
    grads2 = kernel.delta_rule_backward(q, k, v, beta, kept, dy, None, 64)
    tensors = (y, S, kept, y2, S2, *grads, *grads2)
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors)
    y.zero_()
    grads[0].zero_()
    assert not torch.equal(y, y2) and not torch.equal(grads[0], grads2[0])


# --- the hand-off from delta_rule_attention ------------------------------------------------------

def spy_on(monkeypatch, name):
    calls = []
    real = getattr(kernel, name)

    def spy(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, name, spy)
    return calls


def layer_inputs(seed=3, lead=(2, 3), n=50, d=8, d_v=6):
    rng = np.random.default_rng(seed)
    q, k = (torch.from_numpy(rng.standard_normal((*lead, n, d))).float() for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((*lead, n, d_v))).float()
    beta = torch.from_numpy(rng.uniform(0.0, 1.0, (*lead, n))).float()
    return q, k, v, beta


@pytest.mark.parametrize("method", ["chunked", "auto"])
def test_delta_rule_attention_trains_through_the_kernel(monkeypatch, method):
    forward, backward = spy_on(monkeypatch, "delta_rule"), spy_on(monkeypatch, "delta_rule_backward")
    q, k, v, beta = (x.requires_grad_() for x in layer_inputs())
    # a transposed (not contiguous) q, as a model's heads give it
    q_t = q.detach().transpose(0, 1).contiguous().transpose(0, 1).requires_grad_()
    y, S = delta_rule_attention(q_t, k, v, beta, method=method, chunk_size=16, return_state=True)
    dy = torch.randn_like(y)
    got = torch.autograd.grad((y * dy).sum() + S.sum(), (q_t, k, v, beta))
    assert forward == [(6, 50, 8)] and backward == [(6, 50, 8)], "lead dims flattened, one call each"
    x = [t.detach().double().requires_grad_() for t in (q, k, v, beta)]
    y64, S64 = delta_rule_attention(*x, method="recurrent", return_state=True)
    want = torch.autograd.grad((y64 * dy.double()).sum() + S64.sum(), x)
    scaled_close(y.detach(), y64.detach(), "y")
    scaled_close(S.detach(), S64.detach(), "S")
    for name, g, w in zip(("dq", "dk", "dv", "dbeta"), got, want, strict=True):
        scaled_close(g, w, name)


def test_without_grad_nothing_is_kept_and_a_scalar_beta_works(monkeypatch):
    calls = []
    real = kernel.delta_rule
    monkeypatch.setattr(kernel, "delta_rule", lambda *a, **kw: calls.append(kw.get("keep")) or real(*a, **kw))
    q, k, v, _ = layer_inputs()
    y = delta_rule_attention(q, k, v, 0.5, method="chunked", chunk_size=16)
    assert calls == [None], "a forward without gradients keeps no states"
    want = delta_rule_attention(q.double(), k.double(), v.double(), 0.5, method="recurrent")
    scaled_close(y, want, "y")


def test_what_the_kernel_does_not_take_runs_the_reference(monkeypatch):
    forward, backward = spy_on(monkeypatch, "delta_rule"), spy_on(monkeypatch, "delta_rule_backward")
    q, k, v, beta = (x.requires_grad_() for x in layer_inputs(n=20))
    dy = torch.randn(2, 3, 20, 6)
    # gradients of gradients: the kernel's forward, the reference's differentiable backward
    y = delta_rule_attention(q, k, v, beta, method="chunked", chunk_size=8)
    (dq,) = torch.autograd.grad((y * dy).sum(), (q,), create_graph=True)
    (ddk,) = torch.autograd.grad(dq.square().sum(), (k,))
    assert backward == [], "create_graph=True differentiates the reference form"
    x = [t.detach().double().requires_grad_() for t in (q, k, v, beta)]
    y64 = delta_rule_attention(*x, method="chunked", chunk_size=8)
    (dq64,) = torch.autograd.grad((y64 * dy.double()).sum(), (x[0],), create_graph=True)
    (ddk64,) = torch.autograd.grad(dq64.square().sum(), (x[1],))
    scaled_close(dq.detach(), dq64.detach(), "dq")
    scaled_close(ddk, ddk64, "d(|dq|^2)/dk")
    forward.clear()
    delta_rule_attention(*x, method="chunked")  # float64
    with kernel.switched_off():
        delta_rule_attention(q, k, v, beta, method="chunked")
    for method in ("recurrent", "quadratic"):  # asked for by name
        delta_rule_attention(q, k, v, beta, method=method)
    assert forward == [], "float64, switched off and the named forms run the reference"
    assert fast.delta_chunked(q.numpy(force=True), k, v, beta, 8, reference_chunked) is None


# --- the checked calls ---------------------------------------------------------------------------

def good():
    q, k, v, beta, dy, dS = inputs((2, 10, 4, 3, 4))
    kept = kernel.delta_rule(q, k, v, beta, 4, keep=True)[2]
    return {"Q": q, "K": k, "V": v, "beta": beta, "kept": kept, "dy": dy, "dS": dS}


def forward(t, C=4, **kw):
    return kernel.delta_rule(t["Q"], t["K"], t["V"], t["beta"], C, **kw)


def backward(t, C=4, **kw):
    return kernel.delta_rule_backward(t["Q"], t["K"], t["V"], t["beta"], t["kept"], t["dy"], t["dS"], C, **kw)


@pytest.mark.parametrize("name", ["Q", "K", "V", "beta", "kept", "dy", "dS"])
def test_bad_tensors_are_refused_by_name(name):
    t = good()
    calls = (forward, backward) if name in ("Q", "K", "V", "beta") else (backward,)
    for call in calls:
        with pytest.raises(TypeError, match=f"{name} must be a CPU float32 torch tensor"):
            call(dict(t, **{name: t[name].double()}))
        with pytest.raises(ValueError, match=f"{name} must be contiguous" if name != "Q" else "must"):
            call(dict(t, **{name: t[name].transpose(0, 1)}))
        if name != "Q":
            with pytest.raises(ValueError, match=f"{name} must have shape"):
                call(dict(t, **{name: t[name][:1].contiguous()}))
        with pytest.raises(TypeError, match=name):
            call(dict(t, **{name: t[name].numpy()}))


def test_bad_options_are_refused():
    t = good()
    for C in (0, -1, 2.5):
        with pytest.raises((TypeError, ValueError), match="chunk_size"):
            forward(t, C=C)
        with pytest.raises((TypeError, ValueError), match="chunk_size"):
            backward(t, C=C)
    with pytest.raises(ValueError, match="kept must have shape"):
        backward(t, C=2)  # kept for chunks of 4, not 2
    with pytest.raises(TypeError, match="kept must be a CPU float32 torch tensor"):
        backward(dict(t, kept=None))
    for call in (forward, backward):
        with pytest.raises(ValueError, match="threads"):
            call(t, threads=0)
        with pytest.raises(ValueError, match="isa must be one of"):
            call(t, isa="sse2")


def test_the_compiled_functions_check_their_sizes_too():
    # the C entry points trust addresses, not sizes: a zero size, an unknown instruction set, a short
    # workspace or no kept states is a ValueError there
    t = good()
    y, S = torch.empty(2, 10, 3), torch.empty(2, 4, 3)
    ptrs = [t[name].data_ptr() for name in ("Q", "K", "V", "beta")] + [y.data_ptr(), S.data_ptr(), 0]
    floats = kernel._chunked.delta_workspace(2, 10, 4, 3, 4, 1, None)
    ws = torch.empty(floats)
    good_sizes = (2, 10, 4, 3, 4, 1, None, ws.data_ptr(), floats)
    kernel._chunked.delta_forward(*ptrs, *good_sizes)
    scaled_close(y, forward(t)[0].double(), "direct call")
    for i, bad, match in [(0, 0, "bad sizes"), (2, 0, "bad sizes"), (6, "sse2", "not available"),
                          (8, floats - 1, "the workspace holds")]:
        args = list(good_sizes)
        args[i] = bad
        with pytest.raises(ValueError, match=match):
            kernel._chunked.delta_forward(*ptrs, *args)
    back_floats = kernel._chunked.delta_workspace(2, 10, 4, 3, 4, 1, None, True)
    assert back_floats > floats, "the backward holds a chunk's states"
    grads = [torch.empty_like(t[name]) for name in ("Q", "K", "V", "beta")]
    held = [t[name] for name in ("Q", "K", "V", "beta", "kept", "dy", "dS")]
    back = [x.data_ptr() for x in (*held, *grads)]
    ws = torch.empty(back_floats)
    kernel._chunked.delta_backward(*back, 2, 10, 4, 3, 4, 1, None, ws.data_ptr(), back_floats)
    with pytest.raises(ValueError, match="the workspace holds"):
        kernel._chunked.delta_backward(*back, 2, 10, 4, 3, 4, 1, None, ws.data_ptr(), back_floats - 1)
    back[4] = 0
    with pytest.raises(ValueError, match="needs the states its forward kept"):
        kernel._chunked.delta_backward(*back, 2, 10, 4, 3, 4, 1, None, ws.data_ptr(), back_floats)
