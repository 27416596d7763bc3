"""Timing attention honestly: device choice, timers, peak memory, guarded sweeps and cost models.

Everything a timing claim in the book rests on lives here, so that it can be read, tested and reused:

- :func:`pick_device` chooses CUDA, then Apple MPS, then the CPU (or what the reader asks for, by
  argument or the ``LINATTN_DEVICE`` environment variable); :func:`describe_device` names it.
- :func:`time_call` times a callable with ``torch.utils.benchmark.Timer`` (warm-up, accelerator
  synchronisation, several repeats; median and inter-quartile range). numpy code gets a plain
  ``perf_counter`` loop with the same statistics.
- :func:`peak_memory` *measures* the extra memory a call needs: the allocator's peak on CUDA, the peak
  resident set size of the process on Linux CPUs (``VmHWM`` after resetting it), ``tracemalloc`` for numpy.
- :func:`sweep` runs several methods over several sequence lengths, skipping with a stated reason what
  would not fit in memory (an analytic prediction, :func:`predicted_bytes`) or would run past a time
  budget, and returns :class:`Record` objects that carry the hardware and software they were measured on.
- :func:`flops`, :func:`bytes_moved`, :class:`CostModel` and :func:`crossover_length` are the analytic side:
  operation and byte counts of each method and the sequence length where linear attention overtakes
  softmax attention, with machine rates measured on the spot (:func:`matmul_rate`, :func:`copy_rate`).

torch, tqdm and plotly are imported inside the functions that need them, so importing this module is cheap.

Glossary (code -> text)
-----------------------
``N``            sequence length (tokens)
``d``, ``d_v``   query/key width and value width
``d_phi``        feature dimension of phi (``d`` for elementwise maps such as elu+1)
``C``            chunk size of the chunked causal form (``chunk_size``)
``batch_heads``  batch size times number of heads: independent attention problems done together
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import platform
import re
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from . import _memory

__all__ = [
    "ENV_DEVICE",
    "METHODS",
    "CostModel",
    "Method",
    "Record",
    "Timing",
    "available_memory",
    "bytes_moved",
    "copy_rate",
    "cpu_name",
    "crossover_length",
    "describe_device",
    "environment",
    "flops",
    "format_bytes",
    "format_table",
    "loglog_slope",
    "matmul_rate",
    "measured_crossover",
    "memory_figure",
    "model_figure",
    "num_threads",
    "peak_memory",
    "pick_device",
    "predicted_bytes",
    "standard_methods",
    "sweep",
    "time_call",
    "time_figure",
]

#: Environment variable that overrides the automatic device choice (``cpu``, ``cuda``, ``cuda:1``, ``mps``).
ENV_DEVICE = "LINATTN_DEVICE"

#: The methods the analytic counts know. ``auto`` is counted as ``chunked`` (see :func:`flops`).
METHODS = ("softmax_naive", "sdpa", "linear", "recurrent", "cumsum", "chunked", "auto")
_CAUSAL_ONLY = ("recurrent", "cumsum", "chunked", "auto")
_GIB = 2**30


# ----------------------------------------------------------------------------------------------------
# devices and metadata
# ----------------------------------------------------------------------------------------------------
def _mps_available(torch: Any) -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def pick_device(prefer: Any = None) -> Any:
    """The device to time on: CUDA if available, then Apple MPS, then the CPU.

    Parameters
    ----------
    prefer : str or torch.device, optional
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or ``"auto"``. Without it, the environment variable
        ``LINATTN_DEVICE`` is read; without that (or with ``"auto"``) the first available of CUDA, MPS, CPU.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        If the requested device is not a device name or is not available on this machine (an explicit
        request never falls back silently).

    Examples
    --------
    >>> dev = pick_device("cpu")
    >>> dev.type
    'cpu'
    """
    import torch

    if prefer is not None:
        choice, source = prefer, "prefer"
    else:
        choice, source = os.environ.get(ENV_DEVICE, "").strip() or None, ENV_DEVICE
    if choice is None or (isinstance(choice, str) and choice.strip().lower() == "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available(torch):
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(choice.strip().lower() if isinstance(choice, str) else choice)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{source}={choice!r} is not a device name; use 'cpu', 'cuda', 'cuda:N', 'mps' "
                         "or 'auto'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{source}={choice!r} asks for CUDA, but torch.cuda.is_available() is False "
                             f"(torch {torch.__version__}); use 'cpu' or 'auto'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{source}={choice!r}: this machine has {torch.cuda.device_count()} CUDA "
                             "device(s)")
    elif dev.type == "mps":
        if not _mps_available(torch):
            raise ValueError(f"{source}={choice!r} asks for Apple MPS, but torch.backends.mps.is_available() "
                             "is False; use 'cpu' or 'auto'")
    elif dev.type != "cpu":
        raise ValueError(f"{source}={choice!r}: only 'cpu', 'cuda' and 'mps' devices are supported")
    return dev


def cpu_name() -> str:
    """The processor's model name (from ``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                 text=True, timeout=5, check=False).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _torch_device(device: Any) -> Any:
    import torch

    return device if isinstance(device, torch.device) else pick_device(device)


