"""The one cost model: FLOPs, bytes and working memory of each attention method, and where they cross.

Every count in the book comes from here: the associative chapter's table and crossover, the trade-offs
explorer's curves (:mod:`linattn_core.tools.viz.tradeoffs` draws :func:`cost_curves`), the timing chapter's
roofline (:class:`CostModel`) and the benchmark's GFLOP/s (:func:`flops` of each record).

Conventions, per batch-head, with ``D = d_phi`` (``d`` for elementwise maps such as elu+1):

- a multiply-add counts as two FLOPs, and only the products that grow with ``N`` times a width are
  counted: the softmax's exponentials, the feature map, the divisions and the normalizers (a column of
  ones appended to ``V``: ``d_v -> d_v + 1``, a relative ``1 / d_v`` more) are lower order;
- two quadratic forms are distinct methods because they cost differently: ``softmax_naive`` and
  ``sdpa`` compute ``Q Kᵀ`` (width ``d``), ``kernel`` (:func:`linattn_core.kernel_attention`) computes
  ``φ(Q) φ(K)ᵀ`` (width ``D``). Against the associative form (``4 N D d_v``) they cross at
  ``N = 2 D d_v / (d + d_v)`` and ``N = 2 D d_v / (D + d_v)``: :func:`flop_crossover` names which;
- ``skip_masked``: whether a causal form skips the masked half of its score blocks. ``None`` takes the
  method's own behaviour: the fused ``sdpa`` kernel skips them, ``softmax_naive`` and ``kernel`` build
  the full matrix and then mask it, ``chunked`` computes its masked ``C x C`` blocks in full;
- ``projected``: whether ``φ`` first multiplies every query and key by a ``d x D`` matrix, as
  random-feature maps do (Performer's FAVOR+ computes ``W x'``). That is ``2 N d D`` FLOPs for the
  queries and as many for the keys, ``4 N d D`` in all: the same order as the associative products
  ``4 N D d_v`` (equal to them when ``d = d_v``), so it is counted, in every form that applies ``φ``
  (``kernel`` and the linear forms). Elementwise maps (elu+1, ReLU) have no such term.

Sizes may be numpy arrays of lengths (:func:`cost_curves`); the scalar functions check their arguments.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..._backend import check_positive_int

__all__ = [
    "COUNTED",
    "METHODS",
    "CostModel",
    "bytes_moved",
    "check_sizes",
    "cost_curves",
    "crossover_length",
    "decode_memory",
    "flop_crossover",
    "flops",
    "predicted_bytes",
]

#: The methods a sweep times. ``auto`` is counted as ``chunked``, the form it runs where timing matters.
METHODS = ("softmax_naive", "sdpa", "linear", "recurrent", "cumsum", "chunked", "auto")
#: The methods the counts know: the timed ones and the quadratic kernel form ``kernel``.
COUNTED = (*METHODS, "kernel")
CAUSAL_ONLY = ("recurrent", "cumsum", "chunked", "auto")
_SKIPS_BY_DEFAULT = ("sdpa",)


def check_sizes(**sizes: int) -> None:
    """Raise a ValueError naming the first size that is not a positive integer (the package's one rule,
    :func:`linattn_core._backend.check_positive_int`)."""
    for name, value in sizes.items():
        check_positive_int(value, name)


def _kind(method: str, causal: bool) -> str:
    if method not in COUNTED:
        raise ValueError(f"method={method!r} is not one of {COUNTED}")
    if method in CAUSAL_ONLY and not causal:
        raise ValueError(f"method={method!r} is a causal form: pass causal=True")
    return "chunked" if method == "auto" else method


def _skips(kind: str, causal: bool, skip_masked: bool | None) -> bool:
    if not causal:
        return False
    return kind in _SKIPS_BY_DEFAULT if skip_masked is None else bool(skip_masked)


def _flop_terms(kind: str, d: int, d_v: int, D: int, C: Any, skip: bool,
                projected: bool = False) -> tuple[Any, Any]:
    """``(a2, a1)`` with FLOPs ``= a2 N² + a1 N`` per batch-head (``C`` already ``min(chunk_size, N)``)."""
    share = 0.5 if skip else 1.0  # the masked half of the score blocks, skipped or not
    if kind in ("softmax_naive", "sdpa"):
        return 2.0 * (d + d_v) * share, 0.0  # Q Kᵀ and A V
    features = 4.0 * d * D if projected else 0.0  # φ(Q) and φ(K) through a d x D projection
    if kind == "kernel":
        return 2.0 * (D + d_v) * share, features  # φ(Q) φ(K)ᵀ and A V
    if kind == "chunked":  # states between chunks, masked C x C products inside each chunk
        return 0.0, features + 4.0 * D * d_v + 2.0 * C * (D + d_v) * share
    return 0.0, features + 4.0 * D * d_v  # S = φ(K)ᵀ V and φ(Q) S, however they are ordered in time


def _flops(kind: str, N: Any, d: int, d_v: int, D: int, chunk_size: int, skip: bool,
           projected: bool = False) -> Any:
    # a chunk is never longer than the sequence: C = min(chunk_size, N), elementwise for arrays of N
    a2, a1 = _flop_terms(kind, d, d_v, D, np.minimum(chunk_size, N), skip, projected)
    return a2 * N * N + a1 * N


def flops(method: str, N: int, d: int, d_v: int, *, causal: bool = False, chunk_size: int = 64,
          d_phi: int | None = None, batch_heads: int = 1, skip_masked: bool | None = None,
          projected: bool = False) -> float:
    """Floating-point operations of one attention call (a multiply-add counts as two).

    Per batch-head, with ``D = d_phi`` (the module docstring says what is left out and why):

    ==================  ==========================================  ========================================
    method              FLOPs                                       why
    ==================  ==========================================  ========================================
    ``softmax_naive``   ``2 N² (d + d_v)``                          ``Q Kᵀ`` and ``A V``; the causal form
                                                                    computes the full matrix, then masks
    ``sdpa``            ``2 N² (d + d_v)``, half of it if causal    the fused kernel skips masked blocks
    ``kernel``          ``2 N² (D + d_v)``                          ``φ(Q) φ(K)ᵀ`` and ``A V``
    ``linear``          ``4 N D d_v``                               ``S = φ(K)ᵀ V`` and ``φ(Q) S``
    ``recurrent``       ``4 N D d_v``                               per token: add ``φ(k) vᵀ``, read
                                                                    ``φ(q)ᵀ S``
    ``cumsum``          ``4 N D d_v``                               the same products, then prefix sums
    ``chunked``/auto    ``4 N D d_v + 2 N C (D + d_v)``             states between chunks, masked ``C x C``
                                                                    products inside each chunk
    ==================  ==========================================  ========================================

    ``skip_masked=True`` halves the masked score work of a causal form (``2 N C`` becomes ``N C`` for
    ``chunked``), ``False`` counts it in full; ``None`` takes the method's own behaviour.
    ``projected=True`` adds ``4 N d D`` to every form that applies ``φ`` (not to ``softmax_naive`` or
    ``sdpa``): the ``d x D`` projection of the queries and keys that random-feature maps compute.

    >>> flops("linear", 1000, 64, 64, d_phi=256) / flops("linear", 1000, 64, 64)
    4.0
    >>> flops("linear", 1000, 64, 64, d_phi=256, projected=True) / flops("linear", 1000, 64, 64)
    8.0
    """
    check_sizes(N=N, d=d, d_v=d_v, chunk_size=chunk_size, batch_heads=batch_heads)
    kind = _kind(method, causal)
    D = d if d_phi is None else d_phi
    check_sizes(d_phi=D)
    skip = _skips(kind, causal, skip_masked)
    return float(_flops(kind, N, d, d_v, D, chunk_size, skip, projected)) * batch_heads


def _bytes(kind: str, N: Any, d: int, d_v: int, D: int, chunk_size: int) -> Any:
    io = N * (2.0 * d + 2.0 * d_v)
    if kind == "softmax_naive":
        return io + 4.0 * N * N
    if kind == "kernel":
        return io + 4.0 * N * N + 4.0 * N * D
    if kind == "sdpa":
        return io
    if kind == "cumsum":
        return io + 4.0 * N * D + 4.0 * N * D * d_v
    if kind == "chunked":
        C = np.minimum(chunk_size, N)
        return io + 4.0 * N * D + 2.0 * np.ceil(N / C) * D * d_v + 2.0 * N * C
    return io + 4.0 * N * D


def bytes_moved(method: str, N: int, d: int, d_v: int, *, causal: bool = False, chunk_size: int = 64,
                d_phi: int | None = None, batch_heads: int = 1, itemsize: int = 4) -> float:
    """Bytes one call must read from and write to main memory, at least (a traffic model, not a peak).

    Every method reads ``q``, ``k``, ``v`` and writes the output: ``N (2 d + 2 d_v)`` numbers. On top:

    - ``softmax_naive`` writes the ``N x N`` scores, reads and rewrites them in the softmax, reads them
      again for ``A V``: four passes over ``N²`` numbers; ``kernel`` the same, plus ``φ(q)``, ``φ(k)``;
    - ``sdpa`` keeps its tiles of scores in cache (the fused, FlashAttention-style kernel): nothing more;
    - ``linear``/``recurrent`` write and read ``φ(q)`` and ``φ(k)``: ``4 N D`` numbers (the ``D x d_v``
      state stays in cache);
    - ``cumsum`` writes all ``N`` prefix states ``D x d_v`` and reads them back (the outer products, then
      their running sums): ``4 N D d_v`` numbers more;
    - ``chunked`` writes and reads one state per chunk and the ``C x C`` intra-chunk scores:
      ``4 N D + 2 (N / C) D d_v + 2 N C`` numbers.
    """
    check_sizes(N=N, d=d, d_v=d_v, chunk_size=chunk_size, batch_heads=batch_heads, itemsize=itemsize)
    kind = _kind(method, causal)
    D = d if d_phi is None else d_phi
    return float(_bytes(kind, N, d, d_v, D, chunk_size)) * batch_heads * itemsize


def predicted_bytes(method: str, N: int, d: int, d_v: int, *, causal: bool = False, chunk_size: int = 64,
                    d_phi: int | None = None, batch_heads: int = 1, itemsize: int = 4) -> int:
    """Working memory one call is predicted to need beyond its inputs (output included), in bytes.

    Used by :func:`~linattn_core.tools.timing.sweep` to skip what would not fit. Per batch-head, in numbers:

    - ``softmax_naive``/``kernel``: two ``N x N`` matrices alive at once (scores and weights), the output
      (and ``φ(q)``, ``φ(k)`` for ``kernel``);
    - ``sdpa``: the output and a row statistic per query (fused kernels keep the scores in tiles);
    - ``linear``/``recurrent``: ``φ(q)``, ``φ(k)``, the output twice (the per-token rows, then the stacked
      result), and the state;
    - ``cumsum``: all ``N`` prefix states ``D x d_v`` twice (the outer products and their running sums);
    - ``chunked``/``auto``: ``φ(q)``, ``φ(k)``, the output, the ``C x C`` scores of every chunk and the state
      of every chunk twice (per-chunk sums and their prefix sums).
    """
    check_sizes(N=N, d=d, d_v=d_v, chunk_size=chunk_size, batch_heads=batch_heads, itemsize=itemsize)
    kind = _kind(method, causal)
    D = d if d_phi is None else d_phi
    out = N * d_v
    if kind == "softmax_naive":
        per = 2.0 * N * N + out
    elif kind == "kernel":
        per = 2.0 * N * N + out + 2.0 * N * D
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


def flop_crossover(slow: str = "softmax_naive", fast: str = "linear", *, d: int = 64, d_v: int = 64,
                   d_phi: int | None = None, causal: bool = False, chunk_size: int = 64,
                   skip_masked: bool | None = None, projected: bool = False) -> float:
    """The length ``N`` (a real number) where the FLOP counts of ``slow`` and ``fast`` are equal.

    ``slow`` is a quadratic form and ``fast`` a linear one; above the returned length ``fast`` needs
    fewer FLOPs. The quadratic form matters: softmax against the associative form,
    ``flop_crossover("softmax_naive", "linear")``, is ``2 D d_v / (d + d_v)``; the kernel form against it,
    ``flop_crossover("kernel", "linear")``, is ``2 D d_v / (D + d_v)``. Against ``chunked`` add ``C``
    (the root lies above ``C``, where the chunk size is ``chunk_size``). Causal-only forms are causal.
    A projecting feature map (``projected=True``, random features) adds ``4 d D`` per token to the
    linear side: against softmax the crossover becomes ``(4 D d_v + 4 d D) / (2 (d + d_v)) = 2 D``,
    whatever ``d`` and ``d_v``; against the kernel form, which projects too, the term cancels.

    >>> flop_crossover("softmax_naive", "linear", d=64, d_v=64, d_phi=256)
    256.0
    >>> flop_crossover("softmax_naive", "linear", d=64, d_v=64, d_phi=256, projected=True)
    512.0
    >>> flop_crossover("kernel", "linear", d=64, d_v=64, d_phi=256, projected=True)
    102.4
    """
    D = d if d_phi is None else d_phi
    check_sizes(d=d, d_v=d_v, d_phi=D, chunk_size=chunk_size)
    terms = []
    for m in (slow, fast):
        c = causal or m in CAUSAL_ONLY
        kind = _kind(m, c)
        terms.append(_flop_terms(kind, d, d_v, D, float(chunk_size), _skips(kind, c, skip_masked), projected))
    (a2s, a1s), (a2f, a1f) = terms
    if not a2s > a2f:
        raise ValueError(f"slow={slow!r} must grow faster with N than fast={fast!r} (a quadratic form "
                         "against a linear one)")
    return float((a1f - a1s) / (a2s - a2f))


def cost_curves(N: Any, *, d: int = 64, d_v: int | None = None, d_phi: int | None = None, itemsize: int = 4,
                quadratic: str = "softmax_naive", linear: str = "linear",
                chunk_size: int = 64, projected: bool = False) -> dict[str, np.ndarray]:
    """FLOPs and bytes of one head for every length in ``N`` (any shape): a quadratic form against a
    linear one, from :func:`flops` and :func:`bytes_moved`, and their :func:`flop_crossover`
    (``projected``: a random-feature map's projection is counted, as in :func:`flops`).

    Returns ``flops_quadratic``, ``flops_linear``, ``bytes_quadratic``, ``bytes_linear`` (float arrays
    shaped like ``N``), ``crossover_N`` and the two method names.
    """
    N_ = np.asarray(N, dtype=np.float64)
    if N_.size and np.any(N_ < 1):
        raise ValueError(f"N must be >= 1 everywhere, got min {N_.min()}")
    d_v = d if d_v is None else d_v
    D = d if d_phi is None else d_phi
    check_sizes(d=d, d_v=d_v, d_phi=D, itemsize=itemsize, chunk_size=chunk_size)
    out: dict[str, Any] = {"quadratic": quadratic, "linear": linear}
    for role, method in (("quadratic", quadratic), ("linear", linear)):
        causal = method in CAUSAL_ONLY
        kind = _kind(method, causal)
        out[f"flops_{role}"] = _flops(kind, N_, d, d_v, D, chunk_size, _skips(kind, causal, None), projected)
        out[f"bytes_{role}"] = itemsize * _bytes(kind, N_, d, d_v, D, chunk_size)
    out["crossover_N"] = np.float64(flop_crossover(quadratic, linear, d=d, d_v=d_v, d_phi=D,
                                                   chunk_size=chunk_size, projected=projected))
    return out


def decode_memory(T: Any, *, d: int = 64, d_v: int | None = None, d_phi: int | None = None,
                  itemsize: int = 4, n_layers: int = 1, n_heads: int = 1) -> dict[str, np.ndarray]:
    """Bytes kept between decoding steps after ``T`` tokens: a KV cache (``T (d + d_v)`` numbers per head
    and layer, growing) against the fixed linear-attention state (``D d_v + D`` numbers, constant)."""
    T_ = np.asarray(T, dtype=np.float64)
    d_v = d if d_v is None else d_v
    D = d if d_phi is None else d_phi
    check_sizes(d=d, d_v=d_v, d_phi=D, itemsize=itemsize, n_layers=n_layers, n_heads=n_heads)
    per = itemsize * n_layers * n_heads
    state = per * (D * d_v + D)
    return {"kv_cache": per * T_ * (d + d_v), "state": np.full_like(T_, float(state)),
            "crossover_T": np.float64((D * d_v + D) / (d + d_v))}


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
        skip = counts.pop("skip_masked", None)
        projected = counts.pop("projected", False)  # arithmetic only: the projection matrix is small
        return max(flops(method, N, d, d_v, skip_masked=skip, projected=projected, **counts) / self.flop_rate,
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

    def calibrate(self, records: Iterable[Any]) -> CostModel:
        """A copy whose ``efficiency`` and ``overhead_s`` fit the measured records (least squares per method).

        For each method label (``"chunked (causal)"``, ``"sdpa"``), ``time = overhead + roofline /
        efficiency`` is fitted to its measured lengths with ``overhead >= 0``, relative errors weighted
        alike; methods measured at fewer than two lengths keep their defaults. ``records`` are
        :class:`~linattn_core.tools.timing.Record` objects.
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
                     batch_heads: int = 1, itemsize: int = 4, n_max: int = 2**30,
                     projected: bool = False) -> int | None:
    """The sequence length from which on ``fast`` is at least as fast as ``slow`` according to ``model``.

    "From which on" matters when fixed overheads make ``fast`` win at tiny lengths, lose in between and win
    again for long sequences: the answer is the start of the last stretch, up to ``n_max``. Lengths
    ``1 .. n_max`` are scanned on a logarithmic grid, then the crossing is bisected to the integer.
    ``causal`` applies to both methods, except that the causal-only forms (``recurrent``, ``cumsum``,
    ``chunked``, ``auto``) are always causal. Returns ``None`` if ``slow`` is still faster at ``n_max``.
    ``batch_heads`` matters once the model has overheads: they are per call, the work is per head.
    With equal rates and free memory this is :func:`flop_crossover` rounded up. ``projected`` counts a
    random-feature map's projection (:func:`flops`).

    Examples
    --------
    With equal rates and no memory limit, chunked (``C = 64``) overtakes the naive softmax form at
    ``2 N² (d + d_v) = 4 N d d_v + 2 N C (d + d_v)``, i.e. ``N = 128`` for ``d = d_v = 64``:

    >>> crossover_length(CostModel(flop_rate=1e9, byte_rate=float("inf")), d=64, d_v=64)
    128
    """
    check_sizes(d=d, d_v=d_v, chunk_size=chunk_size, n_max=n_max, batch_heads=batch_heads)
    common = dict(d_phi=d_phi, chunk_size=chunk_size, itemsize=itemsize, batch_heads=batch_heads,
                  projected=projected)

    def fast_wins(n: int) -> bool:
        t_fast = model.time_s(fast, n, d, d_v, causal=causal or fast in CAUSAL_ONLY, **common)
        t_slow = model.time_s(slow, n, d, d_v, causal=causal or slow in CAUSAL_ONLY, **common)
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
