"""Figures of the causal chapter: the kernel matrix, the state S and z, matrix view against state view,
and the chunkwise-parallel layout (data from :mod:`~linattn_core.tools.viz.data`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..style import (
    MASK_GREY,
    OKABE_ITO,
    SIG_DIGITS,
    as_float,
    finish,
    json_list,
    matrix_axes,
    row_outline,
    sym_range,
)
from .controls import arrange, control_label, frame_slider, frames_for, menu
from .data import chunk_layout
from .matrix import future_trace, mask_future, score_trace


def kernel_matrix_figure(scores: Any, *, causal: bool = True, highlight_row: int | None = None,
                         title: str | None = "Kernel matrix φ(Q)φ(K)ᵀ", colorscale: str = "Viridis",
                         alt: str | None = None, height: int = 420) -> go.Figure:
    """The kernel matrix ``scores[i, j] = φ(q_i)·φ(k_j)``, future greyed if ``causal``, one row outlined.

    Parameters
    ----------
    scores : array (N, N)
        Unnormalized scores (signed values get a diverging scale centred on zero).
    causal : bool
        Grey out j > i (shown as gaps: the trace's ``z`` holds NaN there).
    highlight_row : int or None
        Outline this query row (the row a recurrent step t reads).
    """
    # scores: (N, N)
    M = as_float("scores", scores, 2)
    n = M.shape[0]
    if highlight_row is not None and not 0 <= highlight_row < n:
        raise ValueError(f"highlight_row must be in [0, {n}), got {highlight_row} "
                         f"for scores of shape {M.shape}")
    shown = mask_future(M, "scores") if causal else M
    fig = go.Figure([future_trace(n)] if causal else [])
    fig.add_trace(score_trace(shown))
    if highlight_row is not None:
        fig.add_trace(row_outline(highlight_row, M.shape[1]))
    matrix_axes(fig, *M.shape)
    text = alt or (f"{n} by {M.shape[1]} kernel matrix of scores φ(q_i)·φ(k_j)"
                   + (", entries above the diagonal (the future) greyed out" if causal else "")
                   + (f", row {highlight_row} outlined." if highlight_row is not None else "."))
    return finish(fig, title=title, alt=text, height=height)


def state_traces(S: np.ndarray, z: np.ndarray, *, s_range: float, digits: int | None = None,
                 **kw: Any) -> list[go.BaseTraceType]:
    # S: (d_phi, d_v), z: (d_phi,)
    heat = go.Heatmap(z=json_list(S, digits), colorscale="RdBu", zmid=0.0, zmin=-s_range, zmax=s_range,
                      colorbar={"title": {"text": "S entry"}, "x": 0.62, "len": 0.9},
                      hovertemplate="feature r=%{y}<br>value dim c=%{x}<br>S=%{z:.4g}<extra></extra>",
                      name="S_t", **kw)
    bars = go.Bar(x=json_list(z, digits), y=list(range(len(z))), orientation="h",
                  marker={"color": OKABE_ITO[0]},
                  hovertemplate="feature r=%{y}<br>z=%{x:.4g}<extra></extra>", name="z_t", showlegend=False,
                  **kw)
    return [heat, bars]


def state_figure(S: Any, z: Any, *, t: int | None = None, s_range: float | None = None,
                 z_max: float | None = None, title: str | None = None, alt: str | None = None,
                 height: int = 380) -> go.Figure:
    """The state after a prefix: heatmap of ``S`` (d_phi x d_v, RdBu centred on 0) beside bars of ``z``.

    Parameters
    ----------
    S : array (d_phi, d_v)
    z : array (d_phi,)
    t : int or None
        The step shown (for the title).
    s_range, z_max : float or None
        Fix the colour range (±s_range) and the bar axis (0..z_max), e.g. to compare several steps.
    """
    # S: (d_phi, d_v), z: (d_phi,)
    S_ = as_float("S", S, 2)
    z_ = as_float("z", z, 1)
    if z_.shape[0] != S_.shape[0]:
        raise ValueError(f"z must have d_phi = S.shape[0] entries: S has shape {S_.shape}, z has {z_.shape}")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], shared_yaxes=True,
                        horizontal_spacing=0.2,
                        subplot_titles=("S_t = Σ_{j≤t} φ(k_j) v_jᵀ", "z_t = Σ_{j≤t} φ(k_j)"))
    for tr, c in zip(state_traces(S_, z_, s_range=s_range or sym_range(S_)), (1, 2), strict=True):
        fig.add_trace(tr, row=1, col=c)
    state_axes(fig, S_.shape, z_max if z_max is not None else _zmax(z_))
    fig.update_xaxes(range=[min(0.0, 1.05 * float(z_.min())), z_max if z_max is not None else _zmax(z_)],
                     row=1, col=2)  # the identity map's z can be negative
    at = f" after step t = {t}" if t is not None else ""
    text = alt or (f"Heatmap of the {S_.shape[0]} by {S_.shape[1]} state S{at} on a diverging scale centred "
                   f"on zero, beside a bar chart of the {S_.shape[0]} entries of z.")
    default_title = f"State after step {t}" if t is not None else "State S and normalizer z"
    return finish(fig, title=title or default_title, alt=text, height=height)


def _zmax(z: np.ndarray) -> float:
    m = float(np.nanmax(np.abs(z))) if z.size else 1.0
    return 1.05 * m if m > 0 else 1.0


def state_axes(fig: go.Figure, shape: tuple[int, int], z_max: float, *, row: int = 1, col: int = 1) -> None:
    d_phi, d_v = shape
    fig.update_xaxes(title_text="value dim c", range=[-0.5, d_v - 0.5], showgrid=False, row=row, col=col,
                     dtick=1 if d_v <= 16 else None)
    fig.update_yaxes(title_text="feature r", range=[d_phi - 0.5, -0.5], showgrid=False, row=row, col=col,
                     dtick=1 if d_phi <= 16 else None)
    fig.update_xaxes(title_text="z_t entry", range=[min(0.0, -z_max if z_max < 0 else 0.0), z_max],
                     row=row, col=col + 1)
    fig.update_yaxes(range=[d_phi - 0.5, -0.5], row=row, col=col + 1)


_MVS_PER_GROUP = 7  # future mask, kernel heatmap, row outline, S heatmap, z bars, y from matrix, y from state


def _mvs_ranges(data: Mapping[str, Any]) -> dict[str, float]:
    z = data["z"]
    ys = np.concatenate([data["y_matrix"].ravel(), data["y_state"].ravel()])
    return {"s": sym_range(data["S"]), "z_lo": min(0.0, 1.05 * float(z.min())),
            "z_hi": max(1e-12, 1.05 * float(z.max())), "y": 1.1 * sym_range(ys)}


def _mvs_dynamic(data: Mapping[str, Any], t: int, digits: int | None) -> list[go.BaseTraceType]:
    """The traces that change with t: outline, S_t, z_t, y_t both ways (in group order, from index 2)."""
    N, d_v = data["y_matrix"].shape
    r = _mvs_ranges(data)
    S_t, z_t = data["S"][t], data["z"][t]
    heat, bars = state_traces(S_t, z_t, s_range=r["s"], digits=digits)
    c = list(range(d_v))
    y_m = go.Bar(x=c, y=json_list(data["y_matrix"][t], digits),
                 name="y_t from row t of the normalized matrix",
                 marker={"color": OKABE_ITO[1]}, offsetgroup="matrix",
                 hovertemplate="c=%{x}<br>y=%{y:.6g}<extra>from the matrix</extra>")
    y_s = go.Bar(x=c, y=json_list(data["y_state"][t], digits), offsetgroup="state",
                 name=f"y_t from S_t, z_t   (max |difference| = {data['max_diff'][t]:.1e})",
                 marker={"color": OKABE_ITO[0]},
                 hovertemplate="c=%{x}<br>y=%{y:.6g}<extra>from the state</extra>")
    return [row_outline(t, N), heat, bars, y_m, y_s]


def _mvs_group(data: Mapping[str, Any], t: int, digits: int | None) -> list[go.BaseTraceType]:
    shown = mask_future(np.asarray(data["scores"], dtype=np.float64), "scores")
    return [future_trace(shown.shape[0]), score_trace(shown, digits), *_mvs_dynamic(data, t, digits)]


def _mvs_canvas() -> go.Figure:
    return make_subplots(
        rows=2, cols=3, column_widths=[0.42, 0.36, 0.22], row_heights=[0.64, 0.36],
        horizontal_spacing=0.15, vertical_spacing=0.2,
        specs=[[{}, {}, {}], [{"colspan": 3}, None, None]],
        subplot_titles=("scores φ(q_i)·φ(k_j)", "state S_t", "normalizer z_t",
                        "output y_t, computed both ways"))


def _mvs_place(fig: go.Figure, traces: Sequence[go.BaseTraceType]) -> None:
    """Add one group's traces to their subplots and place the two colour bars beside their heatmaps."""
    cells = [(1, 1), (1, 1), (1, 1), (1, 2), (1, 3), (2, 1), (2, 1)]
    for tr, (r, c) in zip(traces, cells, strict=True):
        fig.add_trace(tr, row=r, col=c)
    dom1, dom2 = fig.layout.xaxis.domain, fig.layout.xaxis2.domain
    ydom = fig.layout.yaxis.domain
    bar_kw = {"len": ydom[1] - ydom[0], "y": (ydom[0] + ydom[1]) / 2, "yanchor": "middle", "thickness": 8,
              "xanchor": "left", "xpad": 3, "title": {"text": ""}, "tickfont": {"size": 10}}
    fig.data[-6].colorbar.update(x=dom1[1] + 0.005, **bar_kw)
    fig.data[-4].colorbar.update(x=dom2[1] + 0.005, **bar_kw)


def _mvs_axis_ranges(data: Mapping[str, Any]) -> dict[str, Any]:
    """Per-map axis ranges, as relayout keys (the static twin's menu applies them with ``update``)."""
    r = _mvs_ranges(data)
    d_phi = data["S"].shape[1]
    return {"yaxis2.range": [d_phi - 0.5, -0.5], "yaxis3.range": [d_phi - 0.5, -0.5],
            "yaxis2.dtick": 1 if d_phi <= 16 else None, "xaxis3.range": [r["z_lo"], r["z_hi"]],
            "yaxis4.range": [-r["y"], r["y"]]}


def _mvs_axes(fig: go.Figure, data: Mapping[str, Any]) -> None:
    N, d_phi, d_v = data["S"].shape
    matrix_axes(fig, N, N, row=1, col=1)
    state_axes(fig, (d_phi, d_v), 1.0, row=1, col=2)
    fig.update_xaxes(title_text="output dim c", dtick=1, range=[-0.5, d_v - 0.5], row=2, col=1)
    fig.update_yaxes(title_text="y_t[c]", zeroline=True, zerolinecolor="#888", row=2, col=1)
    fig.update_layout(_mvs_axis_ranges(data), barmode="group")


def matrix_vs_state_figure(data: Mapping[str, Any], t: int, *, title: str | None = None,
                           alt: str | None = None, height: int = 700) -> go.Figure:
    """Step ``t`` of causal linear attention seen two ways (from :func:`matrix_vs_state_data`).

    Left: the causal kernel matrix with row t outlined (future greyed); middle: the state S_t; right: z_t;
    below: y_t from row t of the normalized matrix and from (S_t, z_t), with their max abs difference.
    Trace order: future mask, scores, row outline, S_t, z_t, y_t (matrix), y_t (state).
    """
    N, d_phi, d_v = data["S"].shape
    if not 0 <= t < N:
        raise ValueError(f"t must be in [0, {N}), got {t} (the data has N = {N} steps)")
    fig = _mvs_canvas()
    _mvs_place(fig, _mvs_group(data, t, None))
    _mvs_axes(fig, data)
    text = alt or (f"Left: the causal {N} by {N} kernel matrix for {data['label']} with row {t} outlined "
                   f"and the future greyed. Middle: the {d_phi} by {d_v} state S_t after {t + 1} tokens. "
                   f"Right: z_t. Below: the output y_t from the matrix row and from the state agree "
                   f"(max difference {data['max_diff'][t]:.1e}).")
    finish(fig, title=title or f"Matrix view vs state view, step t = {t} ({data['label']})", alt=text,
           height=height)
    return arrange(fig, height=height, legend_rows=2)


def matrix_vs_state_twin(datas: Mapping[str, Mapping[str, Any]], *, t0: int = 0, title: str | None = None,
                         digits: int = SIG_DIGITS, height: int = 820) -> go.Figure:
    """Static twin of the matrix-vs-state explorer: a slider over t (one frame per step, every feature
    map's traces in it) and buttons for the feature maps (``update``: visibility and axis ranges).

    Parameters
    ----------
    datas : mapping label -> :func:`matrix_vs_state_data` output (same N and d_v for all)

    Trace k of group g (map g) is ``fig.data[7 g + k]``, in :func:`matrix_vs_state_figure`'s order; frame
    ``t`` holds traces 2..6 of every group at step t.
    """
    labels = list(datas)
    if not labels:
        raise ValueError("datas must hold at least one feature map's data, got an empty mapping")
    shapes = {(datas[lab]["S"].shape[0], datas[lab]["S"].shape[2]) for lab in labels}
    if len(shapes) != 1:
        raise ValueError(f"all datas must have the same N and d_v, got (N, d_v) in {sorted(shapes)}")
    N = shapes.pop()[0]
    if not 0 <= t0 < N:
        raise ValueError(f"t0 must be in [0, {N}), got {t0}")
    first = datas[labels[0]]
    fig = _mvs_canvas()
    groups: list[int] = []
    for g, lab in enumerate(labels):
        _mvs_place(fig, _mvs_group(datas[lab], t0, digits))
        groups += [g] * _MVS_PER_GROUP
    for i, tr in enumerate(fig.data):
        tr.visible = groups[i] == 0
    _mvs_axes(fig, first)
    dyn_idx = [g * _MVS_PER_GROUP + j for g in range(len(labels)) for j in range(2, _MVS_PER_GROUP)]
    fig.frames = frames_for(fig, [f"t={t}" for t in range(N)], dyn_idx,
                            [[tr for lab in labels for tr in _mvs_dynamic(datas[lab], t, digits)]
                             for t in range(N)])
    args = [[{"visible": [gi == g for gi in groups]}, _mvs_axis_ranges(datas[lab])]
            for g, lab in enumerate(labels)]
    fig.update_layout(
        sliders=[frame_slider(range(N), [f"t={t}" for t in range(N)], prefix="step t = ", active=t0)],
        updatemenus=[menu(labels, args, method="update", label="feature map φ:", buttons=True)])
    control_label(fig, "feature map φ:")
    text = (f"Interactive figure with a slider over the step t (0 to {N - 1}) and buttons for the feature "
            f"maps ({', '.join(labels)}). Left: the causal {N} by {N} kernel matrix with row t outlined and "
            f"the future greyed; middle: the state S_t; right: z_t; below: y_t from the matrix and from the "
            f"state, which agree.")
    finish(fig, title=title or "Matrix view vs state view: the same y_t, two ways", alt=text, height=height)
    return arrange(fig, height=height, legend_rows=2)


#: Codes of :func:`chunk_layout`, in order 0, 1, 2.
CHUNK_CATEGORIES = ("future: masked, never computed", "same chunk: masked intra-chunk product",
                    "earlier chunk: enters through the carried state")
_CHUNK_COLOURS = (MASK_GREY, OKABE_ITO[1], OKABE_ITO[0])


def _chunk_colorscale() -> list:
    cs = []
    for c, col in enumerate(_CHUNK_COLOURS):
        cs += [[c / 3, col], [(c + 1) / 3, col]]
    return cs


def _chunk_traces(N: int, C: int) -> list[go.BaseTraceType]:
    L = chunk_layout(N, C)
    names = np.array(["future (masked)", "same chunk: masked product", "earlier chunk: carried state"])
    heat = go.Heatmap(z=L.tolist(), zmin=-0.5, zmax=2.5, colorscale=_chunk_colorscale(), xgap=1, ygap=1,
                      customdata=names[L].tolist(), name="chunk layout",
                      colorbar={"tickvals": [0, 1, 2], "ticktext": ["future", "intra-chunk", "from state"],
                                "thickness": 14, "len": 0.6},
                      hovertemplate="query i=%{y}<br>key j=%{x}<br>%{customdata}<extra></extra>")
    xs, ys = [], []
    for b in range(C, N, C):  # chunk boundaries
        xs += [b - 0.5, b - 0.5, None, -0.5, N - 0.5, None]
        ys += [-0.5, N - 0.5, None, b - 0.5, b - 0.5, None]
    lines = go.Scatter(x=xs or [None], y=ys or [None], mode="lines", line={"color": "black", "width": 1.5},
                       hoverinfo="skip", showlegend=False, name="chunk boundaries")
    return [heat, lines]


def _chunk_title(N: int, C: int) -> str:
    L = chunk_layout(N, C)
    n_chunks = -(-N // C)
    return (f"N = {N}, chunk size C = {C}: {n_chunks} chunk{'s' if n_chunks > 1 else ''}; "
            f"{int((L == 1).sum())} entries by masked products, {int((L == 2).sum())} through the state")


def chunk_diagram(N: int = 16, chunk_size: int = 4, *, title: str | None = None, alt: str | None = None,
                  height: int = 520) -> go.Figure:
    """The N x N causal matrix coloured by who computes each entry in the chunkwise-parallel form.

    Diagonal blocks (orange): the masked product inside a chunk, φ(Q_c)φ(K_c)ᵀ ⊙ mask. Below them (blue):
    keys of earlier chunks, never materialised, they reach the queries through the carried state S, z.
    Above the diagonal (grey): the future, masked.
    """
    fig = go.Figure(_chunk_traces(N, chunk_size))
    matrix_axes(fig, N, N)
    text = alt or (f"{N} by {N} causal attention matrix split into chunks of {chunk_size}: diagonal blocks "
                   f"are computed by a masked product inside each chunk, entries left of them reach the "
                   f"queries through the state carried from earlier chunks, and the future is greyed out.")
    finish(fig, title=title or _chunk_title(N, chunk_size), alt=text, height=height, title_font_size=14)
    return arrange(fig, height=height)


def chunk_twin(N: int = 16, chunk_sizes: Sequence[int] = (1, 2, 3, 4, 5, 8, 16), *, c0: int = 4,
               height: int = 600) -> go.Figure:
    """Static twin of the chunk explorer: a slider over the chunk size, one frame each (data + title)."""
    sizes = [int(c) for c in chunk_sizes]
    if c0 not in sizes:
        raise ValueError(f"c0={c0} must be one of chunk_sizes={sizes}")
    fig = chunk_diagram(N, c0)
    fig.frames = frames_for(fig, [f"C={c}" for c in sizes], [0, 1], [_chunk_traces(N, c) for c in sizes],
                            [{"title": {"text": _chunk_title(N, c)}} for c in sizes])
    fig.update_layout(sliders=[frame_slider(sizes, [f"C={c}" for c in sizes], prefix="chunk size C = ",
                                            active=sizes.index(c0))])
    text = (f"Interactive figure with a slider over the chunk size (values {', '.join(map(str, sizes))}). "
            f"The {N} by {N} causal attention matrix is coloured by who computes each entry: diagonal blocks "
            f"by a masked product inside each chunk, entries left of them through the carried state, the "
            f"future greyed out.")
    finish(fig, title=_chunk_title(N, c0), alt=text, height=height)
    return arrange(fig, height=height)
