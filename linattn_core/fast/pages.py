"""Results as ordinary tensors, with a page-size hint for the large ones.

A result of 32 MiB or more is larger than glibc keeps in its heap: torch's allocation of it is mapped
afresh on every call, and the first write faults it in one 4 KiB page at a time (8,192 faults for
32 MiB, about 15% of a causal call at N = 16,384 on a 2-core machine). :func:`empty` allocates the
result with torch as usual and only asks Linux to back the 2 MiB-aligned part of it with huge pages
(``madvise(MADV_HUGEPAGE)``, what ``THP_MEM_ALLOC_ENABLE=1`` does for every torch allocation). The
tensor stays the caller's own: torch allocates it, owns it and frees it, and the hint goes with the
memory. Measured under load: 528 faults per call instead of 8,192, and the call about a quarter faster.
"""

from __future__ import annotations

import ctypes
import functools
import math
import sys
from typing import Any

_LARGE = 32 << 20  # glibc's largest mmap threshold on 64-bit: from here a block is mapped afresh
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # Linux's value (asm-generic/mman-common.h)


def empty(shape: tuple[int, ...], like: Any) -> Any:
    """An uninitialised tensor of ``shape`` with ``like``'s dtype and device (``like.new_empty``);
    on Linux, one of 32 MiB or more is hinted onto huge pages before anything touches it."""
    out = like.new_empty(shape)
    if math.prod(shape) * out.element_size() >= _LARGE and out.device.type == "cpu":
        _advise_huge_pages(out.data_ptr(), out.numel() * out.element_size())
    return out


@functools.cache
def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return f


def _advise_huge_pages(address: int, nbytes: int) -> None:
    madvise = _madvise()
    start = -(-address // _HUGE_PAGE) * _HUGE_PAGE  # the whole 2 MiB pages inside the block
    end = (address + nbytes) // _HUGE_PAGE * _HUGE_PAGE
    if madvise is not None and end > start:
        madvise(start, end - start, _MADV_HUGEPAGE)  # a hint: where it fails, 4 KiB pages as before
