"""The compiled chunked kernel (linattn_core/fast/_chunked.c) against the float64 references.

Every instruction set this CPU runs, each feature map the kernel has, lengths and chunk sizes that do
not divide each other, widths that are not a multiple of the vector length, one to many sequences
and threads (fewer sequences than threads splits each sequence into segments), hypothesis for the
shapes; then how linear_attention chooses it (the speed tier's one decision, ``fast.which``), every bad
argument of the checked call, and the C source the kernel chapter prints.
Test ids read like the rest of the suite's: ``avx512-elu+1-B3-T65-D17x5-C7-t2``.
"""

from __future__ import annotations

import functools
import os
import platform

import numpy as np
import pytest
from _tolerances import assert_close
from hypothesis import given
from hypothesis import strategies as st

from linattn_core import fast, get_feature_map, kernel_attention, linear_attention
from linattn_core.fast import kernel

torch = pytest.importorskip("torch")

ISAS = list(kernel.isas())
KERNEL_MAPS = ["identity", "relu", "elu+1"]
# LINATTN_NATIVE=0 switches the kernel off for the whole run (the torch forms are then what every
# other test checks); the tests of the kernel itself need it on
KERNEL_ON = bool(ISAS) and os.environ.get("LINATTN_NATIVE", "1") != "0"
needs_kernel = pytest.mark.skipif(
    not KERNEL_ON, reason="no compiled kernel in use here (not built, no AVX2, or LINATTN_NATIVE=0)")
pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            line = next(line for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[1].split())


def test_the_kernel_is_built_where_make_test_requires_it():
    # make test sets LINATTN_REQUIRE_KERNEL=1: there a missing kernel is a failure, not a silent skip
    if os.environ.get("LINATTN_REQUIRE_KERNEL") != "1":
        pytest.skip("LINATTN_REQUIRE_KERNEL is not set")
    assert kernel._chunked is not None, "linattn_core.fast._chunked was not built: is gcc installed?"
    flags = _cpu_flags()
    if platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma"} <= flags:
        assert "avx2" in ISAS, f"the CPU has AVX2 but the kernel reports {ISAS}"
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
        assert ISAS[0] == "avx512", f"the CPU has AVX-512 but the kernel reports {ISAS}"


def qkv(nb: int, n: int, d: int, d_v: int, *, seed: int, map_name: str, scale: float = 1.0):
    """Seeded float32 inputs (B, N, d), (B, N, d), (B, N, d_v); signed, shifted for identity."""
    rng = np.random.default_rng(seed)
    shift = 1.0 if map_name == "identity" else 0.0  # keeps identity's denominators away from zero
    q, k = (torch.from_numpy(shift + scale * rng.standard_normal((nb, n, d))).float() for _ in range(2))
    v = torch.from_numpy(rng.standard_normal((nb, n, d_v))).float()
    return q, k, v


def run(q, k, v, map_name, C, *, threads=None, isa=None, eps=1e-6):
    nb, n, _ = q.shape
    out, den = torch.empty(nb, n, v.shape[-1]), torch.empty(nb, n)
    kernel.chunked(q, k, v, get_feature_map(map_name), eps, C, out, den, threads=threads, isa=isa)
    return out, den


def reference(q, k, v, map_name, eps=1e-6):
    """float64 output and denominators of the quadratic form (from the same float32 inputs)."""
    q, k, v = (x.double() for x in (q, k, v))
    phi = get_feature_map(map_name)
    fq, fk = phi(q), phi(k)
    scores = torch.tril(fq @ fk.transpose(-1, -2))
    den = scores.sum(-1)
    out = kernel_attention(q, k, v, phi, causal=True, eps=eps)
    return out, den


CASES = [  # (sequences, tokens, d, d_v, chunk): every remainder the kernel has to handle
    (1, 1, 8, 5, 64),
    (2, 63, 8, 8, 16),
    (3, 65, 17, 5, 7),
    (8, 200, 64, 64, 64),
    (2, 513, 16, 33, 48),
    (1, 300, 3, 1, 300),
    (3, 777, 65, 70, 100),
    (2, 257, 128, 128, 128),
    (1, 64, 64, 64, 1),
]


def case_id(c) -> str:
    nb, n, d, d_v, C = c
    return f"B{nb}-T{n}-D{d}x{d_v}-C{C}"


