"""CPU memory that the fast paths keep from call to call: large results, and their block buffers.

A fresh result is faulted in by the first write to it, one 4 KiB page at a time. glibc reuses a freed
block from its heap only below 32 MiB; a larger one goes back to the kernel on ``free``, so a function
returning one pays the faults again on every call. On the 2-core VM of issue 2 that is 12 ms for a
32 MiB result, 15% of a causal ``linear_attention`` at N = 16,384 (batch x heads 8, d_v 64); and on
a VM whose host reclaims freed memory, often far more.

So results of ``_FRESH_BYTES`` or more live in memory-mapped blocks that this module keeps (at most
``_KEEP`` of them) and hands out again once nothing refers to the previous result any more, the way
glibc does for smaller blocks and PyTorch's CUDA allocator for all. Each block is also marked for
2 MiB pages (``madvise(MADV_HUGEPAGE)``, what PyTorch's ``THP_MEM_ALLOC_ENABLE=1`` does), so its first
use faults 16 times instead of 8,192.

A block is known to be free when its ``mmap`` can be resized: the result tensor holds a
``memoryview`` of the block (``torch.frombuffer`` keeps its buffer object alive), and ``mmap``
refuses to resize while a view exists. Any tensor, view, storage or numpy array still sharing the
result keeps that view alive.

The block buffers of the fast paths (a few MiB) are carved by :func:`scratch` out of one workspace per
thread and dtype, kept between calls for the same reason: allocated afresh (6 MiB at the default block
size), they cost from about 250 to 1,570 page faults per call at N = 16,384 as above, as much as glibc
happens to have handed back to the kernel since the last call.
"""

from __future__ import annotations

import math
import mmap
import threading
from typing import Any

from . import _backend as B

_HUGE_PAGE = 2 << 20
# glibc's largest dynamic mmap threshold on 64-bit: blocks at least this big are mapped afresh each time
_FRESH_BYTES = 32 << 20
_KEEP = 2  # blocks kept for reuse: a result in use and the one before it (layer after layer)

_SCRATCH_MAX_BYTES = 64 << 20  # a larger workspace (very wide heads) is not kept between calls

_lock = threading.Lock()
_local = threading.local()  # .workspaces: dtype -> this thread's flat workspace
_blocks: list[tuple[mmap.mmap, int]] = []  # (block, offset of its first 2 MiB boundary); newest last


def empty(shape: tuple[int, ...], like: Any) -> Any:
    """An uninitialised tensor of ``shape`` with ``like``'s dtype and device (like ``new_empty``).

    On the CPU, a result of ``_FRESH_BYTES`` or more is a contiguous view into a kept block (see the
    module docstring); it is not resizable. Anything smaller, or on another device, is ``new_empty``.
    """
    torch = B.torch_module()  # like is a tensor, so torch is loaded
    numel, size = math.prod(shape), like.element_size()
    nbytes = numel * size
    if like.device.type != "cpu" or nbytes < _FRESH_BYTES:
        return like.new_empty(shape)
    with _lock:  # find and claim a block in one step, so two threads never get the same one
        block, offset = _claim(nbytes)
        flat = torch.frombuffer(memoryview(block), dtype=like.dtype, count=numel, offset=offset)
    return flat.view(shape)


def _claim(nbytes: int) -> tuple[mmap.mmap, int]:
    for i, (block, offset) in enumerate(_blocks):
        # a free block that fits, and not one far larger than needed
        if nbytes <= len(block) - offset <= 2 * nbytes + _HUGE_PAGE and _is_free(block):
            _blocks.append(_blocks.pop(i))
            return block, offset
    if hasattr(mmap, "MAP_PRIVATE"):  # Unix: private, like malloc's memory (the default is shared)
        block = mmap.mmap(-1, nbytes + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        block = mmap.mmap(-1, nbytes + _HUGE_PAGE)
    address = _address(block)
    offset = -address % _HUGE_PAGE  # mmap returns whole pages, so the offset is a whole number of items
    if hasattr(mmap, "MADV_HUGEPAGE"):  # Linux; before anything touches the block
        try:
            block.madvise(mmap.MADV_HUGEPAGE, offset, (len(block) - offset) // _HUGE_PAGE * _HUGE_PAGE)
        except OSError:  # transparent huge pages switched off: 4 KiB pages, as without the call
            pass
    _blocks.append((block, offset))
    del _blocks[:-_KEEP]  # forget the oldest; a result still using one keeps it alive itself
    return block, offset


def _is_free(block: mmap.mmap) -> bool:
    """True when no tensor made from ``block`` is alive (``mmap`` cannot resize while viewed)."""
    try:
        block.resize(len(block))
    except BufferError:
        return False
    except (OSError, SystemError, ValueError):  # cannot resize anonymous maps here: never reuse
        return False
    return True


def _address(block: mmap.mmap) -> int:
    torch = B.torch_module()
    return torch.frombuffer(block, dtype=torch.uint8, count=1).data_ptr()


def scratch(like: Any, **shapes: tuple[int, ...]) -> dict[str, Any]:
    """Uninitialised CPU buffers of the given shapes (``like``'s dtype), one contiguous tensor per name.

    They are consecutive slices of this thread's kept workspace, grown when too small, so they stay
    valid only until the next call of ``scratch`` in the same thread; other threads have their own.
    """
    sizes = {name: math.prod(shape) for name, shape in shapes.items()}
    total = sum(sizes.values())
    kept = _local.__dict__.setdefault("workspaces", {})
    flat = kept.get(like.dtype)
    if flat is None or flat.numel() < total:
        flat = like.new_empty((total,))
        if total * like.element_size() <= _SCRATCH_MAX_BYTES:
            kept[like.dtype] = flat
    buffers, start = {}, 0
    for name, shape in shapes.items():
        buffers[name] = flat[start : start + sizes[name]].view(shape)
        start += sizes[name]
    return buffers


def release() -> None:
    """Forget the kept result blocks and this thread's workspaces (the memory returns to the system
    once nothing uses it): what a measurement of a call's peak memory needs first."""
    with _lock:
        _blocks.clear()
    _local.__dict__.pop("workspaces", None)