def device_name(device: Any) -> str:
    """The hardware behind ``device``: the GPU's name for CUDA, the chip for MPS/CPU."""
    import torch

    dev = _torch_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "mps":
        return f"Apple GPU (MPS) on {cpu_name()}"
    return cpu_name()


def describe_device(device: Any = None) -> str:
    """One line naming the device, e.g. ``'cpu: AMD EPYC (2 threads)'`` or ``'cuda:0: NVIDIA H200'``."""
    import torch

    dev = _torch_device(device)
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        total = torch.cuda.get_device_properties(index).total_memory
        return f"cuda:{index}: {torch.cuda.get_device_name(index)} ({total / _GIB:.0f} GiB)"
    if dev.type == "mps":
        return f"mps: {device_name(dev)}"
    n = torch.get_num_threads()
    return f"cpu: {cpu_name()} ({n} thread{'' if n == 1 else 's'})"


def environment(device: Any = None, dtype: Any = None) -> dict[str, Any]:
    """Hardware and software metadata for a measurement: the record of *where* a number came from."""
    import torch

    dev = _torch_device(device)
    meta: dict[str, Any] = {
        "device": str(dev),
        "device_name": device_name(dev),
        "device_description": describe_device(dev),
        "cpu": cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "dtype": None if dtype is None else _dtype_name(dtype),
        # other processes share the machine: their load shows in the numbers, so it is recorded too
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    if dev.type == "cuda":
        meta["cuda"] = torch.version.cuda
    return meta


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = _dtype_name(dtype)
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"dtype={dtype!r} is not a torch floating dtype (e.g. 'float32', 'float16')")
    return value


@contextlib.contextmanager
def num_threads(threads: int | None) -> Iterator[None]:
    """Run a block with ``torch.set_num_threads(threads)``, restoring the previous number afterwards.

    ``None`` leaves the setting alone. One thread gives steadier CPU timings on a machine shared with other
    programs (threads that wait for each other turn every delay of one into a delay of all).
    """
    import torch

    before = torch.get_num_threads()
    if threads is not None:
        _check_sizes(threads=threads)
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------------------------
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

    dev = _torch_device(device)
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