@functools.cache
def _inputs_and_reference(map_name, case):
    """The inputs of a case and the float64 reference, computed once for every ISA and thread count."""
    nb, n, d, d_v, _ = case
    q, k, v = qkv(nb, n, d, d_v, seed=n + d, map_name=map_name)
    return (q, k, v), reference(q, k, v, map_name)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3], ids=lambda t: f"t{t}")
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("map_name", KERNEL_MAPS)
@pytest.mark.parametrize("isa", ISAS)
def test_kernel_equals_the_quadratic_reference(isa, map_name, case, threads):
    (q, k, v), (ref_out, ref_den) = _inputs_and_reference(map_name, case)
    out, den = run(q.clone(), k.clone(), v.clone(), map_name, case[4], threads=threads, isa=isa)
    assert_close(out, ref_out, what=f"{isa} kernel output, {map_name}, {case_id(case)}, {threads} threads")
    # denominators grow with the position (a sum of i positive terms): compare them relative to it
    scale = ref_den.abs().amax(-1, keepdim=True).clamp_min(1.0)
    assert_close(den / scale, ref_den / scale, dtype=torch.float32, what=f"{isa} kernel denominators")


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
def test_long_sequences_split_between_threads_equal_one_thread(isa):
    # one sequence and four threads: four segments, their states from a first pass; the result must
    # not depend on how the sequence was split (up to rounding), and must match the torch forms
    q, k, v = qkv(1, 5000, 32, 32, seed=1, map_name="elu+1", scale=0.5)
    one, _ = run(q, k, v, "elu+1", 64, threads=1, isa=isa)
    four, _ = run(q, k, v, "elu+1", 64, threads=4, isa=isa)
    assert_close(four, one, what="4 segments vs 1")
    with torch.no_grad():
        q64, k64, v64 = (x.double() for x in (q, k, v))
        expected = linear_attention(q64, k64, v64, "elu+1", causal=True, method="chunked")
    assert_close(one, expected, dtype=torch.float32, what=f"{isa} kernel vs the float64 chunked form, T=5000")


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
def test_threads_split_sequences_without_changing_a_bit(isa):
    # whole sequences per thread: the same arithmetic whatever the thread count
    q, k, v = qkv(6, 300, 64, 64, seed=2, map_name="elu+1")
    results = [run(q, k, v, "elu+1", 64, threads=t, isa=isa)[0] for t in (1, 2, 3, 6)]
    for r in results[1:]:
        assert torch.equal(r, results[0])
    assert torch.equal(run(q, k, v, "elu+1", 64, isa=isa)[0], results[0])  # and run to run


