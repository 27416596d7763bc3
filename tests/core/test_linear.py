"""linear_attention (every method, every feature map) against the quadratic kernel_attention.

kernel_attention is itself checked against a literal reference in test_core_attention.py, so every
fast form here is transitively checked against the equations. Test ids read like fla's:
``elu+1-B2-T63-D8-chunked``.
"""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy

from linattn_core import get_feature_map, kernel_attention, linear_attention

# relu, cosformer and identity features can give denominators <= 0; the library warns (tested in
# test_core_errors.py). Here those rows are compared like any other, so the warning is only noise.
pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")

LENGTHS = [1, 63, 64, 65, 200]
CASES = [pytest.param((2,), n, 8, id=f"B2-T{n}-D8") for n in LENGTHS]
# Chunk sizes that divide none of the lengths above (7), all of them (1), some (16, 64), and chunk > N.
CHUNKS = [1, 7, 16, 64, 300]


# --- every form against the quadratic reference, float64 -------------------------------------------
# "auto" is the chunked form from 9 tokens on (same chunk size, same code): it runs only where it
# decides something, N <= 8 (the decision itself is pinned in test_defaults.py)
FORMS = ["recurrent", "cumsum", "chunked"]
CAUSAL_CASES = [pytest.param(*case.values, method, id=f"{case.id}-{method}") for case in CASES
                for method in FORMS + (["auto"] if case.values[1] <= 8 else [])]


@pytest.mark.parametrize(("batch", "n", "d", "causal_method"), CAUSAL_CASES)
def test_causal_matches_kernel_attention(mk, map_name, batch, n, d, causal_method):
    q, k, v = mk.qkv(batch, n, d=d, d_v=5, seed=n, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, d)
    out = linear_attention(q, k, v, phi, causal=True, method=causal_method, chunk_size=16)
    assert out.shape == v.shape and out.dtype == q.dtype
    expected = kernel_attention(q, k, v, phi, causal=True)
    assert_close(out, expected, what=f"causal {causal_method} [{map_name}] vs kernel_attention")


@pytest.mark.parametrize(("batch", "n", "d"), CASES)
def test_noncausal_matches_kernel_attention(mk, map_name, batch, n, d):
    q, k, v = mk.qkv(batch, n, d=d, d_v=5, seed=n, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, d)
    out = linear_attention(q, k, v, phi)
    assert_close(out, kernel_attention(q, k, v, phi), what=f"non-causal [{map_name}] vs kernel_attention")


@pytest.mark.parametrize("chunk_size", CHUNKS, ids=[f"C{c}" for c in CHUNKS])
@pytest.mark.parametrize("n", LENGTHS, ids=[f"T{n}" for n in LENGTHS])
@pytest.mark.parametrize("map_name", ["elu+1", "performer", "cosformer"])
def test_chunked_any_chunk_size(mk, map_name, n, chunk_size):
    q, k, v = mk.qkv((2,), n, d=8, d_v=5, seed=100 + n)
    phi = mk.feature_map(map_name, 8)
    out = linear_attention(q, k, v, phi, causal=True, method="chunked", chunk_size=chunk_size)
    assert_close(out, kernel_attention(q, k, v, phi, causal=True),
                 what=f"chunked(chunk_size={chunk_size}) N={n} [{map_name}]")


@pytest.mark.parametrize("method", ["full", *FORMS])
def test_batch_shapes(mk, batch, method):
    causal = method != "full"
    q, k, v = mk.qkv(batch, 37, d=8, d_v=5, seed=7)
    kw = {"causal": True, "method": method, "chunk_size": 16} if causal else {}
    out = linear_attention(q, k, v, **kw)
    assert out.shape == (*batch, 37, 5)
    assert_close(out, kernel_attention(q, k, v, causal=causal), what=f"batch={batch} {method}")
    # each batch entry on its own gives the same answer: batch dims are independent
    if batch:
        first = tuple(0 for _ in batch)
        alone = linear_attention(q[first], k[first], v[first], **kw)
        assert_close(out[first], alone, what="batch entry computed alone")


