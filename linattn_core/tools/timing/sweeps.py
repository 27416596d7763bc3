"""Sweeps: several methods over several sequence lengths, guarded, as :class:`Record` objects.

:func:`sweep` skips with a stated reason what would not fit in memory (the prediction of
:func:`~linattn_core.tools.timing.cost.predicted_bytes`) or would run past a time budget; every record carries
the hardware and software it was measured on. :func:`loglog_slope` and :func:`measured_crossover` read
the records back.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..._provenance import GIB, dtype_name, environment, num_threads, torch_device, torch_dtype
from .clock import synchronizer, time_calls
from .cost import CAUSAL_ONLY, METHODS, check_sizes, flops, predicted_bytes
from .memory import available_memory, format_bytes, peak_memory

__all__ = ["Method", "Record", "crossing", "format_table", "loglog_slope", "measured_crossover",
           "measured_records", "standard_methods", "sweep"]


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

    ``name`` is one of :data:`METHODS` (it selects the analytic counts), or any name with ``cost`` one
    of them; ``label`` names it in tables. With ``grad``, a call is a training step of the attention:
    the forward and the gradients of ``q, k, v`` (FLOPs counted as three forwards).
    """

    name: str
    causal: bool
    fn: Callable[[Any, Any, Any], Any]
    chunk_size: int | None = None
    grad: bool = False  # time forward + backward: the gradients of q, k, v for a fixed dout
    cost: str | None = None  # the cost model's name for the forward, when ``name`` is not one of METHODS

    @property
    def label(self) -> str:
        return f"{self.name} (causal)" if self.causal else self.name

    @property
    def counted(self) -> str:
        """The name :func:`flops` and :func:`predicted_bytes` count this method's forward by."""
        return self.cost or self.name


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
        *(Method(m, True, linear(m, True), chunk_size=chunk_size) for m in CAUSAL_ONLY),
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
    once per length and shared by the methods (a :class:`Method` with ``grad`` gets copies that need
    gradients, and a fixed ``dout``). For each length, in increasing ``N``, each method in turn:

    1. if the sweep has used ``budget_s`` seconds, the rest is skipped;
    2. if the method took longer than ``max_call_s`` per call at a shorter length, or its time at the last
       length scaled by the analytic FLOP count (:func:`flops`) predicts more, it is skipped;
    3. if :func:`predicted_bytes` exceeds ``memory_fraction`` of :func:`available_memory`, it is skipped
       (an out-of-memory error is also caught and reported, never raised);
    4. otherwise it is called once (the warm-up, and the time the guards read).

    Then the methods warmed up at this length are timed together, interleaved (:func:`time_calls`: a
    block of each in turn, round after round, so that a busy machine's phases land on all of them
    alike), and each one's peak memory is measured (:func:`peak_memory`).

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
    check_sizes(d=d, d_v=d_v, batch_heads=batch_heads, **{f"lengths[{i}]": n for i, n in enumerate(lengths)})
    if not methods:
        raise ValueError("methods is empty: pass e.g. standard_methods()")
    if not 0 < memory_fraction <= 1:
        raise ValueError(f"memory_fraction={memory_fraction} must be in (0, 1]")
    dev = torch_device(device)
    tdtype = torch_dtype(dtype)
    itemsize = torch.empty((), dtype=tdtype).element_size()
    records: list[Record] = []
    last: dict[str, tuple[int, float]] = {}  # label -> (N, seconds per call) of its last measurement
    over: dict[str, str] = {}  # label -> why its longer lengths are skipped
    gen = torch.Generator(device="cpu").manual_seed(seed)
    budgets = dict(min_run_time=min_run_time, min_repeats=min_repeats, max_run_time=max_run_time)
    with num_threads(threads), _progress(len(methods) * len(lengths), progress) as bar:
        meta = environment(dev, tdtype)  # inside: it records the number of threads in use
        start = time.perf_counter()
        for N in lengths:
            # (batch=1, heads, N, d): fused kernels expect 4-D inputs (PyTorch's CPU SDPA falls back to
            # its unfused, N x N path for 3-D ones)
            shape_qk, shape_v = (1, batch_heads, N, d), (1, batch_heads, N, d_v)
            qkv = tuple(torch.randn(s, generator=gen, dtype=torch.float32).to(device=dev, dtype=tdtype)
                        for s in (shape_qk, shape_qk, shape_v))
            dout = torch.randn(shape_v, generator=gen, dtype=torch.float32).to(device=dev, dtype=tdtype)
            grad_qkv = tuple(x.clone().requires_grad_() for x in qkv)
            calls, firsts, recs = {}, {}, {}
            for m in methods:
                bar.set_postfix_str(f"{m.label} N={N}")
                rec = _record(m, N, d, d_v, batch_heads, tdtype, dev, itemsize, meta)
                rec.skipped = _skip_reason(rec, m, last, over, start, budget_s, max_call_s,
                                           memory_fraction, dev)
                if rec.skipped is None:
                    call = _call(m, grad_qkv if m.grad else qkv, dout)
                    first = _warm_up(rec, m, call, dev, over)
                    if first is not None:
                        calls[m.label], firsts[m.label], recs[m.label] = call, first, rec
                records.append(rec)
            timings = time_calls(calls, device=dev, max_first_s=max_call_s, first_s=firsts, **budgets)
            for label, t in timings.items():
                rec = recs[label]
                rec.median_s, rec.q25_s, rec.q75_s, rec.repeats = t.median_s, t.q25_s, t.q75_s, t.repeats
                if t.first_call_s > max_call_s:
                    over[label] = (f"took {t.first_call_s:.2g} s per call at N={N}, over the "
                                   f"{max_call_s:g} s budget")
                if measure_memory:
                    rec.peak_bytes, rec.peak_source = peak_memory(calls[label], device=dev)
                last[label] = (N, rec.median_s)
                rec.gflops = rec.flops / rec.median_s / 1e9
            bar.update(len(methods))
            del qkv, grad_qkv, dout, calls
    return records


