"""Memory: the peak extra memory one call needs, and how much is still free.

:func:`peak_memory` *measures*: the allocator's peak on CUDA, the peak resident set size of the process on
Linux CPUs (``VmHWM`` after resetting it), ``tracemalloc`` for numpy.
"""

from __future__ import annotations

import ctypes
import gc
import re
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

from ..._provenance import GIB, torch_device

__all__ = ["available_memory", "format_bytes", "peak_memory"]


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        match = re.search(rf"^{key}:\s+(\d+) kB", f.read(), flags=re.MULTILINE)
    if match is None:
        raise OSError(f"/proc/self/status has no {key}")
    return int(match.group(1)) * 1024


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak resident set size (``VmHWM``) of this process; False where impossible.

    Garbage is collected and freed heap pages handed back first: otherwise a collection during the
    measured call lowers the resident set under the peak, and freed pages the allocator kept are reused
    without being counted.
    """
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # give freed heap pages back, so reuse is counted again
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # 5: reset the peak RSS to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


def peak_memory(fn: Callable[[], Any], *, device: Any = None) -> tuple[int | None, str]:
    """Measure the peak *extra* memory of one call of ``fn()``: bytes above what was in use before it.

    The output of the call is included (it is still alive at the peak); the inputs, allocated before, are
    not. How it is measured depends on the device:

    - CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (the caching
      allocator's exact peak of live tensors);
    - CPU, torch (Linux): the process's peak resident set size (``VmHWM``, reset through
      ``/proc/self/clear_refs``) minus the resident size before the call. This counts every new page the
      call touches (tensors and anything else): exact for large tensors (their own pages), while many small
      allocations can be served from memory the process already holds and then go unseen (as can a
      block freed by an earlier call and handed back by the C allocator);
    - numpy (``device=None``): the peak of ``tracemalloc``, which numpy reports its buffers to;
    - MPS, or a CPU without ``/proc``: not measured (``None``).

    Returns
    -------
    (bytes or None, str)
        The peak extra bytes and a short note on how they were measured (or why not).
    """
    if device is None:
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            out = fn()
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            if started:
                tracemalloc.stop()
        del out
        return max(int(peak), 0), "tracemalloc peak"
    import torch

    dev = torch_device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        out = fn()
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - base
        del out
        return max(int(peak), 0), "torch.cuda.max_memory_allocated"
    if dev.type == "cpu" and sys.platform.startswith("linux"):
        if _reset_peak_rss():
            base = _proc_status_bytes("VmRSS")
            out = fn()
            peak = _proc_status_bytes("VmHWM") - base
            del out
            return max(int(peak), 0), "peak resident set size (VmHWM)"
    return None, f"peak memory is not measured on {dev.type} here"


def available_memory(device: Any = None) -> int:
    """Bytes that can still be allocated on ``device``: free GPU memory, or available system memory."""
    import torch

    dev = torch_device(device)
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    if dev.type == "mps" and hasattr(torch.mps, "recommended_max_memory"):
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        with open("/proc/meminfo", encoding="ascii") as f:
            match = re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), flags=re.MULTILINE)
        if match is None:
            raise OSError("cannot tell the available memory: install psutil") from None
        return int(match.group(1)) * 1024


def format_bytes(n: float | None) -> str:
    """``'1.5 MiB'``: a byte count for people (``'-'`` for None)."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
