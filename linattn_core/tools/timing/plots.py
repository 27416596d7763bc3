"""Plots of timing records: time and memory against length, the cost model against measurements, and
the whole model's tokens/s against context (:func:`throughput_figure`).

Figures follow the book's house style (:mod:`linattn_core.tools.style`): a palette with enough contrast on
white, log axes whose every label is a number, and the legend below the plot, where long method names
fit at any page width. plotly is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .cost import CostModel
from .sweeps import Record, measured_records

__all__ = ["memory_figure", "model_figure", "throughput_figure", "time_figure"]

_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross", "star", "hexagon")


def _series(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.measured:
            groups.setdefault(r.label, []).append(r)
    return {k: sorted(v, key=lambda r: r.N) for k, v in groups.items()}


def _line_figure(records: Sequence[Record], value: Callable[[Record], float], *, y_title: str, title: str,
                 hover: str) -> Any:
    import plotly.graph_objects as go

    from ..style import PALETTE, finish, log_axis

    fig = go.Figure()
    for i, (label, pts) in enumerate(_series(records).items()):
        fig.add_scatter(x=[r.N for r in pts], y=[value(r) for r in pts], name=label, mode="lines+markers",
                        line=dict(color=PALETTE[i % len(PALETTE)], dash=_DASHES[i % len(_DASHES)]),
                        marker=dict(symbol=_SYMBOLS[i % len(_SYMBOLS)], size=8),
                        hovertemplate=f"{label}<br>N=%{{x}}<br>{hover}<extra></extra>")
    fig.update_xaxes(**log_axis(si=True), title="sequence length N (tokens, log scale)")
    fig.update_yaxes(**log_axis(), title=y_title)
    names = ", ".join(_series(records)) or "no measured method"
    alt = f"{title}: log-log lines of {y_title.split(' (')[0]} against sequence length for {names}."
    return finish(fig, title=title, alt=alt, height=460)


def time_figure(records: Sequence[Record], *, title: str = "Time per call against sequence length",
                crossover: float | None = None, crossover_label: str = "measured crossover") -> Any:
    """Log-log plotly figure of the median time per call of each measured method (skipped ones left out).

    ``crossover`` (a length) adds a dotted vertical line there, named ``crossover_label`` in the legend.
    """
    from ..style import legend_below

    fig = _line_figure(records, lambda r: r.median_s * 1e3, y_title="time per call (ms, log scale)",
                       title=title, hover="%{y:.3g} ms")
    if crossover is not None:
        ms = [r.median_s * 1e3 for r in records if r.measured]
        fig.add_scatter(x=[crossover, crossover], y=[min(ms), max(ms)], mode="lines",
                        name=f"{crossover_label} (N ≈ {crossover:.0f})",
                        line=dict(color="#000000", dash="dot", width=1.5),
                        hovertemplate=f"{crossover_label}<br>N ≈ {crossover:.0f}<extra></extra>")
    return legend_below(fig)


def memory_figure(records: Sequence[Record], *, title: str = "Peak extra memory per call") -> Any:
    """Log-log plotly figure of the measured peak extra memory of each method (MiB)."""
    from ..style import legend_below

    with_memory = [r for r in records if r.peak_bytes]
    return legend_below(_line_figure(with_memory, lambda r: r.peak_bytes / 2**20,
                        y_title="peak extra memory (MiB, log scale)", title=title, hover="%{y:.3g} MiB"))


def model_figure(records: Sequence[Record], model: CostModel, methods: Sequence[tuple[str, bool]], *,
                 n_range: tuple[int, int] | None = None,
                 title: str = "Cost model (lines) against measurements (markers)") -> Any:
    """The model's predicted time per call (lines) beside the measured medians (markers), log-log.

    ``methods`` are ``(name, causal)`` pairs; the model is evaluated with the first matching record's
    ``d``, ``d_v``, ``batch_heads`` and chunk size, over ``n_range`` (default: the measured lengths).
    """
    import plotly.graph_objects as go

    from ..style import PALETTE, finish, legend_below, log_axis

    fig = go.Figure()
    for i, (name, causal) in enumerate(methods):
        pts = measured_records(records, name, causal)
        if not pts:
            raise ValueError(f"no measured record of method={name!r} with causal={causal}")
        ref = pts[0]
        lo, hi = n_range or (min(r.N for r in records), max(r.N for r in records))
        grid = np.unique(np.rint(np.geomspace(lo, hi, 60)).astype(np.int64)).tolist()
        counts = dict(causal=causal, chunk_size=ref.chunk_size or 64, batch_heads=ref.batch_heads)
        colour = PALETTE[i % len(PALETTE)]
        label = pts[0].label
        fig.add_scatter(x=grid, y=[model.time_s(name, n, ref.d, ref.d_v, **counts) * 1e3 for n in grid],
                        mode="lines", name=f"{label}: model", line=dict(color=colour, dash="dash"),
                        hovertemplate=f"{label} model<br>N=%{{x}}<br>%{{y:.3g}} ms<extra></extra>")
        fig.add_scatter(x=[r.N for r in pts], y=[r.median_s * 1e3 for r in pts], mode="markers",
                        name=f"{label}: measured", marker=dict(color=colour, size=9),
                        hovertemplate=f"{label} measured<br>N=%{{x}}<br>%{{y:.3g}} ms<extra></extra>")
    fig.update_xaxes(**log_axis(si=True), title="sequence length N (tokens, log scale)")
    fig.update_yaxes(**log_axis(), title="time per call (ms, log scale)")
    names = ", ".join(f"{n} (causal)" if c else n for n, c in methods)
    alt = (f"{title}: log-log plot of time per call against sequence length; dashed model lines and "
           f"measured markers for {names}.")
    return legend_below(finish(fig, title=title, alt=alt, height=460))


def throughput_figure(result: dict, what: str = "training", *, title: str | None = None) -> Any:
    """Tokens per second of the whole model against context, one line per attention layer (log-log), from
    a result of :func:`linattn_core.tools.bench.models.run` (or a stored one): ``what`` is
    ``"training"`` or ``"generation"``. Softmax is drawn black and thick, the reference every crossover
    is read against; the hover gives the batch and the quartiles of the step. The title names the device.
    """
    import plotly.graph_objects as go

    from ..style import PALETTE, finish, legend_below, log_axis

    if what not in ("training", "generation"):
        raise ValueError(f"what must be 'training' or 'generation', got {what!r}")
    rows = [r for r in result[what] if not r["skipped"]]
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    fig = go.Figure()
    others = [k for k in kinds if k != "softmax"]
    for kind in ["softmax", *others] if "softmax" in kinds else others:
        pts = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["context"])
        i = others.index(kind) if kind != "softmax" else -1
        line = (dict(color="#000000", width=3.5) if kind == "softmax"
                else dict(color=PALETTE[i % len(PALETTE)], dash=_DASHES[(i // len(PALETTE)) % len(_DASHES)],
                          width=1.8))
        steps = [f"batch {r['batch']}, step {r['median_s'] * 1e3:.3g} ms ({r['q25_s'] * 1e3:.3g}-"
                 f"{r['q75_s'] * 1e3:.3g})" for r in pts]
        fig.add_scatter(x=[r["context"] for r in pts], y=[r["tokens_per_s"] for r in pts], name=kind,
                        mode="lines+markers", line=line, customdata=steps,
                        marker=dict(symbol=_SYMBOLS[(i + 1) % len(_SYMBOLS)], size=7),
                        hovertemplate=(f"{kind}<br>context %{{x}}<br>%{{y:.4g}} tokens/s<br>%{{customdata}}"
                                       "<extra></extra>"))
    doing = "training (forward, backward, AdamW)" if what == "training" else "generation (a token a step)"
    # two lines: the device names a CPU at length, and one line would run out of a narrow figure
    title = title or f"Whole model, {doing}<br>{result['device']}"
    fig.update_xaxes(**log_axis(si=True), title="context (tokens, log scale)")
    fig.update_yaxes(**log_axis(si=True), title="tokens per second (log scale)")
    alt = (f"{title.replace('<br>', ': ')}. Log-log lines of tokens per second against context length for"
           f" the layers {', '.join(kinds)}; softmax is the thick black line.")
    return legend_below(finish(fig, title=title, alt=alt, height=480))