def _record(m: Method, N: int, d: int, d_v: int, batch_heads: int, tdtype: Any, dev: Any, itemsize: int,
            meta: dict) -> Record:
    chunk = m.chunk_size if m.chunk_size is not None else 64
    counts = dict(causal=m.causal, chunk_size=chunk, batch_heads=batch_heads)
    passes = 3 if m.grad else 1  # forward + backward counted as three forwards, the usual estimate
    return Record(m.name, m.causal, N, d, d_v, batch_heads, dtype_name(tdtype), str(dev),
                  chunk_size=m.chunk_size, flops=passes * flops(m.counted, N, d, d_v, **counts),
                  predicted_bytes=predicted_bytes(m.counted, N, d, d_v, itemsize=itemsize, **counts),
                  meta=meta)


def _call(m: Method, qkv: tuple[Any, Any, Any], dout: Any) -> Callable[[], Any]:
    q, k, v = qkv
    if not m.grad:
        return lambda: m.fn(q, k, v)
    import torch

    def step() -> Any:  # forward, then the gradients of q, k, v for a fixed dout
        out = m.fn(q, k, v)
        return out, torch.autograd.grad(out, (q, k, v), dout)

    return step


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
        f_prev = flops(m.counted, n_prev, rec.d, rec.d_v, causal=m.causal, chunk_size=rec.chunk_size or 64,
                       batch_heads=rec.batch_heads) * (3 if m.grad else 1)
        predicted = t_prev * rec.flops / f_prev
        rec.predicted_s = predicted
        if predicted > max_call_s:
            return (f"predicted {predicted:.2g} s per call (from {t_prev:.2g} s at N={n_prev}, scaled by the "
                    f"FLOP count) is over the {max_call_s:g} s budget")
    free = available_memory(dev)
    if rec.predicted_bytes > memory_fraction * free:
        return (f"needs about {rec.predicted_bytes / GIB:.3g} GiB (predicted), over {memory_fraction:.0%} "
                f"of the {free / GIB:.3g} GiB free on {dev.type}")
    return None


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def _warm_up(rec: Record, m: Method, call: Callable[[], Any], dev: Any, over: dict[str, str]) -> float | None:
    """The first call, timed; None (and the record skipped) if it ran out of memory."""
    sync = synchronizer(dev)
    try:
        sync()
        start = time.perf_counter()
        call()
        sync()
        return time.perf_counter() - start
    except Exception as exc:
        if not _is_oom(exc):
            raise
        rec.skipped = f"out of memory: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        over[m.label] = f"ran out of memory at N={rec.N}"
        if dev.type == "cuda":
            import torch

            torch.cuda.empty_cache()
        return None


def measured_records(records: Iterable[Record], method: str, causal: bool) -> list[Record]:
    """The measured records of one method (skipped ones left out), by increasing length."""
    return sorted((r for r in records if r.method == method and r.causal == causal and r.measured),
                  key=lambda r: r.N)


def loglog_slope(records: Iterable[Record], method: str, *, causal: bool = False, last: int = 3) -> float:
    """The slope of log(time) against log(N) over the ``last`` longest measured lengths of a method.

    About 2 for a cost growing like ``N²`` and 1 for ``N``, once ``N`` is long enough that fixed overheads
    no longer matter (hence the longest lengths).
    """
    pts = measured_records(records, method, causal)[-last:]
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
    a = {r.N: r.median_s for r in measured_records(records, slow, causal)}
    b = {r.N: r.median_s for r in measured_records(records, fast, cf)}
    if not set(a) & set(b):
        raise ValueError(f"no length where both {slow!r} and {fast!r} were measured")
    return crossing(a, b)


def crossing(slow: Mapping[int, float], fast: Mapping[int, float]) -> float | None:
    """The length from which on ``fast`` takes less time than ``slow`` (``{N: seconds}`` each, compared
    where both have a time): after the last length where ``fast`` is still slower, interpolated
    linearly in ``log N`` on ``log(fast / slow)``. The first common length if ``fast`` is faster at
    every one, None if it is slower at the longest (or there is no common length). The one rule for
    every crossover the book and the benchmark read from measurements."""
    common = sorted(set(slow) & set(fast))
    if not common:
        return None
    ratio = [math.log(fast[n] / slow[n]) for n in common]  # > 0 where fast is slower
    losing = [i for i, r in enumerate(ratio) if r > 0]
    if not losing:
        return float(common[0])
    i = losing[-1]
    if i == len(common) - 1:
        return None
    (n0, r0), (n1, r1) = (common[i], ratio[i]), (common[i + 1], ratio[i + 1])
    return float(math.exp(math.log(n0) + (math.log(n1) - math.log(n0)) * r0 / (r0 - r1)))


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