@pytest.mark.parametrize("eps", [1e-6, 0.5, 10.0])
@pytest.mark.parametrize("causal_method", FORMS)
def test_every_form_uses_the_same_eps_clamp(mk, causal_method, eps):
    # relu with d = 2 gives tiny and zero denominators, so a large eps clamps some rows and not others.
    q, k, v = mk.qkv((2,), 40, d=2, d_v=3, seed=8)
    out = linear_attention(q, k, v, "relu", causal=True, eps=eps, method=causal_method, chunk_size=16)
    assert_close(out, kernel_attention(q, k, v, "relu", causal=True, eps=eps),
                 what=f"{causal_method} eps={eps}")
    full = linear_attention(q, k, v, "relu", eps=eps)
    assert_close(full, kernel_attention(q, k, v, "relu", eps=eps), what=f"non-causal eps={eps}")


def test_cross_attention(mk, map_name, batch):
    q, k, v = mk.qkv(batch, n_q=11, n_k=29, d=8, d_v=5, seed=9, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, 8, max_len=29)  # cosformer: explicit M for cross-attention
    out = linear_attention(q, k, v, phi)
    assert out.shape == (*batch, 11, 5)
    assert_close(out, kernel_attention(q, k, v, phi), what=f"cross-attention N_q=11 N_k=29 [{map_name}]")


@pytest.mark.parametrize("causal_method", FORMS)
def test_causal_first_output_is_first_value(mk, causal_method, map_name):
    q, k, v = mk.qkv((2,), 20, seed=10, shift=1.0)  # shift: relu features overlap at t = 0
    out = linear_attention(q, k, v, mk.feature_map(map_name, 8), causal=True, method=causal_method)
    assert_close(out[..., 0, :], v[..., 0, :], what=f"y_0 == v_0 [{causal_method}, {map_name}]")


@pytest.mark.parametrize("causal_method", FORMS)
def test_names_and_callables(mk, causal_method):
    q, k, v = mk.qkv((2,), 30, seed=11)

    def custom(x):  # any callable (..., N, d) -> (..., N, d_phi)
        return np.concatenate([x * x, np.exp(-x * x)], axis=-1)

    for phi in ("softplus", custom):
        out = linear_attention(q, k, v, phi, causal=True, method=causal_method, chunk_size=8)
        assert_close(out, kernel_attention(q, k, v, phi, causal=True), what=f"feature_map={phi}")
    assert_close(linear_attention(q, k, v), kernel_attention(q, k, v, "elu+1"), what="default map")


# --- numpy against torch, devices ------------------------------------------------------------------
@pytest.mark.parametrize("method", ["full", *FORMS])
def test_torch_matches_numpy(mk, map_name, method, device):
    import torch

    causal = method != "full"
    kw = {"causal": True, "method": method, "chunk_size": 16} if causal else {}
    q, k, v = mk.qkv((2, 3), 45, d=8, d_v=5, seed=12, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, 8)
    out = linear_attention(*(torch.from_numpy(x).to(device) for x in (q, k, v)), phi, **kw)
    assert isinstance(out, torch.Tensor) and out.device.type == device and out.dtype == torch.float64
    assert_close(out, linear_attention(q, k, v, phi, **kw), what=f"torch vs numpy {method} [{map_name}]")


# --- low precision ----------------------------------------------------------------------------------
LOW_PRECISION = [("numpy", "float32"), ("numpy", "float16"), ("torch", "float32"), ("torch", "float16"),
                 ("torch", "bfloat16")]


@pytest.mark.parametrize("method", ["full", *FORMS])
@pytest.mark.parametrize(("backend", "dtype"), LOW_PRECISION, ids=[f"{b}-{t}" for b, t in LOW_PRECISION])
def test_low_precision(mk, backend, dtype, method, device):
    if backend == "numpy" and device != "cpu":
        pytest.skip("numpy runs on the CPU only")
    causal = method != "full"
    kw = {"causal": True, "method": method, "chunk_size": 16} if causal else {}
    q, k, v = mk.qkv((2,), 200, d=8, d_v=5, seed=13, backend=backend, dtype=dtype, device=device)
    out = linear_attention(q, k, v, "elu+1", **kw)
    assert out.dtype == q.dtype and type(out) is type(q) and out.shape == v.shape
    if backend == "torch":
        assert out.device == q.device
    # the reference sees the same rounded inputs, in float64
    expected = kernel_attention(to_numpy(q), to_numpy(k), to_numpy(v), "elu+1", causal=causal)
    assert_close(out, expected, dtype=dtype, what=f"{backend} {dtype} {method}")


HALF = [("numpy", "float16"), ("torch", "float16"), ("torch", "bfloat16")]