# ----------------------------------------------------------------------------------------------------
# memory
# ----------------------------------------------------------------------------------------------------
def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        match = re.search(rf"^{key}:\s+(\d+) kB", f.read(), flags=re.MULTILINE)
    if match is None:
        raise OSError(f"/proc/self/status has no {key}")
    return int(match.group(1)) * 1024


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak resident set size (``VmHWM``) of this process; False where impossible."""
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
      allocations can be served from memory the process already holds and then go unseen. The blocks that
      ``linear_attention`` keeps for its large results are released first, so such a result counts;
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

    dev = _torch_device(device)
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
        _memory.release()  # a result block kept from an earlier call is resident already: it would go unseen
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

    dev = _torch_device(device)
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


# ----------------------------------------------------------------------------------------------------
# analytic counts
# ----------------------------------------------------------------------------------------------------
def _check_method(method: str, causal: bool) -> str:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}")
    if method in _CAUSAL_ONLY and not causal:
        raise ValueError(f"method={method!r} is a causal form: pass causal=True")
    return "chunked" if method == "auto" else method


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")


def flops(method: str, N: int, d: int, d_v: int, *, causal: bool = False, chunk_size: int = 64,
          d_phi: int | None = None, batch_heads: int = 1) -> float:
    """Floating-point operations of one attention call (multiply and add count as two).

    Only the products that grow with the sequence are counted (the softmax's exponentials, the feature map
    and the divisions are lower order). Per batch-head, with ``D = d_phi``:

    ==================  ==========================================  ========================================
    method              FLOPs                                       why
    ==================  ==========================================  ========================================
    ``softmax_naive``   ``2 N² (d + d_v)``                          ``Q Kᵀ`` and ``A V``; the naive causal
                                                                    form computes the full matrix, then masks
    ``sdpa``            ``2 N² (d + d_v)``, half of it if causal    the fused kernel skips masked blocks
    ``linear``          ``4 N D d_v + 4 N D``                     ``S = φ(K)ᵀV``, ``φ(Q)S``, ``z``, ``φ(Q)z``
    ``recurrent``       ``4 N D d_v + 4 N D``                       per token: add ``φ(k)vᵀ``, read ``φ(q)ᵀS``
    ``cumsum``          ``4 N D d_v + 4 N D``                       the same products, then prefix sums
    ``chunked``/auto    ``4 N D d_v + 2 N C (D + d_v)``             states between chunks, masked ``C × C``
                                                                    products inside each chunk
    ==================  ==========================================  ========================================

    ``auto`` is counted as ``chunked``, the form it uses at the lengths where timing matters.
    """
    _check_sizes(N=N, d=d, d_v=d_v, chunk_size=chunk_size, batch_heads=batch_heads)
    kind = _check_method(method, causal)
    D = d if d_phi is None else d_phi
    if kind == "softmax_naive":
        per = 2.0 * N * N * (d + d_v)
    elif kind == "sdpa":
        per = 2.0 * N * N * (d + d_v) * (0.5 if causal else 1.0)
    elif kind == "chunked":
        C = min(chunk_size, N)
        per = 4.0 * N * D * d_v + 2.0 * N * C * (D + d_v)
    else:
        per = 4.0 * N * D * d_v + 4.0 * N * D
    return per * batch_heads


def bytes_moved(method: str, N: int, d: int, d_v: int, *, causal: bool = False, chunk_size: int = 64,
                d_phi: int | None = None, batch_heads: int = 1, itemsize: int = 4) -> float:
    """Bytes one call must read from and write to main memory, at least (a traffic model, not a peak).

    Every method reads ``q``, ``k``, ``v`` and writes the output: ``N (2 d + 2 d_v)`` numbers. On top:

    - ``softmax_naive`` writes the ``N × N`` scores, reads and rewrites them in the softmax, reads them
      again for ``A V``: four passes over ``N²`` numbers;
    - ``sdpa`` keeps its tiles of scores in cache (the fused, FlashAttention-style kernel): nothing more;
    - ``linear``/``recurrent`` write and read ``φ(q)`` and ``φ(k)``: ``4 N D`` numbers (the ``D × d_v``
      state stays in cache);
    - ``cumsum`` writes all ``N`` prefix states ``D × d_v`` and reads them back (the outer products, then
      their running sums): ``4 N D d_v`` numbers;
    - ``chunked`` writes and reads one state per chunk and the ``C × C`` intra-chunk scores:
      ``4 N D + 2 (N / C) D d_v + 2 N C`` numbers.
    """
    _check_sizes(N=N, d=d, d_v=d_v, chunk_size=chunk_size, batch_heads=batch_heads, itemsize=itemsize)
    kind = _check_method(method, causal)
    D = d if d_phi is None else d_phi
    io = N * (2.0 * d + 2.0 * d_v)
    if kind == "softmax_naive":
        extra = 4.0 * N * N
    elif kind == "sdpa":
        extra = 0.0
    elif kind == "cumsum":
        extra = 4.0 * N * D + 4.0 * N * D * d_v
    elif kind == "chunked":
        C = min(chunk_size, N)
        extra = 4.0 * N * D + 2.0 * math.ceil(N / C) * D * d_v + 2.0 * N * C
    else:
        extra = 4.0 * N * D
    return (io + extra) * batch_heads * itemsize


def predicted_bytes(method: str, N: int, d: int, d_v: int, *, causal: bool = False, chunk_size: int = 64,
                    d_phi: int | None = None, batch_heads: int = 1, itemsize: int = 4) -> int:
    """Working memory one call is predicted to need beyond its inputs (output included), in bytes.

    Used by :func:`sweep` to skip what would not fit. Per batch-head, in numbers of ``itemsize`` bytes:

    - ``softmax_naive``: two ``N × N`` matrices alive at once (the scores and the weights) plus the output;
    - ``sdpa``: the output and a row statistic per query (fused kernels keep the scores in tiles);
    - ``linear``/``recurrent``: ``φ(q)``, ``φ(k)``, the output twice (the per-token rows, then the stacked
      result), and the state;
    - ``cumsum``: all ``N`` prefix states ``D × d_v`` twice (the outer products and their running sums);
    - ``chunked``/``auto``: ``φ(q)``, ``φ(k)``, the output, the ``C × C`` scores of every chunk and the state
      of every chunk twice (per-chunk sums and their prefix sums).
    """
    _check_sizes(N=N, d=d, d_v=d_v, chunk_size=chunk_size, batch_heads=batch_heads, itemsize=itemsize)
    kind = _check_method(method, causal)
    D = d if d_phi is None else d_phi
    out = N * d_v
    if kind == "softmax_naive":
        per = 2.0 * N * N + out
    elif kind == "sdpa":
        per = out + 2.0 * N
    elif kind == "cumsum":
        per = 2.0 * N * D * d_v + 2.0 * N * D + out
    elif kind == "chunked":
        C = min(chunk_size, N)
        n_chunks = math.ceil(N / C)
        per = 2.0 * N * D + out + n_chunks * C * C + 2.0 * n_chunks * D * d_v
    else:
        per = 2.0 * N * D + 2.0 * out + D * d_v
    return int(per * batch_heads * itemsize)


# ----------------------------------------------------------------------------------------------------
# records and sweeps
# ----------------------------------------------------------------------------------------------------
@dataclass
class Record:
    """One measurement (or one skipped measurement, with the reason) of one method at one length.

    Times are seconds per call; ``peak_bytes`` is the measured peak extra memory of one call (see
    :func:`peak_memory`), ``predicted_bytes`` the analytic prediction the memory guard used, ``predicted_s``
    the extrapolated time per call when the time guard skipped the measurement; ``gflops`` is
    ``flops / median_s / 1e9`` with the analytic count of :func:`flops`. ``meta`` says which hardware and
    software produced the numbers (:func:`environment`).
    """

    method: str
    causal: bool
    N: int
    d: int
    d_v: int
    batch_heads: int
    dtype: str
    device: str
    chunk_size: int | None = None
    median_s: float | None = None
    q25_s: float | None = None
    q75_s: float | None = None
    repeats: int = 0
    peak_bytes: int | None = None
    peak_source: str | None = None
    predicted_bytes: int = 0
    predicted_s: float | None = None
    flops: float = 0.0
    gflops: float | None = None
    skipped: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        """``"chunked (causal)"``, ``"sdpa"``: how tables and legends name the method."""
        return f"{self.method} (causal)" if self.causal else self.method

    @property
    def measured(self) -> bool:
        return self.skipped is None and self.median_s is not None

    def to_dict(self, *, meta: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (``meta`` left out with ``meta=False``, e.g. when a file stores it once)."""
        out = asdict(self)
        if not meta:
            out.pop("meta")
        return out


