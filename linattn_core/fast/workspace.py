"""Scratch memory of the fast paths: one workspace per thread and dtype, kept between calls.

Only internal buffers live here (feature blocks, score blocks, carried states, the compiled kernel's
per-thread buffers); results are ordinary tensors allocated for the caller. The buffers are kept
because allocated afresh (6 MiB at the default block size) they cost from about 250 to 1,570 page
faults per call at N = 16,384 (batch x heads 8, d = d_v = 64): glibc hands a freed block of that size
back to the kernel, and the next call faults it in again, one 4 KiB page at a time.
"""

from __future__ import annotations

import math
import threading
from typing import Any

_MAX_KEPT_BYTES = 64 << 20  # a larger workspace (very wide heads) is not kept between calls

_local = threading.local()  # .workspaces: dtype -> this thread's flat workspace


def scratch(like: Any, **shapes: tuple[int, ...]) -> dict[str, Any]:
    """Uninitialised CPU buffers of the given shapes (``like``'s dtype), one contiguous tensor per name.

    They are consecutive slices of this thread's kept workspace, grown when too small, so they stay
    valid only until the next call of ``scratch`` in the same thread; other threads have their own.
    Nothing returned from here may reach a caller of ``linear_attention``.
    """
    sizes = {name: math.prod(shape) for name, shape in shapes.items()}
    total = sum(sizes.values())
    kept = _local.__dict__.setdefault("workspaces", {})
    flat = kept.get(like.dtype)
    if flat is None or flat.numel() < total:
        flat = like.new_empty((total,))
        if total * like.element_size() <= _MAX_KEPT_BYTES:
            kept[like.dtype] = flat
    buffers, start = {}, 0
    for name, shape in shapes.items():
        buffers[name] = flat[start : start + sizes[name]].view(shape)
        start += sizes[name]
    return buffers


def release() -> None:
    """Forget this thread's workspaces (their memory returns to the system once nothing uses it): what
    a measurement of a call's peak memory by the resident set needs first, or the kept pages go unseen."""
    _local.__dict__.pop("workspaces", None)
