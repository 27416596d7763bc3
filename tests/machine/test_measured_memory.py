"""Memory only this machine can show: torch's resident memory on a CPU and the page faults of a call.

A resident set or a fault count depends on the C allocator, the kernel's page size (4 KiB, 16 KiB, 2 MiB
huge pages), pages kept from earlier calls and what else the process runs, so these tests form a tier of
their own (``pytest -m machine``; ``make test`` runs them, ``make test-core`` does not). Each measures the
same way (``tests/_measure.py``: warmed up, one thread, the median of repeats) and each bound sits a
factor of two or more from any value measured, counted in bytes, not in pages, so it holds on any page
size; a quadratic intermediate, or buffers mapped afresh on every call, would still cross it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys

import numpy as np
import pytest
from _measure import median_peak, one_thread, slope

torch = pytest.importorskip("torch")

from linattn_core import linear_attention  # noqa: E402
from linattn_core.fast import blocked, kernel  # noqa: E402

N, D = 200_000, 16
# allowed peak, in multiples of the bytes of q, k, v and the output together: 190x above the measured one
PEAK_FACTOR = 50
MODES = {"causal-auto": {"causal": True, "method": "auto"}, "full": {}}
F64 = torch.float64


def io_bytes(n):
    return 4 * n * D * 4  # q, k, v and out, float32


def torch_cpu_peak(n, kw):
    drawn = np.random.default_rng(0).standard_normal((3, n, D), dtype=np.float32)
    q, k, v = (torch.from_numpy(x) for x in drawn)
    out = linear_attention(q, k, v, **kw)
    assert tuple(out.shape) == (n, D) and bool(out.isfinite().all())
    with one_thread():
        peak = median_peak(lambda: linear_attention(q, k, v, **kw))
    if peak is None:
        pytest.skip("the peak resident set cannot be measured here")
    return peak


@pytest.mark.parametrize("mode", list(MODES))
def test_torch_cpu_peak_memory_is_far_below_n_squared(mode):
    peak = torch_cpu_peak(N, MODES[mode])
    assert peak < PEAK_FACTOR * io_bytes(N), (
        f"peak RSS grew {peak / 1e6:.0f} MB >= {PEAK_FACTOR} x the {io_bytes(N) / 1e6:.0f} MB of q, k, v, out"
    )


FORMS = {  # (causal, kernel on): the compiled kernel, the torch chunked form, the torch non-causal form
    "kernel": (True, True),
    "torch-chunked": (True, False),
    "torch-noncausal": (False, False),
}


def _call(form, q, k, v):
    switch = contextlib.nullcontext() if FORMS[form][1] else kernel.switched_off()
    with switch:
        return linear_attention(q, k, v, causal=FORMS[form][0], method="chunked")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the fault counter of getrusage")
@pytest.mark.parametrize("form", list(FORMS))
def test_repeated_calls_fault_in_little_beyond_the_result(form):
    # The result is fresh each time and costs its own pages (32 MiB, which glibc maps afresh). The few
    # MiB of block buffers come back from glibc's heap: measured, 4 KiB to 0.5 MiB of faults per call
    # beyond the result; mapped afresh (as with a fixed mmap threshold), the torch chunked form's cost
    # about 8 MiB. The bound of 1.6 MiB sits 3x above the one and 5x below the other. Another allocator
    # may map the buffers afresh, so there the bound is half a result: an O(N) copy per call would cost
    # a whole one. Counted on small pages: whether the kernel finds 2 MiB pages for the result depends on
    # how fragmented memory is at that moment, not on this library.
    import resource

    if form == "kernel" and not kernel.available():
        pytest.skip("no compiled kernel here")
    q, k, v = (torch.randn(1, 8, 16384, 64) for _ in range(3))
    page = resource.getpagesize()
    result_pages = q.numel() * 4 // page
    with _small_pages():
        for _ in range(2):  # warm-up; then the measured calls
            _call(form, q, k, v)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(3):
            out = _call(form, q, k, v)
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 3
    allowed = 400 * 4096 // page if _default_glibc_heap() else result_pages // 2  # 1.6 MiB, in pages
    assert faults < result_pages + allowed, f"{faults:.0f} faults per call ({result_pages} for the result)"
    if _thp_mode() in ("always", "madvise"):  # the result is hinted onto 2 MiB pages (fast.pages.empty)
        first = -(-out.data_ptr() // 2**21) * 2**21  # its first whole 2 MiB page
        assert "hg" in _vm_flags(first), "the result's memory carries no MADV_HUGEPAGE hint"


@contextlib.contextmanager
def _small_pages():
    """This process on small pages only (``PR_SET_THP_DISABLE``), then as before. Where the switch is
    missing, huge pages can only lower a fault count: the bounds above still hold."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        prctl = None
    was = prctl(42, 0, 0, 0, 0) if prctl is not None else -1  # PR_GET_THP_DISABLE
    if was >= 0:
        prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
    try:
        yield
    finally:
        if was >= 0:
            prctl(41, was, 0, 0, 0)