@dataclass(frozen=True)
class Method:
    """A method to time: ``fn(q, k, v)`` returns the attention output.

    ``name`` is one of :data:`METHODS` (it selects the analytic counts); ``label`` names it in tables.
    """

    name: str
    causal: bool
    fn: Callable[[Any, Any, Any], Any]
    chunk_size: int | None = None

    @property
    def label(self) -> str:
        return f"{self.name} (causal)" if self.causal else self.name


def standard_methods(names: Iterable[str] | None = None, *, causal: bool | None = None,
                     feature_map: Any = "elu+1", chunk_size: int = 64) -> list[Method]:
    """The methods the book and the benchmark compare, as :class:`Method` objects.

    Non-causal: ``softmax_naive`` (:func:`linattn_core.softmax_attention`), ``sdpa``
    (``torch.nn.functional.scaled_dot_product_attention``), ``linear``
    (:func:`linattn_core.linear_attention`).
    Causal: ``softmax_naive`` and ``sdpa`` with the causal mask, and the causal ``linear_attention`` with
    ``method="recurrent" | "cumsum" | "chunked" | "auto"``.

    Parameters
    ----------
    names : iterable of str, optional
        Keep only these method names (default: all).
    causal : bool, optional
        Keep only the causal (True) or non-causal (False) ones (default: both).
    feature_map, chunk_size
        Passed to ``linear_attention``.
    """
    import torch.nn.functional as F

    from linattn_core import linear_attention, softmax_attention

    def linear(method: str | None, is_causal: bool) -> Callable[[Any, Any, Any], Any]:
        if method is None:
            return lambda q, k, v: linear_attention(q, k, v, feature_map, causal=False)
        return lambda q, k, v: linear_attention(q, k, v, feature_map, causal=is_causal, method=method,
                                                chunk_size=chunk_size)

    every = [
        Method("softmax_naive", False, lambda q, k, v: softmax_attention(q, k, v)),
        Method("sdpa", False, lambda q, k, v: F.scaled_dot_product_attention(q, k, v)),
        Method("linear", False, linear(None, False)),
        Method("softmax_naive", True, lambda q, k, v: softmax_attention(q, k, v, causal=True)),
        Method("sdpa", True, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        *(Method(m, True, linear(m, True), chunk_size=chunk_size) for m in _CAUSAL_ONLY),
    ]
    wanted = None if names is None else list(names)
    if wanted is not None:
        unknown = sorted(set(wanted) - set(METHODS))
        if unknown:
            raise ValueError(f"names={unknown} are not among {METHODS}")
    return [m for m in every
            if (wanted is None or m.name in wanted) and (causal is None or m.causal == causal)]


def _progress(total: int, enabled: bool | None) -> Any:
    if enabled is None:
        enabled = os.environ.get("LINATTN_BOOK_BUILD", "") in ("", "0")  # no widget state in the static site
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, desc="timing", unit="run", leave=False)


