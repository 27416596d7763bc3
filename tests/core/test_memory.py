"""linear_attention never allocates anything N x N, and its results are ordinary tensors of their own.

At N = 200_000 an N x N float32 matrix is 160 GB, so a quadratic intermediate could not even be
allocated; the peak must stay within a small multiple of the inputs and output, and it must grow
linearly with N (quadrupling N may not multiply it by anything near 16). Counted here as the bytes asked
for, the same on any machine and under any load: numpy's with ``tracemalloc``, CUDA's by its allocator.
PEAK_FACTOR is about 6x above the largest measured peak (the cumsum form's, 8.5x the inputs and output),
and a quadratic intermediate would exceed it by thousands. What only the machine can show (torch's
resident memory on a CPU, page faults) is measured in ``tests/machine/``.
"""

from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np
import pytest

from linattn_core import linear_attention

N, D = 200_000, 16
# allowed peak, in multiples of the bytes of q, k, v and the output together
PEAK_FACTOR = 50
MODES = {"causal-auto": {"causal": True, "method": "auto"}, "full": {}}


def inputs(n, backend="numpy", device="cpu"):
    q, k, v = np.random.default_rng(0).standard_normal((3, n, D), dtype=np.float32)
    if backend == "torch":
        import torch

        q, k, v = (torch.from_numpy(x).to(device) for x in (q, k, v))
    return q, k, v


def io_bytes(n):
    return 4 * n * D * 4  # q, k, v and out, float32


def numpy_peak(n, kw):
    q, k, v = inputs(n)
    tracemalloc.start()
    try:
        out = linear_attention(q, k, v, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (n, D) and out.dtype == np.float32 and np.isfinite(out).all()
    return peak


@pytest.mark.parametrize("mode", list(MODES))
def test_numpy_peak_memory_is_linear_in_n(mode):
    kw = MODES[mode]
    peak = numpy_peak(N, kw)
    assert peak < PEAK_FACTOR * io_bytes(N), (
        f"peak {peak / 1e6:.0f} MB >= {PEAK_FACTOR} x the {io_bytes(N) / 1e6:.0f} MB of q, k, v, out"
    )
    quarter = numpy_peak(N // 4, kw)
    # measured: exactly 4.0x (tracemalloc counts bytes asked for); N x N intermediates would give 16x
    assert peak < 6 * quarter, f"peak grew {peak / quarter:.1f}x for 4x the tokens (linear: 4x)"


@pytest.mark.parametrize("method", ["recurrent", "cumsum", "chunked"])
def test_numpy_every_causal_method_stays_far_below_n_squared(method):
    # a shorter sequence, so the step loop of "recurrent" stays quick; N^2 float32 would be 1.6 GB
    n = 20_000
    peak = numpy_peak(n, {"causal": True, "method": method})
    assert peak < PEAK_FACTOR * io_bytes(n), f"{method}: peak {peak / 1e6:.0f} MB"
    assert peak < n * n * 4 / 10, f"{method}: peak {peak / 1e6:.0f} MB, a tenth of an N x N matrix"


@pytest.mark.parametrize("mode", list(MODES))
def test_torch_cuda_peak_memory_is_far_below_n_squared(mode):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    q, k, v = inputs(N, "torch", "cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    linear_attention(q, k, v, **MODES[mode])
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert peak < PEAK_FACTOR * io_bytes(N)


# --- results are ordinary tensors owned by the caller -----------------------------------------------
FORMS = {  # (causal, kernel on): the compiled kernel, the torch chunked form, the torch non-causal form
    "kernel": (True, True),
    "torch-chunked": (True, False),
    "torch-noncausal": (False, False),
}


def _switch(form):
    """The kernel on (as installed) or switched off, for a form of FORMS."""

    from linattn_core.fast import kernel

    return contextlib.nullcontext() if FORMS[form][1] else kernel.switched_off()


def _call(form, q, k, v):
    with _switch(form):
        return linear_attention(q, k, v, causal=FORMS[form][0], method="chunked")


def _span(t):
    """The byte range of a tensor's whole storage."""
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def _overlap(a, b) -> bool:
    (a0, a1), (b0, b1) = a, b
    return a0 < b1 and b0 < a1


@pytest.mark.parametrize("form", list(FORMS))
def test_results_own_their_storage(form):
    # 8 x 16384 x 64 float32: 32 MiB, as large as the bench's results at N = 16384
    torch = pytest.importorskip("torch")
    from linattn_core import fast, get_feature_map
    from linattn_core.fast import kernel

    if form == "kernel" and not kernel.available():
        pytest.skip("no compiled kernel here")
    q, k, v = (torch.randn(8, 16384, 64, generator=torch.Generator().manual_seed(s)) for s in range(3))
    first = _call(form, q, k, v)
    kept = first.clone()
    second = _call(form, q * 0.5, k, v)
    for out in (first, second):
        st = out.untyped_storage()
        assert st.nbytes() == out.numel() * out.element_size() and out.storage_offset() == 0
        assert st.resizable() and type(st) is torch.UntypedStorage
    assert not _overlap(_span(first), _span(second)), "a later call's result shares the first one's memory"
    assert torch.equal(first, kept), "a later call changed an earlier result"
    first.resize_(7)  # an ordinary tensor: the caller may even resize it
    assert first.numel() == 7
    # out and den come from separate allocations (den stays inside linear_attention)
    with _switch(form):
        phi, causal = get_feature_map("elu+1"), FORMS[form][0]
        plan = fast.which(q, k, v, phi, causal=causal, method="chunked")
        out, den = fast.linear_attention(plan, q, k, v, phi, causal=causal, eps=1e-6, chunk_size=64)
    assert not _overlap(_span(out), _span(den))


@pytest.mark.parametrize("form", list(FORMS))
def test_results_stay_valid_while_other_threads_call(form):
    # each call's buffers are its own, and results are not buffers: concurrent calls keep their answers
    torch = pytest.importorskip("torch")
    from concurrent.futures import ThreadPoolExecutor

    inputs = [tuple(torch.randn(2, 700, 16, generator=torch.Generator().manual_seed(10 * i + s))
                    for s in range(3)) for i in range(4)]
    expected = [_call(form, *x) for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: [_call(form, *x) for _ in range(3)], inputs))
    for rs, e in zip(results, expected, strict=True):
        assert all(torch.equal(r, e) for r in rs)
    assert len({r.untyped_storage().data_ptr() for rs in results for r in rs}) == 12


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_large_results_are_plain_torch_tensors_with_a_page_hint(dtype):
    # fast.pages.empty: torch allocates (and frees) the result; only a madvise hint is added
    torch = pytest.importorskip("torch")
    from linattn_core.fast import pages

    like = torch.empty(0, dtype=getattr(torch, dtype))
    shape = (3, pages._LARGE // like.element_size() // 3 // 64 + 1, 64)
    out = pages.empty(shape, like)
    assert tuple(out.shape) == shape and out.dtype == like.dtype and out.is_contiguous()
    st = out.untyped_storage()
    assert st.nbytes() == out.numel() * out.element_size() and st.resizable()
    out.fill_(2)
    assert bool((out == 2).all())
    small = pages.empty((4, 5), like)
    assert small.untyped_storage().nbytes() == 20 * like.element_size()
