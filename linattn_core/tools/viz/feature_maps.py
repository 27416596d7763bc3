"""Figures of the feature-maps chapter: a map's attention against softmax's, and Performer's error
against the number of random features (data from :mod:`~linattn_core.tools.viz.data`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..style import OKABE_ITO, SIG_DIGITS, finish, json_list, log_axis, matrix_axes, sym_range
from .controls import arrange, control_label, frame_slider, frames_for, menu, visible_groups
from .data import PERFORMER_VARIANTS, variant_label
from .matrix import attention_trace


def _perf_style(kind: str, orth: bool) -> dict:
    colour = OKABE_ITO[0] if kind == "positive" else OKABE_ITO[5]
    return {"color": colour, "dash": "solid" if orth else "dash"}


def _perf_curves(curves: Mapping[str, Any]) -> list[tuple[go.Scatter, int]]:
    """The error curves of every variant: (trace, subplot column), kernel error in 1, output error in 2."""
    ms = curves["ms"].tolist()
    traces = []
    for key, col in (("kernel", 1), ("output", 2)):
        for kind, orth in PERFORMER_VARIANTS:
            lab = variant_label(kind, orth)
            traces.append((go.Scatter(
                x=ms, y=json_list(curves["variants"][(kind, orth)][key], SIG_DIGITS), mode="lines+markers",
                name=lab, legendgroup=lab, showlegend=col == 1, line={**_perf_style(kind, orth), "width": 2},
                marker={"size": 5},
                hovertemplate="m=%{x}<br>relative error=%{y:.3g}<extra>" + lab + "</extra>"), col))
    return traces


def _perf_selected(curves: Mapping[str, Any], kind: str, orth: bool, a: int,
                   digits: int | None) -> list[go.BaseTraceType]:
    """Markers at the chosen m on both curves, and the scatter of K̂ against K for that m."""
    var = curves["variants"][(kind, orth)]
    m = int(curves["ms"][a])
    sel = {"size": 14, "color": "rgba(0,0,0,0)", "line": {"color": "black", "width": 2}}
    mk = [go.Scatter(x=[m], y=json_list([var[key][a]], digits), mode="markers", marker=sel, showlegend=False,
                     name=f"m = {m}", hovertemplate="m=%{x}<br>error=%{y:.3g}<extra>chosen</extra>")
          for key in ("kernel", "output")]
    sc = go.Scatter(x=json_list(curves["exact_pairs"], digits), y=json_list(var["pairs"][a], digits),
                    mode="markers",
                    marker={"size": 5, "color": _perf_style(kind, orth)["color"], "opacity": 0.7},
                    showlegend=False, name=f"K̂ entries, m = {m}",
                    hovertemplate="exact=%{x:.3g}<br>estimate=%{y:.3g}<extra></extra>")
    return [*mk, sc]


def _perf_canvas(curves: Mapping[str, Any]) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.11,
                        subplot_titles=("kernel error |K̂ − K| / K", "output error",
                                        "K̂ against exact K"))
    for tr, col in _perf_curves(curves):
        fig.add_trace(tr, row=1, col=col)
    ex = np.asarray(curves["exact_pairs"])
    lo, hi = 0.0, float(ex.max()) * 1.05
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"color": "grey", "dash": "dot"},
                             name="estimate = exact", showlegend=False, hoverinfo="skip"), row=1, col=3)
    return fig


def _perf_axes(fig: go.Figure, curves: Mapping[str, Any]) -> None:
    ms = curves["ms"].tolist()
    allv = np.concatenate([np.r_[v["kernel"], v["output"]] for v in curves["variants"].values()])
    allv = allv[np.isfinite(allv) & (allv > 0)]
    # cap at 100: trigonometric outputs with denominators <= 0 reach 1e7 and would flatten the rest
    ylo, yhi = np.log10(allv.min()) - 0.15, min(np.log10(allv.max()) + 0.15, 2.0)
    for c in (1, 2):
        # ticks at the computed m only: every label whole, none crowded in a narrow panel
        fig.update_xaxes(**log_axis(si=True, tickvals=ms), title_text="features m", row=1, col=c)
        fig.update_yaxes(**log_axis(), title_text="relative error" if c == 1 else None, range=[ylo, yhi],
                         row=1, col=c)
    ex = np.asarray(curves["exact_pairs"])
    est = np.concatenate([v["pairs"].ravel() for v in curves["variants"].values()])
    hi = float(ex.max())
    lo = max(min(0.0, float(np.percentile(est, 1))), -0.6 * hi)  # trig estimates can be negative
    fig.update_xaxes(title_text="exact exp(q·k/√d)", range=[0, hi * 1.05], row=1, col=3)
    fig.update_yaxes(title_text="estimate", range=[lo, hi * 1.6], row=1, col=3)


def performer_error_figure(curves: Mapping[str, Any], *, m: int | None = None, kind: str = "positive",
                           orthogonal: bool = True, title: str | None = None, alt: str | None = None,
                           height: int = 460) -> go.Figure:
    """Log-log error curves of Performer features vs m (from :func:`performer_error_curves`), the chosen
    (m, variant) marked, and a scatter of its kernel estimates against the exact kernel."""
    ms = curves["ms"].tolist()
    m = ms[len(ms) // 2] if m is None else int(m)
    if m not in ms:
        raise ValueError(f"m must be one of the computed feature counts {ms}, got {m}")
    if (kind, orthogonal) not in curves["variants"]:
        raise ValueError(f"kind must be 'positive' or 'trig' (got {kind!r}); orthogonal a bool")
    fig = _perf_canvas(curves)
    for tr, c in zip(_perf_selected(curves, kind, orthogonal, ms.index(m), None), (1, 2, 3), strict=True):
        fig.add_trace(tr, row=1, col=c)
    _perf_axes(fig, curves)
    lab = variant_label(kind, orthogonal)
    text = alt or (f"Log-log plots of the relative error of the kernel estimate and of the attention output "
                   f"against the number of random features m, for positive and trigonometric features with "
                   f"orthogonal or iid projections; errors fall as m grows. m = {m} ({lab}) is marked, and a "
                   f"scatter compares its kernel estimates with the exact values.")
    finish(fig, title=title or f"Performer random features: error vs m (chosen: m = {m}, {lab})",
           alt=text, height=height)
    return arrange(fig, height=height, legend_rows=2)


def performer_twin(curves: Mapping[str, Any], *, digits: int = SIG_DIGITS, height: int = 520) -> go.Figure:
    """Static twin of the Performer explorer: a slider over m (frames) and a dropdown over the variants."""
    ms = curves["ms"].tolist()
    a0 = len(ms) // 2
    fig = _perf_canvas(curves)
    n_shared = len(fig.data)
    groups: list[int] = []
    for g, (kind, orth) in enumerate(PERFORMER_VARIANTS):
        for tr, c in zip(_perf_selected(curves, kind, orth, a0, digits), (1, 2, 3), strict=True):
            tr.visible = g == 0
            fig.add_trace(tr, row=1, col=c)
            groups.append(g)
    _perf_axes(fig, curves)
    idx = list(range(n_shared, len(fig.data)))
    fig.frames = frames_for(fig, [f"m={m}" for m in ms], idx,
                            [[tr for kind, orth in PERFORMER_VARIANTS
                              for tr in _perf_selected(curves, kind, orth, a, digits)]
                             for a in range(len(ms))])
    labels = [variant_label(kind, orth) for kind, orth in PERFORMER_VARIANTS]
    fig.update_layout(
        sliders=[frame_slider(ms, [f"m={m}" for m in ms], prefix="random features m = ", active=a0)],
        updatemenus=[menu(labels, [[{"visible": visible_groups(groups, n_shared, g)}]
                                    for g in range(len(labels))], label="features:")])
    control_label(fig, "features:")
    text = ("Interactive figure with a slider over the number of random features m and a menu of variants "
            "(positive or trigonometric features, orthogonal or iid projections). Log-log curves show the "
            "kernel and output errors falling with m; the chosen m is marked, and a scatter compares kernel "
            "estimates with exact values.")
    finish(fig, title="Performer random features: error vs m", alt=text, height=height)
    return arrange(fig, height=height, legend_rows=2)


def _fm_title(label: str, m: Mapping[str, Any]) -> str:
    if m["n_nonpositive"]:
        return (f"{label} vs softmax: {m['n_nonpositive']} denominators ≤ 0, "
                f"max |ΔA| = {m['max_abs']:.2g}, output error {m['out_rel']:.2g}")
    return (f"{label} vs softmax: max |ΔA| = {m['max_abs']:.2f}, {100 * m['tv']:.0f}% of the attention "
            f"mass misplaced, output error {100 * m['out_rel']:.0f}%")


def _fm_group(m: Mapping[str, Any], w_max: float, digits: int | None) -> list[go.BaseTraceType]:
    """One map's traces: its weights (row 1 col 1), the difference (row 2 col 1), the denominators."""
    w = m["weights"]
    in_range = bool(np.all((w >= 0) & (w <= 1)))
    if in_range:
        heat = attention_trace(w, zmin=0.0, zmax=w_max, digits=digits, label="A_φ", name="A_φ")
    else:  # the identity map: signed weights, some huge where the clamp met a tiny denominator
        heat = attention_trace(w, colorscale="RdBu", zmin=-1.0, zmax=1.0, digits=digits, name="A_φ",
                               label="A_φ", colorbar={"title": {"text": "A_φ, ±1"}})
    r = min(sym_range(m["diff"]), 1.0)
    diff = go.Heatmap(z=json_list(m["diff"], digits), colorscale="RdBu", zmid=0.0, zmin=-r, zmax=r,
                      colorbar={"title": {"text": "ΔA"}}, name="ΔA", hoverongaps=False,
                      hovertemplate="query i=%{y}<br>key j=%{x}<br>A_φ − A_softmax=%{z:.3g}<extra></extra>")
    den = np.asarray(m["denominators"], dtype=np.float64)
    hist = go.Histogram(x=json_list(den, digits), nbinsx=min(30, max(5, den.size // 2)), name="denominators",
                        marker={"color": OKABE_ITO[5] if m["n_nonpositive"] else OKABE_ITO[0]},
                        hovertemplate="φ(q_i)·z in [%{x}]<br>%{y} queries<extra></extra>", showlegend=False)
    return [heat, diff, hist]


def _fm_canvas() -> go.Figure:
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.2, vertical_spacing=0.17,
                        subplot_titles=("A_φ: normalized φ(q_i)·φ(k_j)", "A_softmax",
                                        "difference A_φ − A_softmax", "denominators φ(q_i)·Σ_j φ(k_j)"))
    return fig


def _fm_layout(fig: go.Figure, n_q: int, n_k: int) -> None:
    for r, c in ((1, 1), (1, 2), (2, 1)):
        matrix_axes(fig, n_q, n_k, row=r, col=c, y_title="query position i" if c == 1 else "")
    fig.update_xaxes(title_text="denominator φ(q_i)·z (z = Σ_j φ(k_j))", row=2, col=2)
    fig.update_yaxes(title_text="number of queries", row=2, col=2)
    fig.add_vline(x=0, line={"color": "black", "dash": "dash", "width": 1}, row=2, col=2)
    # colour bars beside their own panels
    ydoms = {r: getattr(fig.layout, "yaxis" if r == 1 else "yaxis3").domain for r in (1, 2)}
    for tr in fig.data:
        if isinstance(tr, go.Heatmap):
            ax = tr.xaxis or "x"
            dom = getattr(fig.layout, "xaxis" + ax[1:]).domain
            row = 1 if ax in ("x", "x2") else 2
            yd = ydoms[row]
            tr.colorbar.update(x=dom[1] + 0.005, xanchor="left", len=yd[1] - yd[0], y=(yd[0] + yd[1]) / 2,
                               yanchor="middle", thickness=8, xpad=3, tickfont={"size": 10})


def feature_map_comparison(data: Mapping[str, Any], label: str | None = None, *, title: str | None = None,
                           alt: str | None = None, height: int = 720) -> go.Figure:
    """A feature map's normalized attention beside softmax's, their difference and the denominators.

    ``data`` comes from :func:`feature_map_comparison_data`; ``label`` picks the map (default: the first).
    """
    maps = data["maps"]
    label = label if label is not None else next(iter(maps))
    if label not in maps:
        raise ValueError(f"label must be one of {list(maps)}, got {label!r}")
    w_s = np.asarray(data["softmax"]["weights"], dtype=np.float64)
    n_q, n_k = w_s.shape
    w_max = float(w_s.max())
    fig = _fm_canvas()
    fig.add_trace(attention_trace(w_s, zmin=0.0, zmax=w_max, label="A_softmax", name="A_softmax"),
                  row=1, col=2)
    for tr, (r, c) in zip(_fm_group(maps[label], w_max, None), ((1, 1), (2, 1), (2, 2)), strict=True):
        fig.add_trace(tr, row=r, col=c)
    _fm_layout(fig, n_q, n_k)
    m = maps[label]
    text = alt or (f"Four panels for the {label} feature map on {n_q} queries and {n_k} keys: its attention "
                   f"matrix, softmax's, their difference (max {m['max_abs']:.2g}) and a histogram of the "
                   f"denominators, {m['n_nonpositive']} of which are zero or negative.")
    finish(fig, title=title or _fm_title(label, m), alt=text, height=height, title_font_size=14)
    return arrange(fig, height=height)


def feature_map_twin(data: Mapping[str, Any], *, digits: int = SIG_DIGITS, height: int = 760) -> go.Figure:
    """Static twin of the feature-map explorer: a dropdown over the maps (``update``: visibility + title)."""
    maps = data["maps"]
    labels = list(maps)
    w_s = np.asarray(data["softmax"]["weights"], dtype=np.float64)
    n_q, n_k = w_s.shape
    w_max = float(w_s.max())
    fig = _fm_canvas()
    fig.add_trace(attention_trace(w_s, zmin=0.0, zmax=w_max, label="A_softmax", name="A_softmax",
                                  digits=digits), row=1, col=2)
    groups: list[int] = []
    for g, lab in enumerate(labels):
        for tr, (r, c) in zip(_fm_group(maps[lab], w_max, digits), ((1, 1), (2, 1), (2, 2)), strict=True):
            tr.visible = g == 0
            fig.add_trace(tr, row=r, col=c)
            groups.append(g)
    _fm_layout(fig, n_q, n_k)
    args = [[{"visible": visible_groups(groups, 1, g)}, {"title.text": _fm_title(lab, maps[lab])}]
            for g, lab in enumerate(labels)]
    fig.update_layout(updatemenus=[menu(labels, args, method="update", label="feature map φ:",
                                        buttons=len(labels) <= 4)])
    control_label(fig, "feature map φ:")
    text = (f"Interactive figure with a menu of feature maps ({', '.join(labels)}). For the chosen map: its "
            f"attention matrix beside softmax's for the same {n_q} queries and {n_k} keys, their difference "
            f"and a histogram of the denominators (the identity map has some at or below zero).")
    finish(fig, title=_fm_title(labels[0], maps[labels[0]]), alt=text, height=height, title_font_size=14)
    return arrange(fig, height=height)