def sweep(methods: Sequence[Method], lengths: Iterable[int], *, d: int = 64, d_v: int = 64,
          batch_heads: int = 8, dtype: Any = "float32", device: Any = None, seed: int = 0,
          min_run_time: float = 0.1, min_repeats: int = 5, max_run_time: float = 1.0,
          max_call_s: float = 2.0, budget_s: float | None = None, memory_fraction: float = 0.5,
          measure_memory: bool = True, progress: bool | None = None,
          threads: int | None = None) -> list[Record]:
    """Time every method at every length, skipping (with the reason) what would not fit or take too long.

    Inputs are seeded ``randn`` tensors ``q, k: (1, batch_heads, N, d)``, ``v: (1, batch_heads, N, d_v)``
    (one batch of ``batch_heads`` heads: fused kernels such as PyTorch's CPU SDPA need the 4-D layout), made
    once per length and shared by the methods. For each method and length, in increasing ``N``:

    1. if the sweep has used ``budget_s`` seconds, the rest is skipped;
    2. if the method took longer than ``max_call_s`` per call at a shorter length, or its time at the last
       length scaled by the analytic FLOP count (:func:`flops`) predicts more, it is skipped;
    3. if :func:`predicted_bytes` exceeds ``memory_fraction`` of :func:`available_memory`, it is skipped
       (an out-of-memory error is also caught and reported, never raised);
    4. otherwise it is timed (:func:`time_call`) and its peak memory measured (:func:`peak_memory`).

    A progress bar (``tqdm.auto``: a widget in notebooks, a text bar in terminals) shows the sweep; it is
    off during the book build, or with ``progress=False``. ``threads`` sets ``torch.set_num_threads`` for the
    sweep (restored afterwards; recorded in ``meta``): one thread gives steadier numbers on a busy machine.

    Returns
    -------
    list of Record
        One per (method, length), skipped ones included, all sharing the same ``meta``.
    """
    import torch

    lengths = sorted({int(n) for n in lengths})
    _check_sizes(d=d, d_v=d_v, batch_heads=batch_heads, **{f"lengths[{i}]": n for i, n in enumerate(lengths)})
    if not methods:
        raise ValueError("methods is empty: pass e.g. standard_methods()")
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction={memory_fraction} must be in (0, 1]")
    dev = _torch_device(device)
    tdtype = _torch_dtype(dtype)
    itemsize = torch.empty((), dtype=tdtype).element_size()
    records: list[Record] = []
    last: dict[str, tuple[int, float]] = {}  # label -> (N, seconds per call) of its last measurement
    over: dict[str, str] = {}  # label -> why its longer lengths are skipped
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with num_threads(threads), _progress(len(methods) * len(lengths), progress) as bar:
        meta = environment(dev, tdtype)  # inside: it records the number of threads in use
        start = time.perf_counter()
        for N in lengths:
            # (batch=1, heads, N, d): fused kernels expect 4-D inputs (PyTorch's CPU SDPA falls back to
            # its unfused, N x N path for 3-D ones)
            shape_qk, shape_v = (1, batch_heads, N, d), (1, batch_heads, N, d_v)
            q, k, v = (torch.randn(s, generator=gen, dtype=torch.float32).to(device=dev, dtype=tdtype)
                       for s in (shape_qk, shape_qk, shape_v))
            for m in methods:
                bar.set_postfix_str(f"{m.label} N={N}")
                chunk = m.chunk_size if m.chunk_size is not None else 64
                counts = dict(causal=m.causal, chunk_size=chunk, batch_heads=batch_heads)
                rec = Record(m.name, m.causal, N, d, d_v, batch_heads, _dtype_name(tdtype), str(dev),
                             chunk_size=m.chunk_size, flops=flops(m.name, N, d, d_v, **counts),
                             predicted_bytes=predicted_bytes(m.name, N, d, d_v, itemsize=itemsize, **counts),
                             meta=meta)
                rec.skipped = _skip_reason(rec, m, last, over, start, budget_s, max_call_s,
                                           memory_fraction, dev)
                if rec.skipped is None:
                    _measure(rec, m, (q, k, v), dev, last, over, max_call_s, min_run_time, min_repeats,
                             max_run_time, measure_memory)
                records.append(rec)
                bar.update(1)
            del q, k, v
    return records


def _skip_reason(rec: Record, m: Method, last: Mapping[str, tuple[int, float]], over: Mapping[str, str],
                 start: float, budget_s: float | None, max_call_s: float, memory_fraction: float,
                 dev: Any) -> str | None:
    elapsed = time.perf_counter() - start
    if budget_s is not None and elapsed > budget_s:
        return f"sweep time budget of {budget_s:g} s used up ({elapsed:.1f} s)"
    if m.label in over:
        return over[m.label]
    if m.label in last:
        n_prev, t_prev = last[m.label]
        f_prev = flops(m.name, n_prev, rec.d, rec.d_v, causal=m.causal, chunk_size=rec.chunk_size or 64,
                       batch_heads=rec.batch_heads)
        predicted = t_prev * rec.flops / f_prev
        rec.predicted_s = predicted
        if predicted > max_call_s:
            return (f"predicted {predicted:.2g} s per call (from {t_prev:.2g} s at N={n_prev}, scaled by the "
                    f"FLOP count) is over the {max_call_s:g} s budget")
    free = available_memory(dev)
    if rec.predicted_bytes > memory_fraction * free:
        return (f"needs about {rec.predicted_bytes / _GIB:.3g} GiB (predicted), over {memory_fraction:.0%} "
                f"of the {free / _GIB:.3g} GiB free on {dev.type}")
    return None


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def _measure(rec: Record, m: Method, qkv: tuple[Any, Any, Any], dev: Any, last: dict[str, tuple[int, float]],
             over: dict[str, str], max_call_s: float, min_run_time: float, min_repeats: int,
             max_run_time: float, measure_memory: bool) -> None:
    q, k, v = qkv
    call = lambda: m.fn(q, k, v)  # noqa: E731  (a closure over this length's inputs)
    try:
        t = time_call(call, device=dev, min_run_time=min_run_time, min_repeats=min_repeats,
                      max_run_time=max_run_time, max_first_s=max_call_s)
        rec.median_s, rec.q25_s, rec.q75_s, rec.repeats = t.median_s, t.q25_s, t.q75_s, t.repeats
        if t.first_call_s > max_call_s:
            over[m.label] = (f"took {t.first_call_s:.2g} s per call at N={rec.N}, over the {max_call_s:g} s "
                             "budget")
        if measure_memory:
            rec.peak_bytes, rec.peak_source = peak_memory(call, device=dev)
    except Exception as exc:
        if not _is_oom(exc):
            raise
        rec.median_s = rec.q25_s = rec.q75_s = None
        rec.skipped = f"out of memory: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        over[m.label] = f"ran out of memory at N={rec.N}"
        if dev.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        return
    last[m.label] = (rec.N, rec.median_s)
    rec.gflops = rec.flops / rec.median_s / 1e9


