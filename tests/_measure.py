"""How the tests measure memory: the same way every time, with margins for what an allocator does.

A measured peak (resident pages, or page faults) depends on more than the algorithm: pages the C
allocator kept from earlier calls can be handed out again without raising the resident set, pages
come in 4 KiB (or 2 MiB huge) units, and with several threads the order of their allocations moves
the peak. So every measurement here is taken the same way: after a warm-up call, through
``timing.peak_memory`` (which collects garbage and hands freed heap pages back before it starts),
on one thread (:func:`one_thread`), repeated and summarised by its median (:func:`median_peak`); and
it is compared with bounds that sit a factor of two or more from what is measured, never within a
few percent of it.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one CPU thread: with several, the order in which their buffers come and go moves the
    peak by a tensor or so from run to run."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def median_peak(step: Callable[[], Any], repeats: int = 3, warm_up: bool = True) -> int | None:
    """The median over ``repeats`` of the peak extra resident memory of ``step()`` on the CPU (bytes);
    ``None`` where it cannot be measured. The warm-up call keeps torch's own first-call allocations
    (thread pools, lazily built kernels) out of the measurement."""
    from linattn_core.tools import timing as T

    if warm_up:
        step()
    peaks = []
    for _ in range(repeats):
        peak, _ = T.peak_memory(step, device="cpu")
        if peak is None:
            return None
        peaks.append(peak)
    return int(statistics.median(peaks))


def slope(xs: list[int], ys: list[int]) -> float:
    """The least-squares slope of ``ys`` against ``xs``: bytes per token over several lengths, where
    the difference of two points would carry all of both points' rounding."""
    return float(np.polyfit(np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), 1)[0])