@pytest.mark.parametrize("method", ["kernel", "full", *FORMS])
@pytest.mark.parametrize(("backend", "dtype"), HALF, ids=[f"{b}-{t}" for b, t in HALF])
def test_half_precision_accumulates_in_float32(mk, backend, dtype, method):
    # 2000 tokens of features up to ~20: the sums in S, z and the scores reach ~1e6, past float16's
    # largest value (65504), and bfloat16 (8 bits of mantissa) would drop most of the small terms.
    # Accumulating in float32, as the contract says, keeps the output right to the dtype's rounding.
    n = 2000
    q, k, v = mk.qkv((), n, d=8, d_v=4, seed=17, scale=5.0, backend=backend, dtype=dtype)
    causal = method != "full"
    if method == "kernel":
        out = kernel_attention(q, k, v, "elu+1", causal=True)
    elif method == "full":
        out = linear_attention(q, k, v, "elu+1")
    else:
        out = linear_attention(q, k, v, "elu+1", causal=True, method=method)
    assert out.dtype == q.dtype
    expected = kernel_attention(to_numpy(q), to_numpy(k), to_numpy(v), "elu+1", causal=causal)
    assert_close(out, expected, dtype=dtype, what=f"{backend} {dtype} {method}, N={n}")


# --- gradients --------------------------------------------------------------------------------------
GRAD_MAPS = ["elu+1", "softplus", "performer", "cosformer"]


@pytest.mark.parametrize("method", ["full", *FORMS])
@pytest.mark.parametrize("map_name", GRAD_MAPS)
def test_gradcheck(mk, map_name, method):
    import torch

    causal = method != "full"
    kw = {"causal": True, "method": method, "chunk_size": 3} if causal else {}  # 3 does not divide 7
    # no batch dims: gradcheck perturbs every input entry (batches are covered by the test below)
    q, k, v = (t.requires_grad_() for t in mk.qkv((), 7, d=3, d_v=2, seed=14, backend="torch"))
    phi = mk.feature_map(map_name, 3, num_features=5)
    assert torch.autograd.gradcheck(lambda q, k, v: linear_attention(q, k, v, phi, **kw), (q, k, v))


@pytest.mark.parametrize("method", ["full", *FORMS])
@pytest.mark.parametrize("map_name", GRAD_MAPS)
def test_gradients_equal_kernel_attention(mk, map_name, method):
    causal = method != "full"
    kw = {"causal": True, "method": method, "chunk_size": 16} if causal else {}
    q, k, v = mk.qkv((2,), 65, d=8, d_v=5, seed=15, backend="torch")
    cotangent = mk.randn((2, 65, 5), seed=16, backend="torch")

    def grads(fn):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        (fn(*leaves) * cotangent).sum().backward()
        return [x.grad for x in leaves]

    phi = mk.feature_map(map_name, 8)
    fast = grads(lambda q, k, v: linear_attention(q, k, v, phi, **kw))
    slow = grads(lambda q, k, v: kernel_attention(q, k, v, phi, causal=causal))
    for name, g_fast, g_slow in zip("qkv", fast, slow, strict=True):
        assert_close(g_fast, g_slow, what=f"d/d{name} of {method} vs kernel_attention [{map_name}]")


# --- the fast CPU path (torch, no autograd, N >= 512): the same maths as the readable forms ----------


@pytest.mark.parametrize("n", [1000, 4097], ids=lambda n: f"T{n}")
@pytest.mark.parametrize("fast_map", ["elu+1", "relu", "softplus"])
@pytest.mark.parametrize(
    ("causal", "chunk"),
    [(False, 64), (True, 7), (True, 64), (True, 5000)],
    ids=["noncausal", "C7", "C64", "C5000"],
)
def test_fast_cpu_path_equals_numpy_reference_forms(n, fast_map, causal, chunk):
    import torch

    from linattn_core import fast

    rng = np.random.default_rng(n)
    q, k, v = rng.standard_normal((3, 2, n, 8))
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    method = "chunked" if causal else "auto"
    phi = get_feature_map(fast_map)
    plan = fast.which(tq, tk, tv, phi, causal=causal, method=method)
    assert plan.forward == "torch", "must use the fast path"
    with torch.no_grad():
        fast = linear_attention(tq, tk, tv, fast_map, causal=causal, method=method, chunk_size=chunk)
    reference = linear_attention(q, k, v, fast_map, causal=causal, method=method, chunk_size=chunk)
    assert_close(fast, reference, what=f"fast CPU path, {fast_map}, causal={causal}, C={chunk}")