# ----------------------------------------------------------------------------------------------------
# machine rates, slopes, crossovers
# ----------------------------------------------------------------------------------------------------
def matmul_rate(device: Any = None, sizes: Sequence[int] = (2048, 4096), dtype: Any = "float32",
                min_run_time: float = 0.2) -> float:
    """This machine's float matrix-product rate in FLOP/s: the best over ``n × n @ n × n`` products.

    Measured, never looked up: ``2 n³`` FLOPs divided by the *fastest* repeat of each size, the best size
    kept. A peak rate is a yardstick of what the hardware can do, so the repeat least disturbed by other
    programs is the right estimate here (unlike the medians reported for the methods themselves).
    """
    import torch

    dev = _torch_device(device)
    tdtype = _torch_dtype(dtype)
    gen = torch.Generator(device="cpu").manual_seed(0)
    best = 0.0
    for n in sizes:
        _check_sizes(n=n)
        a, b = (torch.randn(n, n, generator=gen).to(device=dev, dtype=tdtype) for _ in range(2))
        t = time_call(lambda a=a, b=b: a @ b, device=dev, min_run_time=min_run_time, min_repeats=3,
                      max_run_time=min_run_time)
        best = max(best, 2.0 * n**3 / min(t.times))
    return best


def copy_rate(device: Any = None, nbytes: int = 256 * 2**20, min_run_time: float = 0.2) -> float:
    """This machine's memory bandwidth in bytes/s: copying ``nbytes`` (read + write), fastest repeat."""
    import torch

    dev = _torch_device(device)
    _check_sizes(nbytes=nbytes)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    t = time_call(lambda: dst.copy_(src), device=dev, min_run_time=min_run_time, min_repeats=3,
                  max_run_time=min_run_time)
    return 2.0 * src.numel() * 4 / min(t.times)


def _select(records: Iterable[Record], method: str, causal: bool) -> list[Record]:
    return sorted((r for r in records if r.method == method and r.causal == causal and r.measured),
                  key=lambda r: r.N)


def loglog_slope(records: Iterable[Record], method: str, *, causal: bool = False, last: int = 3) -> float:
    """The slope of log(time) against log(N) over the ``last`` longest measured lengths of a method.

    About 2 for a cost growing like ``N²`` and 1 for ``N``, once ``N`` is long enough that fixed overheads
    no longer matter (hence the longest lengths).
    """
    pts = _select(records, method, causal)[-last:]
    if len(pts) < 2:
        raise ValueError(f"method={method!r} (causal={causal}) has {len(pts)} measured length(s); a slope "
                         "needs 2")
    x = np.log([r.N for r in pts])
    y = np.log([r.median_s for r in pts])
    return float(np.polyfit(x, y, 1)[0])


def measured_crossover(records: Iterable[Record], slow: str, fast: str, *, causal: bool = False,
                       causal_fast: bool | None = None) -> float | None:
    """The length from which on ``fast`` is faster than ``slow``, interpolated between measured lengths.

    Both are compared at the lengths where both were measured. After the last length where ``fast`` is
    still slower, the crossing is found by linear interpolation of ``log(time_fast / time_slow)`` in
    ``log N`` (noise or overheads can make ``fast`` win at a short length and lose at the next; the last
    crossing is the one that lasts). Returns the first common length if ``fast`` is faster at every one,
    and ``None`` if it is slower at the longest.
    """
    records = list(records)
    cf = causal if causal_fast is None else causal_fast
    a = {r.N: r.median_s for r in _select(records, slow, causal)}
    b = {r.N: r.median_s for r in _select(records, fast, cf)}
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"no length where both {slow!r} and {fast!r} were measured")
    ratio = [math.log(b[n] / a[n]) for n in common]  # > 0 where fast is slower
    losing = [i for i, r in enumerate(ratio) if r > 0]
    if not losing:
        return float(common[0])
    i = losing[-1]
    if i == len(common) - 1:
        return None
    (n0, r0), (n1, r1) = (common[i], ratio[i]), (common[i + 1], ratio[i + 1])
    return float(math.exp(math.log(n0) + (math.log(n1) - math.log(n0)) * r0 / (r0 - r1)))


