"""Figures of the beyond chapter: decayed linear attention, whose causal weights fade with distance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..style import OKABE_ITO, SIG_DIGITS, finish, json_list, matrix_axes, row_outline
from .controls import arrange, frame_slider, frames_for
from .matrix import attention_trace, future_trace, mask_future


def _decay_title(g: float, mass: float, recent: int) -> str:
    window = f"window 1/(1 − γ) ≈ {1 / (1 - g):.0f} tokens" if g < 1 else "no decay: plain linear attention"
    return (f"γ = {g:g}, {window}<br><sup>the last query puts {100 * mass:.0f}% of its weight on its "
            f"{recent} most recent tokens</sup>")


def _decay_traces(data: Mapping[str, Any], a: int, digits: int | None) -> list[go.BaseTraceType]:
    """The traces that change with γ: weights heatmap, last-row outline, last row as bars."""
    W = data["weights"][a]
    N = W.shape[0]
    # colour range from the later rows: the first rows (few keys, weights near 1) would wash out the rest
    zmax = float(W[N // 2:].max())
    heat = attention_trace(mask_future(W, "weights"), zmin=0.0, zmax=zmax, digits=digits,
                           colorbar={"title": {"text": ""}, "thickness": 8, "tickfont": {"size": 10}})
    bars = go.Bar(x=list(range(N)), y=json_list(W[-1], digits), marker={"color": OKABE_ITO[0]},
                  showlegend=False,
                  name="last query's weights", hovertemplate="key j=%{x}<br>weight=%{y:.3g}<extra></extra>")
    return [heat, row_outline(N - 1, N), bars]


def _decay_build(data: Mapping[str, Any], a: int, digits: int | None, height: int) -> go.Figure:
    N = data["weights"].shape[1]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.17,
                        subplot_titles=("causal weights ∝ γ^(i − j) φ(q_i)·φ(k_j)",
                                        f"row i = {N - 1}, the last query"))
    fig.add_trace(future_trace(N), row=1, col=1)
    for tr, c in zip(_decay_traces(data, a, digits), (1, 1, 2), strict=True):
        fig.add_trace(tr, row=1, col=c)
    fig.data[1].colorbar.update(x=fig.layout.xaxis.domain[1] + 0.01, xanchor="left")
    matrix_axes(fig, N, N, row=1, col=1)
    fig.update_xaxes(title_text="key position j", range=[-0.5, N - 0.5], row=1, col=2)
    top = float(data["weights"][:, -1, :].max()) * 1.08  # one axis for every γ: heights compare
    fig.update_yaxes(title_text="weight", range=[0, top], row=1, col=2)
    g = data["gammas"][a]
    text = (f"Left: the {N} by {N} causal attention weights of linear attention with decay γ = {g:g}, "
            f"future greyed, last row outlined (colours saturate in the first rows, whose few weights are "
            f"large); right: the last query's weights over the key positions. The smaller γ, the more "
            f"weight sits near the diagonal.")
    finish(fig, title=_decay_title(g, data["recent_mass"][a], data["recent"]), alt=text, height=height,
           title_font_size=14)
    return fig


def decay_figure(data: Mapping[str, Any], gamma: float | None = None, *, height: int = 460) -> go.Figure:
    """One decay γ (from :func:`decay_data`): the causal weights with the last row outlined, and that row
    as bars over the key positions. Trace order: future mask, weights, outline, bars."""
    gs = data["gammas"]
    gamma = gs[0] if gamma is None else float(gamma)
    if gamma not in gs:
        raise ValueError(f"gamma must be one of the computed decays {gs}, got {gamma}")
    return arrange(_decay_build(data, gs.index(gamma), None, height), height=height)


def decay_twin(data: Mapping[str, Any], *, g0: float | None = None, digits: int = SIG_DIGITS,
               height: int = 540) -> go.Figure:
    """Static twin of the decay explorer: a slider over γ, one frame per decay (traces 1-3 and title)."""
    gs = data["gammas"]
    g0 = gs[min(2, len(gs) - 1)] if g0 is None else float(g0)
    if g0 not in gs:
        raise ValueError(f"g0 must be one of {gs}, got {g0}")
    fig = _decay_build(data, gs.index(g0), digits, height)
    fig.frames = frames_for(fig, [f"γ={g:g}" for g in gs], [1, 2, 3],
                            [_decay_traces(data, a, digits) for a in range(len(gs))],
                            [{"title": {"text": _decay_title(g, mass, data["recent"])}}
                             for g, mass in zip(gs, data["recent_mass"], strict=True)])
    fig.update_layout(sliders=[frame_slider([f"{g:g}" for g in gs], [f"γ={g:g}" for g in gs],
                                            prefix="decay γ = ", active=gs.index(g0))])
    N = data["weights"].shape[1]
    fig.layout.meta = {"alt": f"Interactive figure with a slider over the decay γ "
                              f"({', '.join(f'{g:g}' for g in gs)}). Left: the {N} by {N} causal weights of "
                              f"decayed linear attention; right: the last query's weights. As γ falls, the "
                              f"weight gathers near the diagonal."}
    return arrange(fig, height=height)
