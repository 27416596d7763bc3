"""The non-causal form of the compiled kernel (``kernel.noncausal``) against the float64 references.

``out = phi(Q) S / max(phi(Q) z, eps)`` with ``S = phi(K)^T V``, ``z = colsum phi(K)``: every instruction set
this CPU runs, each feature map the kernel has, cross-attention (``N_q != N_k``), widths that are not a
multiple of the vector length, fewer sequences than threads (the keys and queries split into segments),
hypothesis for the shapes. The tolerance is the worst-case rounding bound of the sums
(:func:`_tolerances.summation_bound`), which holds whatever order the kernel, its threads or a BLAS add
in. Then how ``linear_attention`` chooses it, and its gradients (autograd through the reference form).
Ids read like the rest of the suite's: ``avx512-elu+1-B3-Q65-K70-D17x5-t2``.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from _tolerances import assert_close, summation_bound
from hypothesis import given
from hypothesis import strategies as st

from linattn_core import fast, get_feature_map, kernel_attention, linear_attention
from linattn_core.fast import kernel

torch = pytest.importorskip("torch")

ISAS = list(kernel.isas())
KERNEL_MAPS = ["identity", "relu", "elu+1"]
KERNEL_ON = bool(ISAS) and os.environ.get("LINATTN_NATIVE", "1") != "0"
needs_kernel = pytest.mark.skipif(
    not KERNEL_ON, reason="no compiled kernel in use here (not built, no AVX2, or LINATTN_NATIVE=0)")
pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")

CASES = [  # (sequences, queries, keys, d, d_v)
    (1, 1, 1, 8, 5),
    (2, 63, 63, 8, 8),
    (3, 65, 70, 17, 5),
    (8, 200, 200, 64, 64),
    (1, 5, 1000, 64, 64),  # one sequence, many keys: the keys are split between the threads
    (2, 513, 40, 16, 33),
    (3, 130, 777, 65, 70),
    (1, 300, 129, 3, 1),
]


def case_id(c) -> str:
    nb, nq, nk, d, d_v = c
    return f"B{nb}-Q{nq}-K{nk}-D{d}x{d_v}"


def qkv(nb, nq, nk, d, d_v, *, seed, map_name):
    """Seeded float32 inputs: signed, except for identity, whose features are the inputs themselves and
    must keep the denominators positive (1 + 0.25 x, x standard normal)."""
    rng = np.random.default_rng(seed)
    shift, scale = (1.0, 0.25) if map_name == "identity" else (0.0, 1.0)
    q = torch.from_numpy(shift + scale * rng.standard_normal((nb, nq, d))).float()
    k = torch.from_numpy(shift + scale * rng.standard_normal((nb, nk, d))).float()
    v = torch.from_numpy(rng.standard_normal((nb, nk, d_v))).float()
    return q, k, v


def run(q, k, v, map_name, *, threads=None, isa=None, eps=1e-6):
    out, den = torch.empty(q.shape[0], q.shape[1], v.shape[-1]), torch.empty(q.shape[:2])
    kernel.noncausal(q, k, v, get_feature_map(map_name), eps, out, den, threads=threads, isa=isa)
    return out, den


@functools.cache
def _expected(map_name, case):
    """Inputs, the float64 reference (out, den) and the rounding bounds of out and den."""
    nb, nq, nk, d, d_v = case
    q, k, v = qkv(nb, nq, nk, d, d_v, seed=nq + 7 * nk + d, map_name=map_name)
    phi = get_feature_map(map_name)
    fq, fk, v64 = phi(q.double()), phi(k.double()), v.double()
    den = fq @ fk.sum(-2)[..., None]  # (B, N_q, 1)
    out = kernel_attention(q.double(), k.double(), v64, phi)
    # the kernel sums d products per score and N_k per state entry: d + N_k terms a number, plus phi's
    # own rounding (a few u, covered by d + N_k >= 1) and the division
    terms = d + nk + 4
    bound_num = summation_bound(fq.abs() @ (fk.abs().transpose(-1, -2) @ v64.abs()), terms, "float32")
    bound_den = summation_bound(fq.abs() @ fk.abs().sum(-2)[..., None], terms, "float32")
    # num'/den' - num/den = (e_num - out e_den) / den', and the reciprocal and the product round twice more
    # (a query with no positive feature, relu's phi(q) = 0, has num = den = 0 exactly, and out = 0 / eps)
    den_low = den.numpy() - bound_den
    exact_zero = bound_den == 0
    assert (exact_zero | (den_low > 0)).all(), "the inputs must keep the denominators clear of their rounding"
    with np.errstate(divide="ignore", invalid="ignore"):
        mag = np.abs(out.numpy())
        bound_out = (bound_num + mag * bound_den) / den_low + 3 * 2.0**-24 * mag
    bound_out = np.where(exact_zero, 0.0, bound_out)
    return (q, k, v), out, den[..., 0], bound_out, bound_den[..., 0]


def _check(out, den, expected, what):
    _, ref_out, ref_den, bound_out, bound_den = expected
    err_out = np.abs(out.double().numpy() - ref_out.numpy())
    err_den = np.abs(den.double().numpy() - ref_den.numpy())
    assert (err_out <= bound_out).all(), f"{what}: out off by {err_out.max():.2e}"
    assert (err_den <= bound_den).all(), f"{what}: den off by {err_den.max():.2e}"


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3], ids=lambda t: f"t{t}")
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("map_name", KERNEL_MAPS)
@pytest.mark.parametrize("isa", ISAS)
def test_noncausal_kernel_equals_the_reference(isa, map_name, case, threads):
    expected = _expected(map_name, case)
    q, k, v = expected[0]
    out, den = run(q, k, v, map_name, threads=threads, isa=isa)
    _check(out, den, expected, f"{isa} {map_name} {case_id(case)} t{threads}")


@needs_kernel
def test_noncausal_kernel_gives_the_same_bits_for_any_thread_count_with_whole_sequences():
    # with at least as many sequences as threads, each sequence is one member's from start to end
    q, k, v = qkv(4, 300, 500, 32, 32, seed=1, map_name="elu+1")
    one = run(q, k, v, "elu+1", threads=1)[0]
    assert torch.equal(one, run(q, k, v, "elu+1", threads=2)[0])
    assert torch.equal(one, run(q, k, v, "elu+1", threads=4)[0])


@needs_kernel
@given(
    nb=st.integers(1, 4),
    nq=st.integers(1, 200),
    nk=st.integers(1, 300),
    d=st.integers(1, 40),
    d_v=st.integers(1, 40),
    threads=st.integers(1, 4),
    map_name=st.sampled_from(KERNEL_MAPS),
    isa=st.sampled_from(ISAS or ["none"]),
)
def test_any_shape_equals_the_reference(nb, nq, nk, d, d_v, threads, map_name, isa):
    case = (nb, nq, nk, d, d_v)
    expected = _expected(map_name, case)
    q, k, v = expected[0]
    out, den = run(q, k, v, map_name, threads=threads, isa=isa)
    _check(out, den, expected, f"{isa} {map_name} {case_id(case)} t{threads}")


@needs_kernel
def test_eps_clamps_as_the_reference_does():
    # identity features with signed inputs: some denominators are near zero or negative
    rng = np.random.default_rng(3)
    q, k, v = (torch.from_numpy(rng.standard_normal((2, 50, 8))).float() for _ in range(3))
    out, den = run(q, k, v, "identity", eps=0.5)
    fq, fk = q.double(), k.double()
    ref_den = (fq @ fk.sum(-2)[..., None])[..., 0]
    ref = (fq @ (fk.transpose(-1, -2) @ v.double())) / ref_den.clamp_min(0.5)[..., None]
    assert_close(den, ref_den, dtype=torch.float32, what="unclamped denominators")
    assert_close(out, ref, dtype=torch.float32, what="outputs divided by max(den, eps)")


# --- how linear_attention chooses it ----------------------------------------------------------------
def spy_on(monkeypatch) -> list:
    """Record the feature map of every kernel.noncausal call."""
    calls = []
    real = kernel.noncausal

    def spy(*args, **kwargs):
        calls.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, "noncausal", spy)
    return calls


@needs_kernel
@pytest.mark.parametrize("n", [7, 1000], ids=lambda n: f"T{n}")
@pytest.mark.parametrize("map_name", KERNEL_MAPS)
def test_linear_attention_runs_the_kernel_for_cpu_float32(monkeypatch, map_name, n):
    calls = spy_on(monkeypatch)
    q, k, v = qkv(2, n, n, 16, 8, seed=n, map_name=map_name)
    q4, k4, v4 = (x.view(1, 2, n, -1) for x in (q, k, v))  # (batch, heads, N, .)
    assert fast.which(q4, k4, v4, get_feature_map(map_name), causal=False, method="auto").forward == "kernel"
    out = linear_attention(q4, k4, v4, map_name)
    assert [c.name for c in calls] == [map_name]
    expected = kernel_attention(q4.double(), k4.double(), v4.double(), map_name)
    assert_close(out, expected, dtype=torch.float32, what=f"linear_attention non-causal {map_name} T{n}")


@needs_kernel
def test_precomputed_features_go_through_the_kernel_as_identity(monkeypatch):
    calls = spy_on(monkeypatch)
    q, k, v = qkv(2, 300, 200, 8, 8, seed=6, map_name="elu+1")
    phi = get_feature_map("performer", d=8, num_features=32, seed=0)
    out = linear_attention(q, k, v, phi)
    assert [c.name for c in calls] == ["identity"]
    expected = kernel_attention(q.double(), k.double(), v.double(), phi)
    assert_close(out, expected, dtype=torch.float32, what="performer features through the kernel")


@needs_kernel
@pytest.mark.parametrize("why", ["float64", "softplus", "switched off", "autograd"])
def test_other_calls_keep_their_forms(monkeypatch, why):
    calls = spy_on(monkeypatch)
    q, k, v = qkv(2, 600, 600, 8, 8, seed=7, map_name="elu+1")
    fmap = "softplus" if why == "softplus" else "elu+1"
    if why == "float64":
        q, k, v = (x.double() for x in (q, k, v))
    if why == "autograd":
        q.requires_grad_()
    if why == "switched off":
        with kernel.switched_off():
            out = linear_attention(q, k, v, fmap)
    else:
        out = linear_attention(q, k, v, fmap)
    assert calls == []
    expected = kernel_attention(*(x.detach().double() for x in (q, k, v)), fmap)
    assert_close(out, expected, dtype=out.dtype, what=f"non-causal without the kernel ({why})")


@pytest.mark.parametrize("map_name", ["elu+1", "relu"])
def test_gradients_agree_with_the_quadratic_reference(map_name):
    # with autograd the non-causal form runs linear.noncausal (two matmuls); its gradients in float64
    # equal autograd through kernel_attention's N x N form, and gradcheck holds
    rng = np.random.default_rng(11)
    q, k = (torch.from_numpy(rng.standard_normal((2, 3, 37, 6))).requires_grad_() for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((2, 3, 41, 5))[:, :, :37]).requires_grad_()
    dout = torch.from_numpy(rng.standard_normal((2, 3, 37, 5)))
    got = torch.autograd.grad(linear_attention(q, k, v, map_name), (q, k, v), dout)
    want = torch.autograd.grad(kernel_attention(q, k, v, map_name), (q, k, v), dout)
    for name, a, b in zip("qkv", got, want, strict=True):
        assert_close(a, b, what=f"d{name}, {map_name}")
    small = [x[:1, :1, :9].detach().clone().requires_grad_() for x in (q, k, v)]
    assert torch.autograd.gradcheck(lambda q, k, v: linear_attention(q, k, v, map_name), small)


@needs_kernel
@pytest.mark.parametrize("bad", ["dtype", "shape", "contiguous", "device"])
def test_bad_arguments_are_refused_before_the_compiled_code(bad):
    q, k, v = qkv(2, 10, 12, 8, 4, seed=0, map_name="elu+1")
    out, den = torch.empty(2, 10, 4), torch.empty(2, 10)
    phi = get_feature_map("elu+1")
    if bad == "dtype":
        k = k.double()
    elif bad == "shape":
        v = v[:, :11]
    elif bad == "contiguous":
        out = torch.empty(2, 4, 10).transpose(1, 2)
    else:
        q = q.numpy()
    with pytest.raises((TypeError, ValueError)):
        kernel.noncausal(q, k, v, phi, 1e-6, out, den)