@needs_kernel
def test_python_threads_calling_at_once_get_their_own_results():
    # each call has its own workspace and its own team of C threads (the GIL is released during the
    # call), so concurrent calls must not see each other's buffers
    import threading

    inputs = [qkv(3, 700 + 50 * i, 32, 16, seed=20 + i, map_name="elu+1") for i in range(4)]
    expected = [run(*x, "elu+1", 64)[0] for x in inputs]
    results: dict[int, list] = {i: [] for i in range(4)}

    def work(i):
        for _ in range(5):
            results[i].append(linear_attention(*inputs[i], causal=True, method="chunked"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert len(results[i]) == 5 and all(torch.equal(r, expected[i]) for r in results[i])


@needs_kernel
def test_the_environment_picks_an_instruction_set(monkeypatch):
    calls = []
    real = kernel._chunked.forward
    monkeypatch.setattr(kernel._chunked, "forward", lambda *a: calls.append(a[13]) or real(*a))
    q, k, v = qkv(1, 50, 8, 8, seed=10, map_name="relu")
    for value, isa in [(ISAS[-1], ISAS[-1]), ("1", None), ("no-such-isa", None)]:
        monkeypatch.setenv("LINATTN_NATIVE", value)
        run(q, k, v, "relu", 16)
        assert calls.pop() == isa
    assert run(q, k, v, "relu", 16, isa=ISAS[0])[0] is not None and calls.pop() == ISAS[0]  # explicit wins


@needs_kernel
def test_instruction_sets_agree():
    if len(ISAS) < 2:
        pytest.skip(f"only {ISAS} on this CPU")
    q, k, v = qkv(3, 400, 40, 24, seed=3, map_name="relu")
    a, b = (run(q, k, v, "relu", 32, isa=isa)[0] for isa in ISAS)
    assert_close(a, b, what=f"{ISAS[0]} vs {ISAS[1]}")


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("map_name", KERNEL_MAPS)
def test_features_to_a_few_ulp(isa, map_name):
    # one token with k = 0 (phi(0) = 1 for elu+1) makes den = phi(q) . phi(0): the kernel's own phi,
    # and so its exp, read off directly. Cephes' expf is good to about 2 ulp; allow 4 (float32 u = 6e-8).
    x = torch.linspace(-87.0, 20.0, 20001)
    q = x.view(-1, 1, 1).contiguous()
    k = torch.zeros_like(q) if map_name == "elu+1" else torch.ones_like(q)
    _, den = run(q, k, torch.ones_like(q), map_name, 64, isa=isa)
    phi = get_feature_map(map_name)
    expected = (phi(q.double()) * phi(k.double())).view(-1)
    np.testing.assert_allclose(den.view(-1).double().numpy(), expected.numpy(), rtol=4 * 2.0**-24, atol=0)
    if map_name == "elu+1":  # below -87 the feature stops at exp(-87), never 0 or a denormal
        tiny = run(torch.full((3, 1, 1), -1e3), torch.zeros(3, 1, 1), torch.ones(3, 1, 1), "elu+1", 64)[1]
        assert torch.all(tiny == tiny[0]) and 1e-38 < float(tiny[0]) < 2e-38


@needs_kernel
@pytest.mark.parametrize("map_name", KERNEL_MAPS)
def test_large_inputs_stay_finite(map_name):
    # |x| ~ 1e3: elu+1 takes exp(-1e3) (clamped at exp(-87), never 0 or NaN), identity/relu big sums
    q, k, v = qkv(2, 130, 16, 8, seed=4, map_name=map_name, scale=1e3)
    out, den = run(q, k, v, map_name, 64)
    assert torch.isfinite(out).all() and torch.isfinite(den).all()
    if map_name == "elu+1":
        assert (den > 0).all()


@needs_kernel
@given(
    nb=st.integers(1, 4),
    n=st.integers(1, 300),
    d=st.integers(1, 40),
    d_v=st.integers(1, 40),
    C=st.integers(1, 80),
    threads=st.integers(1, 4),
    map_name=st.sampled_from(KERNEL_MAPS),
    isa=st.sampled_from(ISAS or ["none"]),
)
def test_any_shape_equals_the_reference(nb, n, d, d_v, C, threads, map_name, isa):
    q, k, v = qkv(nb, n, d, d_v, seed=nb * 1000 + n, map_name=map_name)
    out, _ = run(q, k, v, map_name, C, threads=threads, isa=isa)
    assert_close(out, reference(q, k, v, map_name)[0],
                 what=f"{isa} {map_name} B{nb} T{n} D{d}x{d_v} C{C} t{threads}")


# --- how linear_attention chooses the kernel -------------------------------------------------------
def spy_on(monkeypatch, name: str = "chunked", arg: int = 3) -> list:
    """Replace ``kernel.<name>`` by a pass-through that records argument ``arg`` (the feature map) of
    every call; returns the list of records."""
    calls = []
    real = getattr(kernel, name)

    def spy(*args, **kwargs):
        calls.append(args[arg])
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, name, spy)
    return calls


@needs_kernel
@pytest.mark.parametrize("n", [65, 1000], ids=lambda n: f"T{n}")
def test_linear_attention_uses_the_kernel_for_float32_cpu_without_grad(monkeypatch, n):
    calls = spy_on(monkeypatch)
    q, k, v = qkv(2, n, 8, 8, seed=5, map_name="elu+1")
    q, k, v = (x.view(2, 1, n, -1) for x in (q, k, v))  # batch dims are flattened for the kernel
    out = linear_attention(q, k, v, causal=True, method="chunked", chunk_size=16)
    assert len(calls) == 1 and calls[0].name == "elu+1"
    expected = kernel_attention(q.double(), k.double(), v.double(), causal=True)
    assert out.dtype == torch.float32 and out.shape == v.shape
    assert_close(out, expected, dtype=torch.float32, what="linear_attention through the kernel")
    linear_attention(q, k, v, causal=True)  # "auto" is the chunked form: the kernel again
    assert len(calls) == 2


@needs_kernel
def test_precomputed_features_go_through_the_kernel_as_identity(monkeypatch):
    # performer and cosformer are not elementwise: causal_chunked computes their features first
    calls = spy_on(monkeypatch)
    q, k, v = qkv(2, 300, 8, 8, seed=6, map_name="elu+1")
    phi = get_feature_map("cosformer")
    out = linear_attention(q, k, v, phi, causal=True, method="chunked")
    assert [c.name for c in calls] == ["identity"]
    expected = kernel_attention(q.double(), k.double(), v.double(), phi, causal=True)
    assert_close(out, expected, dtype=torch.float32, what="cosformer features through the kernel")


@needs_kernel
@pytest.mark.parametrize(
    "why",
    ["float64", "softplus", "env off", "switched off", "recurrent"],
)
def test_linear_attention_keeps_the_torch_forms_otherwise(monkeypatch, why):
    calls = spy_on(monkeypatch)
    q, k, v = qkv(2, 600, 8, 8, seed=7, map_name="elu+1")
    kw = {"causal": True, "method": "chunked"}
    fmap = "elu+1"
    if why == "float64":
        q, k, v = (x.double() for x in (q, k, v))
    elif why == "softplus":
        fmap = "softplus"
    elif why == "env off":
        monkeypatch.setenv("LINATTN_NATIVE", "0")
        assert not kernel.available()
    elif why == "recurrent":
        kw["method"] = "recurrent"
    else:
        kw = {}
    if why == "switched off":
        with kernel.switched_off():
            assert not kernel.available()
            out = linear_attention(q, k, v, fmap, **kw)
        assert kernel.available()
    else:
        out = linear_attention(q, k, v, fmap, **kw)
    assert calls == []
    expected = kernel_attention(*(x.detach().double() for x in (q, k, v)), fmap, causal=bool(kw))
    assert_close(out, expected, dtype=torch.float32, what=f"torch forms ({why})")


def test_torch_fast_path_in_float32_still_equals_the_reference(monkeypatch):
    # with the kernel switched off, float32 inputs take the torch fast path (N >= 512): it must still
    # be right, since machines without the kernel use it
    monkeypatch.setenv("LINATTN_NATIVE", "0")
    q, k, v = qkv(3, 1000, 16, 16, seed=8, map_name="elu+1")
    assert fast.which(q, k, v, get_feature_map("elu+1"), causal=True, method="chunked").forward == "torch"
    with torch.no_grad():
        out = linear_attention(q, k, v, causal=True, method="chunked", chunk_size=48)
    expected = kernel_attention(q.double(), k.double(), v.double(), causal=True)
    assert_close(out, expected, dtype=torch.float32, what="torch fast path, float32")


@needs_kernel
def test_subclassed_feature_maps_do_not_use_the_kernel():
    # the kernel knows three formulas by type; a subclass may compute anything
    class Shifted(type(get_feature_map("elu+1"))):
        def __call__(self, x, *, offset=0):
            return super().__call__(x) + 1

    assert not kernel.supports(torch.zeros(1), Shifted())
    assert kernel.supports(torch.zeros(1), get_feature_map("elu+1"))


# --- bad arguments of the checked call ---------------------------------------------------------------
def _good():
    q, k, v = qkv(2, 10, 4, 3, seed=9, map_name="relu")
    return {"Q": q, "K": k, "V": v, "out": torch.empty(2, 10, 3), "den": torch.empty(2, 10)}


def _call(args, **kw):
    phi = get_feature_map(kw.pop("phi", "relu"))
    kernel.chunked(args["Q"], args["K"], args["V"], phi, kw.pop("eps", 1e-6), kw.pop("C", 4), args["out"],
                    args["den"], **kw)


@needs_kernel
@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"Q": lambda t: t.double()}, TypeError, "Q must be a CPU float32 torch tensor"),
        ({"V": lambda t: t.numpy()}, TypeError, "V must be a CPU float32 torch tensor, got numpy"),
        ({"K": lambda t: t.transpose(0, 1).contiguous().transpose(0, 1)}, ValueError, "K must be contiguous"),
        ({"out": lambda t: t[:, :5].contiguous()}, ValueError, r"out must have shape \(2, 10, 3\)"),
        ({"den": lambda t: t[:1]}, ValueError, r"den must have shape \(2, 10\)"),
        ({"K": lambda t: t[:, :, :3].contiguous()}, ValueError, r"K must have shape \(2, 10, 4\)"),
        ({"Q": lambda t: t[0]}, ValueError, r"must be \(B, N, d\)"),
    ],
    ids=["Q-float64", "V-numpy", "K-strided", "out-shape", "den-shape", "K-width", "Q-2d"],
)
def test_bad_tensors_are_named(change, error, match):
    args = _good()
    for name, f in change.items():
        args[name] = f(args[name])
    with pytest.raises(error, match=match):
        _call(args)