@dataclass(frozen=True)
class CostModel:
    """Predicted seconds per call: ``overhead + max(FLOPs / flop_rate, bytes / byte_rate) / efficiency``.

    The ``max(...)`` is the roofline: a call is limited either by arithmetic or by memory traffic, whichever
    takes longer on this machine (``flop_rate``: measured matmul rate, ``byte_rate``: measured copy rate).
    ``efficiency[method]`` (default 1) is the fraction of that ideal a method reaches and
    ``overhead_s[method]`` its fixed cost per call (Python, kernel launches); :meth:`calibrate` fits both
    from measurements.
    """

    flop_rate: float
    byte_rate: float
    efficiency: Mapping[str, float] = field(default_factory=dict)
    overhead_s: Mapping[str, float] = field(default_factory=dict)

    def roofline_s(self, method: str, N: int, d: int, d_v: int, **counts: Any) -> float:
        """The ideal time: counts divided by the machine's rates."""
        itemsize = counts.pop("itemsize", 4)
        return max(flops(method, N, d, d_v, **counts) / self.flop_rate,
                   bytes_moved(method, N, d, d_v, itemsize=itemsize, **counts) / self.byte_rate)

    def time_s(self, method: str, N: int, d: int, d_v: int, **counts: Any) -> float:
        """The predicted time per call of ``method`` at length ``N``.

        Efficiency and overhead are looked up under the method's label (``"sdpa (causal)"`` when
        ``causal=True``), then under its name, then default to 1 and 0.
        """
        label = f"{method} (causal)" if counts.get("causal") else method
        eff = self.efficiency.get(label, self.efficiency.get(method, 1.0))
        overhead = self.overhead_s.get(label, self.overhead_s.get(method, 0.0))
        return overhead + self.roofline_s(method, N, d, d_v, **counts) / eff

    def calibrate(self, records: Iterable[Record]) -> CostModel:
        """A copy whose ``efficiency`` and ``overhead_s`` fit the measured records (least squares per method).

        For each method label (``"chunked (causal)"``, ``"sdpa"``), ``time = overhead + roofline /
        efficiency`` is fitted to its measured lengths with ``overhead >= 0``, relative errors weighted
        alike; methods measured at fewer than two lengths keep their defaults.
        """
        records = [r for r in records if r.measured]
        eff, over = dict(self.efficiency), dict(self.overhead_s)
        for label in sorted({r.label for r in records}):
            pts = [r for r in records if r.label == label]
            if len({r.N for r in pts}) < 2:
                continue
            x = np.array([self.roofline_s(r.method, r.N, r.d, r.d_v, causal=r.causal,
                                          chunk_size=r.chunk_size or 64, batch_heads=r.batch_heads)
                          for r in pts])
            y = np.array([r.median_s for r in pts])
            w = 1.0 / y  # relative errors: short and long lengths count alike
            slope, icpt = np.linalg.lstsq(np.stack([x * w, w], axis=1), y * w, rcond=None)[0]
            if icpt < 0 or slope <= 0:
                icpt = 0.0
                slope = float(np.sum(x * y * w**2) / np.sum((x * w) ** 2))
            eff[label], over[label] = 1.0 / float(slope), float(icpt)
        return replace(self, efficiency=eff, overhead_s=over)


def crossover_length(model: CostModel, slow: str = "softmax_naive", fast: str = "chunked", *, d: int = 64,
                     d_v: int = 64, causal: bool = False, chunk_size: int = 64, d_phi: int | None = None,
                     batch_heads: int = 1, itemsize: int = 4, n_max: int = 2**30) -> int | None:
    """The sequence length from which on ``fast`` is at least as fast as ``slow`` according to ``model``.

    "From which on" matters when fixed overheads make ``fast`` win at tiny lengths, lose in between and win
    again for long sequences: the answer is the start of the last stretch, up to ``n_max``. Lengths
    ``1 .. n_max`` are scanned on a logarithmic grid, then the crossing is bisected to the integer.
    ``causal`` applies to both methods, except that the causal-only forms (``recurrent``, ``cumsum``,
    ``chunked``, ``auto``) are always causal. Returns ``None`` if ``slow`` is still faster at ``n_max``.
    ``batch_heads`` matters once the model has overheads: they are per call, the work is per head.

    Examples
    --------
    With equal rates and no memory limit, chunked (``C = 64``) overtakes the naive softmax form at
    ``2 N² (d + d_v) = 4 N d d_v + 2 N C (d + d_v)``, i.e. ``N = 128`` for ``d = d_v = 64``:

    >>> crossover_length(CostModel(flop_rate=1e9, byte_rate=float("inf")), d=64, d_v=64)
    128
    """
    _check_sizes(d=d, d_v=d_v, chunk_size=chunk_size, n_max=n_max, batch_heads=batch_heads)
    common = dict(d_phi=d_phi, chunk_size=chunk_size, itemsize=itemsize, batch_heads=batch_heads)

    def fast_wins(n: int) -> bool:
        t_fast = model.time_s(fast, n, d, d_v, causal=causal or fast in _CAUSAL_ONLY, **common)
        t_slow = model.time_s(slow, n, d, d_v, causal=causal or slow in _CAUSAL_ONLY, **common)
        return t_fast <= t_slow

    grid = np.unique(np.rint(np.geomspace(1, n_max, 241)).astype(np.int64)).tolist()
    losing = [n for n in grid if not fast_wins(n)]
    if not losing:
        return 1
    lo = losing[-1]  # the longest grid length where fast still loses
    if lo == grid[-1]:
        return None
    hi = grid[grid.index(lo) + 1]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fast_wins(mid) else (mid, hi)
    return hi


