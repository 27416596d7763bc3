"""Figures of the softmax chapter: the attention matrix as a heatmap."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from ..style import as_float, finish, matrix_axes
from .matrix import attention_trace, future_trace, mask_future


def attention_heatmap(weights: Any, *, title: str | None = "Attention weights A", colorscale: str = "Viridis",
                      zmin: float | None = 0.0, zmax: float | None = None, causal: bool = False,
                      alt: str | None = None, height: int = 420) -> go.Figure:
    """Heatmap of an attention matrix: row i holds query i's weights over the keys j.

    Parameters
    ----------
    weights : array (N_q, N_k)
        The matrix to show (numpy or torch); shown as given, nothing is recomputed.
    causal : bool
        Grey out the future (j > i) as gaps over a grey background (needs N_q == N_k).
    zmin, zmax : float or None
        Colour range (default 0 to the largest entry).
    """
    # weights: (N_q, N_k)
    W = as_float("weights", weights, 2)
    if causal:
        W = mask_future(W, "weights")
    fig = go.Figure([future_trace(W.shape[0])] if causal else [])
    fig.add_trace(attention_trace(W, colorscale=colorscale, zmin=zmin, zmax=zmax))
    matrix_axes(fig, *W.shape)
    n_q, n_k = W.shape
    text = alt or (f"Heatmap of a {n_q} by {n_k} attention matrix: rows are query positions i, columns key "
                   f"positions j, colour the weight" + (", future entries greyed out." if causal else "."))
    return finish(fig, title=title, alt=text, height=height)