@pytest.mark.parametrize("batch", [(1,), (3,), (2, 35)], ids=["B1", "B3", "B70"])
@pytest.mark.parametrize(
    ("n", "chunk"), [(513, 64), (1000, 48), (4100, 64)], ids=["T513", "T1000C48", "T4100"]
)
def test_chunked_fast_path_for_batch_shapes_and_block_edges(batch, n, chunk):
    # the fast path moves all sequences a block at a time: one sequence (blocks of 4096 tokens), a few,
    # and more than one group (70 > 4096 // 64 sequences), with a shorter last chunk and last block
    import torch

    from linattn_core import fast

    rng = np.random.default_rng(n + len(batch))
    q, k, v = rng.standard_normal((3, *batch, n, 8)) * 0.5
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    assert fast.which(tq, tk, tv, get_feature_map("elu+1"), causal=True, method="chunked").forward == "torch"
    with torch.no_grad():
        fast = linear_attention(tq, tk, tv, "elu+1", causal=True, method="chunked", chunk_size=chunk)
    reference = linear_attention(q, k, v, "elu+1", causal=True, method="cumsum")
    assert_close(fast, reference, what=f"fast chunked path, batch {batch}, T={n}, C={chunk}")


# --- the speed tier's one decision, and its forms with the compiled kernel on and off ---------------
def _float32_qkv(shape, seed):
    import torch

    rng = np.random.default_rng(seed)
    return tuple(torch.from_numpy(x).float() for x in rng.standard_normal((3, *shape)) * 0.5)


@pytest.mark.parametrize("compiled", ["on", "switched off"])
@pytest.mark.parametrize("map_name", ["elu+1", "relu", "performer", "cosformer"])
@pytest.mark.parametrize("n", [65, 1000], ids=lambda n: f"T{n}")
def test_fast_tier_float32_equals_the_float64_reference(map_name, n, compiled):
    # float32 CPU tensors: the compiled kernel where it is built; switched off, the torch forms from
    # 512 tokens on and the reference forms below. Performer and cosFormer features are computed first.
    import contextlib

    import torch

    from linattn_core import fast
    from linattn_core.fast import kernel

    q, k, v = _float32_qkv((2, n, 8), seed=n)
    phi = get_feature_map(map_name, d=8, seed=0) if map_name == "performer" else get_feature_map(map_name)
    switch = kernel.switched_off if compiled == "switched off" else contextlib.nullcontext
    with switch():
        form = fast.which(q, k, v, phi, causal=True, method="chunked").forward
        if kernel.available():
            assert form == "kernel"
        else:
            assert form == ("torch" if n >= 512 else None)
        out = linear_attention(q, k, v, phi, causal=True, method="chunked", chunk_size=48)
    expected = kernel_attention(q.double(), k.double(), v.double(), phi, causal=True)
    assert out.dtype == torch.float32 and out.shape == v.shape
    assert_close(out, expected, dtype=torch.float32, what=f"{map_name}, T={n}, kernel {compiled} ({form})")


@pytest.mark.parametrize(
    "why",
    ["numpy", "non-causal grad", "recurrent", "cumsum", "short non-causal", "not elementwise, non-causal"],
)
def test_the_reference_forms_run_where_the_fast_tier_does_not_apply(why):
    import contextlib

    import torch

    from linattn_core import fast
    from linattn_core.fast import kernel

    q, k, v = _float32_qkv((2, 600, 8), seed=3)
    phi, causal, method = get_feature_map("elu+1"), True, "chunked"
    if why == "numpy":
        q, k, v = (x.numpy() for x in (q, k, v))
    elif why == "non-causal grad":  # autograd through the reference (causal ones train through linear_grad)
        q, causal = q.requires_grad_(True), False
    elif why in ("recurrent", "cumsum"):
        method = why
    elif why == "short non-causal":
        q, k, v, causal = q[:, :100], k[:, :100], v[:, :100], False
    else:
        phi, causal = get_feature_map("cosformer"), False
    # the compiled kernel takes non-causal CPU float32 calls of any length and map (tests/fast/
    # test_noncausal_kernel.py): without it, these two fall to the references
    off = kernel.switched_off if not causal else contextlib.nullcontext
    with off():
        plan = fast.which(q, k, v, phi, causal=causal, method=method)
        assert plan.forward is None and plan.backward is None and plan.grad == (why == "non-causal grad")
        out = linear_attention(q, k, v, phi, causal=causal, method=method)  # the reference's answer
    as64 = [torch.as_tensor(x).detach().double() for x in (q, k, v)]
    assert_close(out, kernel_attention(*as64, phi, causal=causal), dtype=torch.float32, what=why)


