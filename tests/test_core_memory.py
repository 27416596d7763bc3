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