@needs_kernel
@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"C": 0}, ValueError, "chunk_size"),
        ({"eps": 0.0}, ValueError, "eps"),
        ({"threads": 0}, ValueError, "threads"),
        ({"isa": "sse2"}, ValueError, "isa must be one of"),
        ({"phi": "softplus"}, ValueError, "no feature map Softplus"),
    ],
    ids=["C0", "eps0", "threads0", "isa", "softplus"],
)
def test_bad_options_are_named(kw, error, match):
    with pytest.raises(error, match=match):
        _call(_good(), **kw)


@needs_kernel
def test_the_compiled_function_checks_its_sizes_too():
    # the C entry point trusts addresses, not sizes: a zero size, an unknown map, an unknown
    # instruction set or a short workspace is a ValueError there
    a = _good()
    ptrs = [a[name].data_ptr() for name in ("Q", "K", "V", "out", "den")]
    floats = kernel._chunked.workspace(2, 10, 4, 3, 4, 1, None)
    ws = torch.empty(floats)
    good = (2, 10, 4, 3, 4, 1, 1e-6, 1, None, ws.data_ptr(), floats)
    kernel._chunked.forward(*ptrs, *good)
    assert_close(a["out"], reference(a["Q"], a["K"], a["V"], "relu")[0], what="direct call")
    for i, bad, match in [(1, 0, "bad sizes"), (7, 0, "bad sizes"), (5, 7, "feature map code 7"),
                          (8, "sse2", "not available"), (10, floats - 1, "the workspace holds")]:
        args = list(good)
        args[i] = bad
        with pytest.raises(ValueError, match=match):
            kernel._chunked.forward(*ptrs, *args)
    with pytest.raises(ValueError, match="bad sizes"):
        kernel._chunked.workspace(2, 10, 0, 3, 4, 1, None)


