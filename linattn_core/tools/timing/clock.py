"""The clock: seconds per call with warm-up, synchronisation and repeats, and the machine's own rates.

:func:`time_call` times a callable with ``torch.utils.benchmark.Timer`` (warm-up, accelerator
synchronisation, several repeats; median and inter-quartile range); numpy code gets a plain
``perf_counter`` loop with the same statistics. :func:`matmul_rate` and :func:`copy_rate` measure the
yardsticks a roofline needs, on the spot.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._provenance import torch_device, torch_dtype
from .cost import check_sizes

__all__ = ["Timing", "copy_rate", "matmul_rate", "time_call"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median of several repeats and the quartiles around it.

    ``times`` are the per-call averages of each timed block (``number_per_run`` calls per block).
    ``first_call_s`` is the warm-up call (lazy initialisation included), not part of the statistics.
    """

    median_s: float
    q25_s: float
    q75_s: float
    repeats: int
    number_per_run: int
    first_call_s: float
    times: tuple[float, ...] = field(repr=False, default=())

    @property
    def iqr_s(self) -> float:
        """Inter-quartile range ``q75 - q25``: the spread of the repeats."""
        return self.q75_s - self.q25_s


def _synchronizer(device: Any) -> Callable[[], None]:
    if device is None:
        return lambda: None
    import torch

    dev = torch_device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def _timing_from(times: Sequence[float], number: int, first: float) -> Timing:
    arr = np.asarray(times, dtype=np.float64)
    q25, median, q75 = np.quantile(arr, [0.25, 0.5, 0.75])
    return Timing(float(median), float(q25), float(q75), len(arr), number, first, tuple(map(float, arr)))


def time_call(fn: Callable[[], Any], *, device: Any = None, min_run_time: float = 0.2, min_repeats: int = 5,
              max_run_time: float = 2.0, max_first_s: float | None = None) -> Timing:
    """Time ``fn()``: one warm-up call, then repeated timed blocks; median and quartiles per call.

    Parameters
    ----------
    fn : callable
        Called with no arguments. Its result is discarded.
    device : str or torch.device, optional
        The device ``fn`` runs on. With a device, ``torch.utils.benchmark.Timer`` does the timing (it waits
        for the accelerator before reading the clock, and uses ``torch.get_num_threads()`` threads).
        Without one (numpy code), a ``time.perf_counter`` loop does.
    min_run_time : float
        Seconds of timed work at least (more blocks for fast calls).
    min_repeats : int
        Timed blocks aimed for at least, as long as ``max_run_time`` allows (3 at least in any case).
    max_run_time : float
        Seconds of timed work aimed for at most, unless 3 calls take longer.
    max_first_s : float, optional
        If the warm-up call alone takes longer, it is returned as the only sample (``repeats == 1``):
        repeating it would spend a time budget several times over.

    Returns
    -------
    Timing
        ``median_s`` lies between ``q25_s`` and ``q75_s``; all are seconds per call.
    """
    if min_run_time <= 0 or max_run_time <= 0:
        raise ValueError(f"min_run_time={min_run_time} and max_run_time={max_run_time} must be positive")
    if min_repeats < 1:
        raise ValueError(f"min_repeats={min_repeats} must be at least 1")
    sync = _synchronizer(device)
    sync()
    start = time.perf_counter()
    fn()  # warm-up: lazy initialisation, allocator warm-up, caches
    sync()
    first = time.perf_counter() - start
    if max_first_s is not None and first > max_first_s:
        return _timing_from([first], 1, first)
    # Enough work for min_repeats blocks, within max_run_time unless even 3 calls exceed it.
    run_time = max(min_run_time, min(min_repeats * first, max(max_run_time, 3 * first)))
    if device is None:
        return _loop_timing(fn, first, run_time)
    import torch
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=run_time)
    times = list(m.times)
    while len(times) < 3:  # blocked_autorange may stop after one or two blocks when run_time is short
        times.extend(timer.timeit(m.number_per_run).times)
    return _timing_from(times, m.number_per_run, first)


def _loop_timing(fn: Callable[[], Any], first: float, run_time: float) -> Timing:
    # Blocks of `number` calls, each block at least ~1 ms so that the clock's resolution does not matter.
    number = max(1, math.ceil(1e-3 / max(first, 1e-9)))
    times: list[float] = []
    total = 0.0
    while total < run_time or len(times) < 3:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        times.append(elapsed / number)
        total += elapsed
    return _timing_from(times, number, first)


def matmul_rate(device: Any = None, sizes: Sequence[int] = (2048, 4096), dtype: Any = "float32",
                min_run_time: float = 0.2) -> float:
    """This machine's float matrix-product rate in FLOP/s: the best over ``n × n @ n × n`` products.

    Measured, never looked up: ``2 n³`` FLOPs divided by the *fastest* repeat of each size, the best size
    kept. A peak rate is a yardstick of what the hardware can do, so the repeat least disturbed by other
    programs is the right estimate here (unlike the medians reported for the methods themselves).
    """
    import torch

    dev = torch_device(device)
    tdtype = torch_dtype(dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    best = 0.0
    for n in sizes:
        check_sizes(n=n)
        a, b = (torch.randn(n, n, generator=gen).to(device=dev, dtype=tdtype) for _ in range(2))
        t = time_call(lambda a=a, b=b: a @ b, device=dev, min_run_time=min_run_time, min_repeats=3,
                      max_run_time=min_run_time)
        best = max(best, 2.0 * n**3 / min(t.times))
    return best


def copy_rate(device: Any = None, nbytes: int = 256 * 2**20, min_run_time: float = 0.2) -> float:
    """This machine's memory bandwidth in bytes/s: copying ``nbytes`` (read + write), fastest repeat."""
    import torch

    dev = torch_device(device)
    check_sizes(nbytes=nbytes)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    t = time_call(lambda: dst.copy_(src), device=dev, min_run_time=min_run_time, min_repeats=3,
                  max_run_time=min_run_time)
    return 2.0 * src.numel() * 4 / min(t.times)
