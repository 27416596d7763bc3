"""linear_attention never allocates anything N x N: measured peak memory at N = 200_000.

At N = 200_000 an N x N float32 matrix is 160 GB, so a quadratic intermediate could not even be
allocated; the measured peak must stay within a small multiple of the inputs and output, and it
must grow linearly with N (quadrupling N may not multiply it by anything near 16).
numpy allocations are traced with ``tracemalloc``; torch's CPU allocations (invisible to it) by the
process's peak resident set size, reset through ``/proc/self/clear_refs``; CUDA by the allocator.
"""

from __future__ import annotations

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


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _vm_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def torch_cpu_peak(n, kw):
    q, k, v = inputs(n, "torch")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    except OSError as e:  # pragma: no cover - only on kernels without clear_refs
        pytest.skip(f"cannot reset the peak RSS here: {e}")
    before = _vm_rss()
    out = linear_attention(q, k, v, **kw)
    peak = _vm_hwm() - before
    assert tuple(out.shape) == (n, D) and bool(out.isfinite().all())
    return peak


@pytest.mark.parametrize("mode", list(MODES))
def test_numpy_peak_memory_is_linear_in_n(mode):
    kw = MODES[mode]
    peak = numpy_peak(N, kw)
    assert peak < PEAK_FACTOR * io_bytes(N), (
        f"peak {peak / 1e6:.0f} MB >= {PEAK_FACTOR} x the {io_bytes(N) / 1e6:.0f} MB of q, k, v, out"
    )
    quarter = numpy_peak(N // 4, kw)
    assert peak < 6 * quarter, f"peak grew {peak / quarter:.1f}x for 4x the tokens (linear: 4x)"


@pytest.mark.parametrize("method", ["recurrent", "cumsum", "chunked"])
def test_numpy_every_causal_method_stays_far_below_n_squared(method):
    # a shorter sequence, so the step loop of "recurrent" stays quick; N^2 float32 would be 1.6 GB
    n = 20_000
    peak = numpy_peak(n, {"causal": True, "method": method})
    assert peak < PEAK_FACTOR * io_bytes(n), f"{method}: peak {peak / 1e6:.0f} MB"
    assert peak < n * n * 4 / 10, f"{method}: peak {peak / 1e6:.0f} MB, a tenth of an N x N matrix"


@pytest.mark.parametrize("mode", list(MODES))
def test_torch_cpu_peak_memory_is_far_below_n_squared(mode):
    pytest.importorskip("torch")
    peak = torch_cpu_peak(N, MODES[mode])
    assert peak < PEAK_FACTOR * io_bytes(N), (
        f"peak RSS grew {peak / 1e6:.0f} MB >= {PEAK_FACTOR} x the {io_bytes(N) / 1e6:.0f} MB of q, k, v, out"
    )


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


# --- large results on huge pages (linattn_core._memory) ---------------------------------------------
def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "unavailable"


def _anon_huge_bytes(address: int) -> int:
    """AnonHugePages of the mapping that holds ``address``, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_large_results_start_on_a_huge_page_and_are_plain_tensors(dtype):
    torch = pytest.importorskip("torch")
    from linattn_core import _memory

    like = torch.empty(0, dtype=getattr(torch, dtype))
    shape = (3, _memory._FRESH_BYTES // like.element_size() // 3 // 64 + 1, 64)  # just over the threshold
    out = _memory.empty(shape, like)
    assert tuple(out.shape) == shape and out.dtype == like.dtype and out.is_contiguous()
    if _memory._madvise is not None:
        assert out.data_ptr() % _memory._HUGE_PAGE == 0
        extra = out.untyped_storage().nbytes() - out.numel() * out.element_size()
        assert 0 < extra <= _memory._HUGE_PAGE  # a 2 MiB margin at most, for the alignment
    out.fill_(2)
    assert bool((out == 2).all())
    small = _memory.empty((4, 5), like)  # below the threshold: an ordinary tensor
    assert small.storage_offset() == 0 and small.untyped_storage().nbytes() == 20 * like.element_size()


def test_large_results_are_backed_by_huge_pages_where_the_kernel_allows():
    torch = pytest.importorskip("torch")
    from linattn_core import _memory

    if _memory._madvise is None or _thp_mode() not in ("always", "madvise"):
        pytest.skip(f"transparent huge pages here: {_thp_mode()}")
    out = _memory.empty((_memory._FRESH_BYTES // 4,), torch.empty(0))
    out.fill_(1)  # the first touch maps the pages
    assert _anon_huge_bytes(out.data_ptr()) >= _memory._HUGE_PAGE


def test_results_fall_back_to_new_empty_without_madvise(monkeypatch):
    torch = pytest.importorskip("torch")
    from linattn_core import _memory

    monkeypatch.setattr(_memory, "_madvise", None)
    out = _memory.empty((_memory._FRESH_BYTES // 4,), torch.empty(0))
    assert out.storage_offset() == 0 and out.untyped_storage().nbytes() == _memory._FRESH_BYTES


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_fast_path_results_on_huge_pages_equal_the_reference(causal):
    # an output over the 32 MiB threshold (64 x 2048 x 64 float32), so the result comes from _memory
    torch = pytest.importorskip("torch")
    from _tolerances import assert_close

    from linattn_core import _memory

    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, 64, 2048, 8)) * 0.5
    v = rng.standard_normal((64, 2048, 64))
    tq, tk, tv = (torch.from_numpy(x.astype(np.float32)) for x in (q, k, v))
    assert tv.numel() * 4 >= _memory._FRESH_BYTES
    with torch.no_grad():
        out = linear_attention(tq, tk, tv, causal=causal, method="chunked")
    expected = linear_attention(*(x.numpy().astype(np.float64) for x in (tq, tk, tv)), causal=causal,
                                method="chunked")
    assert_close(out, expected, what=f"fast path, 32 MiB output, causal={causal}")