def _default_glibc_heap() -> bool:
    """glibc's malloc with its own settings: no preloaded allocator, no malloc tunables."""
    env = os.environ
    tuned = "malloc" in env.get("GLIBC_TUNABLES", "") or any(k.startswith("MALLOC_") for k in env)
    return platform.libc_ver()[0] == "glibc" and not env.get("LD_PRELOAD") and not tuned


def _vm_flags(address: int) -> set[str]:
    """The ``VmFlags`` of the mapping that holds ``address`` (``hg``: advised onto huge pages)."""
    inside = False
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
        for line in f:
            head = line.split(maxsplit=1)[0] if line.strip() else ""
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    return set()


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "unavailable"


def _train_peak(n, nb, d, off=False, repeats=3):
    # the peak extra memory of one forward + backward (median_peak: warmed up, median of `repeats`)
    gen = torch.Generator().manual_seed(8)
    q, k, v, dout = (torch.randn(nb, n, d, generator=gen, dtype=F64) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    def step():
        out = linear_attention(q, k, v, causal=True, method="cumsum" if off else "chunked")
        return out, torch.autograd.grad(out, (q, k, v), dout)

    return median_peak(step, repeats=repeats)


def test_memory_is_linear_in_n_and_never_a_prefix_state_tensor(monkeypatch):
    """Measured: the extra memory of a forward + backward grows like N (out, dq, dk, dv), and stays
    far below the N x d_phi x d_v prefix states that autograd through the cumsum form keeps.

    The growth per token is a least-squares slope over three lengths, each point the median of three
    measurements: one measurement moves by up to a tensor (allocator rounding, pages it kept). Measured:
    3.8 to 5.2 tensors per token, also with glibc's malloc tuned otherwise (a fixed mmap threshold, no
    trimming, one arena, huge pages); the bounds sit a factor of two or more away from that.
    """
    monkeypatch.setattr(blocked, "_BLOCK_ROWS", 1024)  # small blocks: the O(N) part dominates
    nb, d, lengths = 2, 64, [4096, 8192, 16384]
    tensor = nb * d * 8  # bytes per token of one (nb, N, d) float64 tensor
    prefix = nb * d * d * 8  # bytes per token of the prefix states S_t: d = 64 such tensors
    with one_thread():
        peaks = [_train_peak(n, nb, d) for n in lengths]
        if None in peaks:
            pytest.skip("peak memory is not measurable here")
        # what it replaces: autograd through the cumsum form keeps every prefix state (measured: 4-5x)
        off = _train_peak(1024, nb, d, off=True, repeats=1)
    growth = slope(lengths, peaks)
    # out, dq, dk, dv must grow with N: 4 tensors per token; half of that would mean the measurement
    # misses them, three times that several O(N) buffers too many
    assert 2 * tensor <= growth <= 12 * tensor, f"{growth / tensor:.2f} tensors per token"
    assert growth <= prefix / 4 and peaks[-1] <= prefix * lengths[-1] / 4
    assert off >= prefix * 1024