@needs_kernel
def test_subclassed_feature_maps_run_the_torch_forms_and_their_own_formula():
    class Shifted(type(get_feature_map("elu+1"))):
        def __call__(self, x, *, offset=0):
            return super().__call__(x) + 1

    q, k, v = qkv(2, 600, 8, 8, seed=11, map_name="elu+1")
    phi = Shifted()
    assert fast.which(q, k, v, phi, causal=True, method="chunked").forward == "torch"
    out = linear_attention(q, k, v, phi, causal=True, method="chunked")
    expected = kernel_attention(q.double(), k.double(), v.double(), phi, causal=True)
    assert_close(out, expected, dtype=torch.float32, what="a subclass of elu+1 through the torch forms")


# --- the kernel's C source, as the kernel chapter prints it ---------------------------------------
def test_every_c_file_of_the_kernel_is_a_source():
    # kernel._SOURCES is the one list (source(), the wheel test): a C file left out of it would not be read
    from pathlib import Path

    folder = Path(kernel.__file__).parent
    assert set(kernel._SOURCES) == {p.name for p in (*folder.glob("*.c"), *folder.glob("*.h"))}


@pytest.mark.parametrize("filename", kernel._SOURCES)
def test_source_returns_the_kernel_files_as_shipped(filename):
    from pathlib import Path

    text = kernel.source(filename)
    assert text == (Path(kernel.__file__).parent / filename).read_text(encoding="utf-8")
    assert ("PyInit__chunked" in text) == (filename == "_chunked.c")
    assert "static void FN(scores)" in kernel.source()  # the body is the default


def test_source_names_a_bad_filename():
    with pytest.raises(ValueError, match="filename must be one of"):
        kernel.source("../setup.py")
