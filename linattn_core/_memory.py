"""Fresh CPU memory for large results, backed by transparent huge pages where Linux offers them.

A freshly allocated result is faulted in by the first write to it, one page at a time. glibc hands a
block of 32 MiB or more straight to ``mmap`` and back to the kernel on ``free``, so a function that
returns such a block pays those faults on every call: 8,192 faults of 4 KiB for a 32 MiB result, about
12 ms on the 2-core VM of issue 2, or 15% of a causal ``linear_attention`` at N = 16,384 (batch x
heads 8, d_v 64). Asking for 2 MiB pages first (``madvise(MADV_HUGEPAGE)``, what PyTorch's own
``THP_MEM_ALLOC_ENABLE=1`` does for every allocation) turns them into 16 faults: about 3 ms there.
Smaller blocks are left alone: glibc reuses them from its heap, so they fault only once.
"""

from __future__ import annotations

import ctypes
import math
import sys
from typing import Any

_HUGE_PAGE = 2 << 20
# glibc's largest dynamic mmap threshold on 64-bit: blocks at least this big are mapped afresh each time
_FRESH_BYTES = 32 << 20
_MADV_HUGEPAGE = 14


def _find_madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_madvise = _find_madvise()


def empty(shape: tuple[int, ...], like: Any) -> Any:
    """An uninitialised tensor of ``shape`` with ``like``'s dtype and device (like ``new_empty``).

    On a Linux CPU, a result of ``_FRESH_BYTES`` or more is laid out on 2 MiB boundaries and marked
    for huge pages before anything touches it; the tensor is a contiguous view into a block 2 MiB
    larger. Elsewhere, or if the kernel declines, it is an ordinary ``new_empty``.
    """
    numel, size = math.prod(shape), like.element_size()
    if _madvise is None or like.device.type != "cpu" or numel * size < _FRESH_BYTES:
        return like.new_empty(shape)
    raw = like.new_empty((numel + _HUGE_PAGE // size,))
    start = raw.data_ptr()
    aligned = -(-start // _HUGE_PAGE) * _HUGE_PAGE
    offset = (aligned - start) // size  # allocations are 64-byte aligned, so this is exact
    pages = (start + numel * size + _HUGE_PAGE - aligned) // _HUGE_PAGE  # whole 2 MiB pages inside
    _madvise(aligned, pages * _HUGE_PAGE, _MADV_HUGEPAGE)  # a refusal (THP off) leaves 4 KiB pages
    return raw[offset : offset + numel].view(shape)