# ----------------------------------------------------------------------------------------------------
# presentation
# ----------------------------------------------------------------------------------------------------
def format_bytes(n: float | None) -> str:
    """``'1.5 MiB'``: a byte count for people (``'-'`` for None)."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", _GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def format_table(records: Iterable[Record]) -> str:
    """A plain-text table of records (no pandas needed): method, N, median and spread, memory, GFLOP/s."""
    head = f"{'method':<22} {'N':>7} {'median':>10} {'IQR':>9} {'peak mem':>10} {'GFLOP/s':>8}  note"
    lines = [head, "-" * len(head)]
    for r in records:
        if r.measured:
            iqr_ms = (r.q75_s - r.q25_s) * 1e3
            lines.append(f"{r.label:<22} {r.N:>7} {r.median_s * 1e3:>8.3g}ms {iqr_ms:>7.2g}ms "
                         f"{format_bytes(r.peak_bytes):>10} {r.gflops:>8.3g}")
        else:
            lines.append(f"{r.label:<22} {r.N:>7} {'-':>10} {'-':>9} {'-':>10} {'-':>8}  "
                         f"skipped: {r.skipped}")
    return "\n".join(lines)


def _series(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.measured:
            groups.setdefault(r.label, []).append(r)
    return {k: sorted(v, key=lambda r: r.N) for k, v in groups.items()}


def _line_figure(records: Sequence[Record], value: Callable[[Record], float], *, y_title: str, title: str,
                 hover: str) -> Any:
    import plotly.graph_objects as go

    from linattn_core.viz import OKABE_ITO, _finish

    fig = go.Figure()
    dashes = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
    symbols = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "hexagon")
    for i, (label, pts) in enumerate(_series(records).items()):
        fig.add_scatter(x=[r.N for r in pts], y=[value(r) for r in pts], name=label, mode="lines+markers",
                        line=dict(color=OKABE_ITO[i % len(OKABE_ITO)], dash=dashes[i % len(dashes)]),
                        marker=dict(symbol=symbols[i % len(symbols)], size=8),
                        hovertemplate=f"{label}<br>N=%{{x}}<br>{hover}<extra></extra>")
    fig.update_xaxes(type="log", title="sequence length N (tokens, log scale)")
    fig.update_yaxes(type="log", title=y_title)
    names = ", ".join(_series(records)) or "no measured method"
    alt = f"{title}: log-log lines of {y_title.split(' (')[0]} against sequence length for {names}."
    return _finish(fig, title=title, alt=alt, height=460, width=760)


def time_figure(records: Sequence[Record], *, title: str = "Time per call against sequence length",
                crossover: float | None = None, crossover_label: str = "measured crossover") -> Any:
    """Log-log plotly figure of the median time per call of each measured method (skipped ones left out).

    ``crossover`` (a length) adds a dotted vertical line there, named ``crossover_label`` in the legend.
    """
    fig = _line_figure(records, lambda r: r.median_s * 1e3, y_title="time per call (ms, log scale)",
                       title=title, hover="%{y:.3g} ms")
    if crossover is not None:
        ms = [r.median_s * 1e3 for r in records if r.measured]
        fig.add_scatter(x=[crossover, crossover], y=[min(ms), max(ms)], mode="lines",
                        name=f"{crossover_label} (N ≈ {crossover:.0f})",
                        line=dict(color="#000000", dash="dot", width=1.5),
                        hovertemplate=f"{crossover_label}<br>N ≈ {crossover:.0f}<extra></extra>")
    return fig


def memory_figure(records: Sequence[Record], *, title: str = "Peak extra memory per call") -> Any:
    """Log-log plotly figure of the measured peak extra memory of each method (MiB)."""
    with_memory = [r for r in records if r.peak_bytes]
    return _line_figure(with_memory, lambda r: r.peak_bytes / 2**20,
                        y_title="peak extra memory (MiB, log scale)", title=title, hover="%{y:.3g} MiB")


def model_figure(records: Sequence[Record], model: CostModel, methods: Sequence[tuple[str, bool]], *,
                 n_range: tuple[int, int] | None = None,
                 title: str = "Cost model (lines) against measurements (markers)") -> Any:
    """The model's predicted time per call (lines) beside the measured medians (markers), log-log.

    ``methods`` are ``(name, causal)`` pairs; the model is evaluated with the first matching record's
    ``d``, ``d_v``, ``batch_heads`` and chunk size, over ``n_range`` (default: the measured lengths).
    """
    import plotly.graph_objects as go

    from linattn_core.viz import OKABE_ITO, _finish

    fig = go.Figure()
    for i, (name, causal) in enumerate(methods):
        pts = _select(records, name, causal)
        if not pts:
            raise ValueError(f"no measured record of method={name!r} with causal={causal}")
        ref = pts[0]
        lo, hi = n_range or (min(r.N for r in records), max(r.N for r in records))
        grid = np.unique(np.rint(np.geomspace(lo, hi, 60)).astype(np.int64)).tolist()
        counts = dict(causal=causal, chunk_size=ref.chunk_size or 64, batch_heads=ref.batch_heads)
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        label = pts[0].label
        fig.add_scatter(x=grid, y=[model.time_s(name, n, ref.d, ref.d_v, **counts) * 1e3 for n in grid],
                        mode="lines", name=f"{label}: model", line=dict(color=colour, dash="dash"),
                        hovertemplate=f"{label} model<br>N=%{{x}}<br>%{{y:.3g}} ms<extra></extra>")
        fig.add_scatter(x=[r.N for r in pts], y=[r.median_s * 1e3 for r in pts], mode="markers",
                        name=f"{label}: measured", marker=dict(color=colour, size=9),
                        hovertemplate=f"{label} measured<br>N=%{{x}}<br>%{{y:.3g}} ms<extra></extra>")
    fig.update_xaxes(type="log", title="sequence length N (tokens, log scale)")
    fig.update_yaxes(type="log", title="time per call (ms, log scale)")
    names = ", ".join(f"{n} (causal)" if c else n for n, c in methods)
    alt = (f"{title}: log-log plot of time per call against sequence length; dashed model lines and "
           f"measured markers for {names}.")
    return _finish(fig, title=title, alt=alt, height=460, width=760)