def test_one_plan_decides_the_forward_and_the_backward():
    # fast.which: the form of each pass and whether a gradient is needed, from one call
    import torch

    from linattn_core.fast import Plan, kernel, which

    elu, softplus = get_feature_map("elu+1"), get_feature_map("softplus")
    q, k, v = _float32_qkv((2, 600, 8), seed=4)
    q64, k64, v64 = (x.double() for x in (q, k, v))
    trained = q.clone().requires_grad_(), q64.clone().requires_grad_()
    log_g = torch.full((2, 600), -0.1)
    compiled = "kernel" if kernel.available() else "torch"
    causal = {"causal": True, "method": "chunked"}
    assert which(q.numpy(), k.numpy(), v.numpy(), elu, **causal) == Plan()
    assert which(q64, k64, v64, elu, **causal) == Plan("torch")  # no kernel for float64: torch from 512
    assert which(q64[:, :100], k64[:, :100], v64[:, :100], elu, **causal) == Plan()  # short: the reference
    assert which(q, k, v, elu, **causal) == Plan(compiled)
    assert which(q, k, v, elu, causal=True, method="recurrent") == Plan()  # the form the reader named
    # a gradient: the autograd Function of linear_grad, its passes chosen here
    assert which(trained[1], k64, v64, elu, **causal) == Plan("torch", True, "torch")
    assert which(trained[0], k, v, elu, **causal) == Plan(compiled, True, compiled)
    assert which(trained[0], k, v, elu, **causal, normalize=False) == Plan("torch", True, compiled)
    assert which(trained[0], k, v, elu, **causal, log_g=log_g) == Plan("torch", True, "torch")
    assert which(q, k, v, elu, **causal, log_g=log_g.requires_grad_()) == Plan("torch", True, "torch")
    assert which(trained[0], k, v, softplus, **causal) == Plan("torch", True, "torch")  # not in the kernel
    assert which(trained[0], k, v, softplus, **causal, features=True) == Plan(compiled, True, compiled)
    assert which(trained[0], k, v, elu, causal=True, method="cumsum") == Plan(grad=True)  # plain autograd
    assert which(trained[0], k, v, elu, causal=False, method="auto") == Plan(grad=True)
    with torch.no_grad():
        assert which(trained[0], k, v, elu, **causal) == Plan(compiled)


def test_a_call_asks_for_its_plan_once(monkeypatch):
    # forward and backward follow the one plan: nothing decides again which form runs
    import torch

    from linattn_core import fast

    calls = []
    real = fast.which
    monkeypatch.setattr(fast, "which", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    q, k, v = (x.double().requires_grad_() for x in _float32_qkv((2, 70, 8), seed=5))
    out = linear_attention(q, k, v, causal=True, chunk_size=16)
    torch.autograd.grad(out.sum(), (q, k, v))
    assert len(calls) == 1


@pytest.mark.parametrize("name", ["identity", "elu+1", "relu", "softplus"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_features_written_into_a_strided_buffer_equal_the_feature_map(name, dtype):
    # fast.features.into, the torch fast path's allocation-free form, must give phi(x) as __call__ does
    # (up to rounding), also when out is a transposed view, as the chunked path uses it
    import torch

    from linattn_core.fast.features import into

    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, 7, 6))).to(getattr(torch, dtype))
    x[0, 0, 0, :3] = torch.tensor([30.0, -30.0, 0.0])
    phi = get_feature_map(name)
    out = torch.full((3, 2, 7, 6), float("nan"), dtype=x.dtype).transpose(0, 1)
    y = into(phi, x, out, torch.empty_like(x))
    assert y.data_ptr() == out.data_ptr() and not torch.isnan(out).any()
    assert_close(out, phi(x), dtype=dtype, what=f"into({name}) against {name}(x), {dtype}")
    assert_close(out.double(), phi(x.double()), dtype=dtype, what=f"into({name}) against float64 {name}")
