"""The clock: seconds per call with warm-up, synchronisation and repeats, and the machine's own rates.

:func:`time_calls` is the one timer: several callables timed *interleaved*, a block of calls of each in
turn, round after round (each round starting one callable further on), so that a machine that speeds
up or slows down while it runs moves them all alike, and their quartiles show how much it moved.
:func:`time_call` is the same timer for one callable, :func:`time_steps` for callables that change
what they act on (a generated token grows its cache), a fixed number of calls each. Accelerators
are synchronised before every reading of the clock. :func:`matmul_rate` and :func:`copy_rate`
measure the yardsticks a roofline needs, on the spot; :func:`noisy` says when a spread is too wide
for a verdict.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._provenance import torch_device, torch_dtype
from .cost import check_sizes

__all__ = ["Timing", "copy_rate", "matmul_rate", "noisy", "synchronizer", "time_call", "time_calls",
           "time_steps"]


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


def synchronizer(device: Any) -> Callable[[], None]:
    """What waits for ``device``'s queued work before the clock is read: ``torch.cuda.synchronize`` on a
    GPU, ``torch.mps.synchronize`` on Apple's, nothing on a CPU or without a device (numpy)."""
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


def noisy(t: Timing) -> bool:
    """True when the spread of the repeats is wider than their median (IQR > median): on such a reading a
    ratio against a target says more about the machine's other work than about the code, so the
    benchmark withholds its verdict."""
    return t.repeats > 1 and t.iqr_s > t.median_s


def time_call(fn: Callable[[], Any], *, device: Any = None, min_run_time: float = 0.2, min_repeats: int = 5,
              max_run_time: float = 2.0, max_first_s: float | None = None) -> Timing:
    """Time ``fn()``: one warm-up call, then repeated timed blocks; median and quartiles per call.

    Parameters
    ----------
    fn : callable
        Called with no arguments. Its result is discarded.
    device : str or torch.device, optional
        The device ``fn`` runs on: an accelerator is synchronised before every reading of the clock.
        None for numpy code.
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
        ``median_s`` lies between ``q25_s`` and ``q75_s``; all are seconds per call. It is
        :func:`time_calls` with one callable.
    """
    return time_calls({"call": fn}, device=device, min_run_time=min_run_time, min_repeats=min_repeats,
                      max_run_time=max_run_time, max_first_s=max_first_s)["call"]


def time_calls(calls: Mapping[str, Callable[[], Any]], *, device: Any = None, min_run_time: float = 0.2,
               min_repeats: int = 5, max_run_time: float = 2.0, max_first_s: float | None = None,
               first_s: Mapping[str, float] | None = None) -> dict[str, Timing]:
    """Time several callables interleaved: the one timer of the book and the benchmark.

    Each callable is called once to warm up (unless ``first_s`` gives the seconds of a warm-up already
    done), then gets blocks of ``number_per_run`` calls (about a millisecond a block at least, so that
    the clock's resolution does not matter) and as many blocks as the budgets give it: work of
    ``min_run_time`` seconds at least, ``min_repeats`` blocks where ``max_run_time`` allows, 3 in any
    case. The blocks are taken in rounds, one block of every callable that still needs one per round,
    each round starting one callable further on: no callable is favoured by when it ran, and a phase
    of a busy machine lands on all of them, where their quartiles show it. A callable whose warm-up
    took longer than ``max_first_s`` keeps that one call as its only sample.

    Returns ``{name: Timing}`` in the order of ``calls``.
    """
    if min_run_time <= 0 or max_run_time <= 0:
        raise ValueError(f"min_run_time={min_run_time} and max_run_time={max_run_time} must be positive")
    if min_repeats < 1:
        raise ValueError(f"min_repeats={min_repeats} must be at least 1")
    sync = synchronizer(device)
    firsts = dict(first_s or {})
    for name, fn in calls.items():
        if name not in firsts:
            firsts[name] = _clocked(fn, 1, sync)  # warm-up: lazy initialisation, allocator, caches
    plan: dict[str, tuple[int, int]] = {}  # name -> (calls per block, blocks)
    for name in calls:
        first = max(firsts[name], 1e-9)
        if max_first_s is not None and first > max_first_s:
            continue
        run_time = max(min_run_time, min(min_repeats * first, max(max_run_time, 3 * first)))
        number = max(1, math.ceil(1e-3 / first))
        plan[name] = (number, max(3, math.ceil(run_time / (number * first))))
    times = _rounds({name: (calls[name], number, blocks) for name, (number, blocks) in plan.items()}, sync)
    return {name: _timing_from(times[name], plan[name][0], firsts[name]) if name in plan
            else _timing_from([firsts[name]], 1, firsts[name]) for name in calls}


def time_steps(steps: Mapping[str, Callable[[], Any]], rounds: int, *, device: Any = None,
               warmup: int = 1) -> dict[str, Timing]:
    """Time callables that change what they act on, such as one generated token (its cache grows), with
    the same interleaving as :func:`time_calls`: each is called exactly ``warmup + rounds`` times, one
    call of each per round, each round starting one callable further on; the first ``warmup`` rounds
    are not timed, and every timed call is one sample (blocks of one call, so that the caller knows
    exactly which states were timed). ``first_call_s`` is the last warm-up call's time."""
    if rounds < 1 or warmup < 0:
        raise ValueError(f"rounds={rounds} must be at least 1 and warmup={warmup} at least 0")
    sync = synchronizer(device)
    warm = _rounds({name: (fn, 1, warmup) for name, fn in steps.items()}, sync) if warmup else {}
    times = _rounds({name: (fn, 1, rounds) for name, fn in steps.items()}, sync, start=warmup)
    return {name: _timing_from(times[name], 1, warm[name][-1] if warm else times[name][0]) for name in steps}


def _rounds(work: Mapping[str, tuple[Callable[[], Any], int, int]], sync: Callable[[], None], *,
            start: int = 0) -> dict[str, list[float]]:
    # work: name -> (fn, calls per block, blocks); one block of each name per round, round r starting at
    # name (start + r) mod count; returns the seconds per call of every block
    names = list(work)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(max((blocks for _, _, blocks in work.values()), default=0)):
        for i in range(len(names)):
            name = names[(start + r + i) % len(names)]
            fn, number, blocks = work[name]
            if len(times[name]) < blocks:
                times[name].append(_clocked(fn, number, sync) / number)
    return times


def _clocked(fn: Callable[[], Any], number: int, sync: Callable[[], None]) -> float:
    # seconds for `number` calls, the device synchronised before and after
    sync()
    start = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return time.perf_counter() - start


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
