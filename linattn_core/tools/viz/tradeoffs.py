"""Figures of the trade-offs chapter: cost of softmax against linear attention, from the one cost model.

The curves are :func:`linattn_core.tools.timing.cost_curves` (FLOPs and bytes of ``softmax_naive`` and
``linear``, their :func:`~linattn_core.tools.timing.flop_crossover`) and
:func:`linattn_core.tools.timing.decode_memory` (KV cache against the fixed state): the associative chapter,
the timing chapter and the benchmark count with the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..style import PALETTE, SIG_DIGITS, finish, json_list, log_axis
from ..timing.cost import cost_curves, decode_memory
from .controls import arrange, control_label, frame_slider, frames_for, menu, visible_groups

#: Legend names of the two forms the explorer compares (the quadratic one is softmax attention).
QUADRATIC_NAME, LINEAR_NAME = "softmax (N×N scores)", "linear (state S, z)"


def _cost_traces(N: np.ndarray, T: np.ndarray, d: int, d_v: int, d_phi: int | None, itemsize: int,
                 digits: int | None) -> list[go.BaseTraceType]:
    c = cost_curves(N, d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)
    mem = decode_memory(T, d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)
    quad, lin = {"color": PALETTE[1]}, {"color": PALETTE[0]}
    n, t = N.tolist(), T.tolist()
    x = float(c["crossover_N"])
    y = float(cost_curves(np.array([x]), d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)["flops_linear"][0])

    def line(x, y, name, style, show, unit):
        return go.Scatter(x=x, y=json_list(y, digits), mode="lines", name=name, line={**style, "width": 2.5},
                          legendgroup=name, showlegend=show,
                          hovertemplate="%{x:.3s}<br>%{y:.3s} " + unit + "<extra>" + name + "</extra>")

    return [line(n, c["flops_quadratic"], QUADRATIC_NAME, quad, True, "FLOPs"),
            line(n, c["flops_linear"], LINEAR_NAME, lin, True, "FLOPs"),
            line(n, c["bytes_quadratic"], QUADRATIC_NAME, quad, False, "bytes"),
            line(n, c["bytes_linear"], LINEAR_NAME, lin, False, "bytes"),
            line(t, mem["kv_cache"], "KV cache (softmax)", {**quad, "dash": "dot"}, True, "bytes"),
            line(t, mem["state"], "fixed state (linear)", {**lin, "dash": "dot"}, True, "bytes"),
            _crossover(x, y, "equal FLOPs", "FLOPs", digits),
            _crossover(float(mem["crossover_T"]), float(mem["state"].flat[0]), "cache = state", "bytes",
                       digits)]


def _crossover(x: float, y: float, what: str, unit: str, digits: int | None) -> go.Scatter:
    """A marked point where the two curves of a panel meet, labelled with its N."""
    return go.Scatter(x=json_list([x], digits), y=json_list([y], digits), mode="markers+text",
                      showlegend=False,
                      marker={"symbol": "diamond", "size": 10, "color": "black"},
                      text=[f"{x:.0f} tokens"], textposition="bottom right", textfont={"size": 11},
                      name=what, cliponaxis=False,
                      hovertemplate="%{x:.0f} tokens<br>%{y:.3s} " + unit + "<extra>" + what + "</extra>")


_COST_CELLS = [(1, 1), (1, 1), (1, 2), (1, 2), (1, 3), (1, 3), (1, 1), (1, 3)]


def _measured_traces(measured: Sequence[Mapping[str, Any]]) -> list[go.Scatter]:
    by: dict[str, list[tuple[float, float]]] = {}
    for i, rec in enumerate(measured):
        try:
            by.setdefault(str(rec["method"]), []).append((float(rec["N"]), float(rec["median_s"])))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"measured[{i}] must be a mapping with N, method and median_s; "
                             f"got {rec!r}") from e
    out = []
    for j, (method, pts) in enumerate(sorted(by.items())):
        pts.sort()
        out.append(go.Scatter(x=[p[0] for p in pts], y=[float(f"{p[1]:.4g}") for p in pts],
                              mode="lines+markers", name=f"measured: {method}",
                              marker={"symbol": ["circle", "square", "diamond", "x", "triangle-up"][j % 5],
                                      "size": 8, "color": PALETTE[(j + 2) % len(PALETTE)]},
                              hovertemplate="N=%{x}<br>median %{y:.3g} s<extra>" + method + "</extra>"))
    return out


def _cost_canvas(measured: Sequence[Mapping[str, Any]] | None) -> tuple[go.Figure, int]:
    titles = ["operations", "bytes touched", "memory kept to decode"]
    if measured:
        fig = make_subplots(rows=2, cols=3, specs=[[{}, {}, {}], [{"colspan": 3}, None, None]],
                            subplot_titles=[*titles, "measured time (median of repeats)"],
                            horizontal_spacing=0.08, vertical_spacing=0.22, row_heights=[0.55, 0.45])
        for tr in _measured_traces(measured):
            fig.add_trace(tr, row=2, col=1)
        return fig, len(fig.data)
    return make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.1), 0


def _cost_axes(fig: go.Figure, has_measured: bool,
               yr: Mapping[str, tuple[float, float]] | None = None) -> None:
    for c, (xt, yt) in enumerate((("sequence length N", "FLOPs"), ("sequence length N", "bytes"),
                                  ("context length", "bytes kept")), 1):
        fig.update_xaxes(**log_axis(si=True), title_text=xt, row=1, col=c)
        fig.update_yaxes(**log_axis(si=True), title_text=yt, row=1, col=c,
                         **({"range": yr[yt.split()[0]]} if yr else {}))
    if has_measured:
        fig.update_xaxes(**log_axis(si=True), title_text="sequence length N", row=2, col=1)
        fig.update_yaxes(**log_axis(), title_text="seconds", row=2, col=1)


def cost_figure(*, d: int = 64, d_v: int | None = None, d_phi: int | None = None, itemsize: int = 4,
                N: Any = None, T: Any = None, measured: Sequence[Mapping[str, Any]] | None = None,
                title: str | None = None, alt: str | None = None, height: int | None = None) -> go.Figure:
    """Log-log cost curves: FLOPs and bytes vs N (softmax vs linear attention,
    :func:`linattn_core.tools.timing.cost_curves`), KV-cache vs fixed-state bytes vs context length
    (:func:`linattn_core.tools.timing.decode_memory`), and measured times if given.

    Parameters
    ----------
    measured : list of mappings with keys ``N``, ``method``, ``median_s``, optional
        E.g. the records of a ``linattn_core.tools.timing`` sweep; drawn per method on a log-log panel.
    """
    d_v = d if d_v is None else d_v
    N_ = np.unique(np.round(np.logspace(4, 17, 27, base=2))) if N is None else np.asarray(N, dtype=np.float64)
    T_ = N_ if T is None else np.asarray(T, dtype=np.float64)
    fig, _ = _cost_canvas(measured)
    for tr, (r, c) in zip(_cost_traces(N_, T_, d, d_v, d_phi, itemsize, None), _COST_CELLS, strict=True):
        fig.add_trace(tr, row=r, col=c)
    _cost_axes(fig, bool(measured))
    x = float(cost_curves(N_, d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)["crossover_N"])
    text = alt or (f"Three log-log panels for d = {d}, d_v = {d_v}: FLOPs and bytes against sequence length, "
                   f"where the quadratic form grows as N squared and the linear form as N, crossing near "
                   f"N = {x:.0f}; and memory kept while decoding, where the KV cache grows with the context "
                   f"and the linear state stays constant." + (" A fourth panel shows measured times."
                                                              if measured else ""))
    h = height or (760 if measured else 500)
    finish(fig, title=title or f"Cost of attention, softmax vs linear (d = {d}, d_v = {d_v})",
           alt=text, height=h)
    return arrange(fig, height=h, legend_rows=2)


def cost_twin(*, ds: Sequence[int] = (16, 32, 64, 128), d_vs: Sequence[int] = (16, 32, 64, 128),
              d0: int = 64, d_v0: int = 64, itemsize: int = 4,
              measured: Sequence[Mapping[str, Any]] | None = None,
              digits: int = SIG_DIGITS, height: int | None = None) -> go.Figure:
    """Static twin of the cost explorer: a slider over d (frames) and a dropdown over d_v (visibility)."""
    ds, d_vs = [int(x) for x in ds], [int(x) for x in d_vs]
    if d0 not in ds or d_v0 not in d_vs:
        raise ValueError(f"d0={d0} must be in ds={ds} and d_v0={d_v0} in d_vs={d_vs}")
    N_ = np.unique(np.round(np.logspace(4, 17, 27, base=2)))
    fig, n_shared = _cost_canvas(measured)
    groups: list[int] = []
    for g, dv in enumerate(d_vs):
        for tr, (r, c) in zip(_cost_traces(N_, N_, d0, dv, None, itemsize, digits), _COST_CELLS, strict=True):
            tr.visible = dv == d_v0
            tr.showlegend = bool(tr.showlegend)
            fig.add_trace(tr, row=r, col=c)
            groups.append(g)
    # fixed y ranges covering every (d, d_v): frames do not rescale axes
    allc = [cost_curves(N_, d=d, d_v=dv, itemsize=itemsize) for d in ds for dv in d_vs]
    allm = [decode_memory(N_, d=d, d_v=dv, itemsize=itemsize) for d in ds for dv in d_vs]
    f = np.concatenate([np.r_[c["flops_quadratic"], c["flops_linear"]] for c in allc])
    b = np.concatenate([np.r_[c["bytes_quadratic"], c["bytes_linear"]] for c in allc]
                       + [np.r_[m["kv_cache"], m["state"]] for m in allm])
    yr = {"FLOPs": (np.log10(f.min()) - 0.2, np.log10(f.max()) + 0.2),
          "bytes": (np.log10(b.min()) - 0.2, np.log10(b.max()) + 0.2)}
    _cost_axes(fig, bool(measured), yr)
    idx = list(range(n_shared, len(fig.data)))
    fig.frames = frames_for(fig, [f"d={d}" for d in ds], idx,
                            [[tr for dv in d_vs for tr in _cost_traces(N_, N_, d, dv, None, itemsize, digits)]
                             for d in ds])
    fig.update_layout(
        sliders=[frame_slider(ds, [f"d={d}" for d in ds], prefix="key/query dim d = ", active=ds.index(d0),
                              length=0.6)],
        updatemenus=[menu([str(x) for x in d_vs], [[{"visible": visible_groups(groups, n_shared, g)}]
                                                    for g in range(len(d_vs))],
                          active=d_vs.index(d_v0), label="value dim d_v:", buttons=True)])
    control_label(fig, "value dim d_v:")
    text = ("Interactive figure with a slider over d and a menu for d_v. Three log-log panels: FLOPs and "
            "bytes against sequence length (quadratic grows as N squared, linear as N) and memory kept while "
            "decoding (the KV cache grows with the context, the linear state stays constant)."
            + (" A fourth panel shows measured times." if measured else ""))
    h = height or (800 if measured else 560)
    finish(fig, title="Cost of attention, softmax vs linear (φ = elu+1, so d_phi = d)", alt=text, height=h)
    return arrange(fig, height=h, legend_rows=2)
