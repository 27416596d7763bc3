"""Heatmap pieces shared by the chapters' matrix pictures: weights, scores, the greyed-out future."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ..style import MASK_GREY, json_list, sym_range


def attention_trace(weights: np.ndarray, *, colorscale: str = "Viridis", zmin: float | None = 0.0,
                    zmax: float | None = None, colorbar: Mapping[str, Any] | None = None,
                    label: str = "weight", digits: int | None = None, **kw: Any) -> go.Heatmap:
    # weights: (N_q, N_k)
    return go.Heatmap(
        z=json_list(weights, digits), colorscale=colorscale, zmin=zmin, zmax=zmax,
        colorbar=dict(colorbar or {"title": {"text": label}}),
        hovertemplate="query i=%{y}<br>key j=%{x}<br>" + label + "=%{z:.4g}<extra></extra>",
        hoverongaps=False, **kw)


def future_trace(n: int) -> go.Heatmap:
    """Grey cells exactly where j > i (the future), NaN elsewhere; drawn under the data heatmap."""
    mask = np.full((n, n), np.nan)
    mask[np.triu_indices(n, k=1)] = 1.0
    return go.Heatmap(z=json_list(mask), colorscale=[[0, MASK_GREY], [1, MASK_GREY]], zmin=0, zmax=1,
                      showscale=False, hoverongaps=False, name="future (masked)",
                      hovertemplate="query i=%{y}<br>key j=%{x}<br>future: masked<extra></extra>")


def mask_future(M: np.ndarray, name: str) -> np.ndarray:
    """Copy of square ``M`` with the strictly upper triangle (j > i, the future) set to NaN."""
    if M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be square to mask the future, got shape {M.shape}")
    out = M.copy()
    out[np.triu_indices(M.shape[0], k=1)] = np.nan
    return out


def score_trace(shown: np.ndarray, digits: int | None = None, **kw: Any) -> go.Heatmap:
    """Heatmap trace for scores: viridis from 0 if all are >= 0, RdBu centred on zero otherwise."""
    finite = shown[np.isfinite(shown)]
    if finite.size and finite.min() < 0:
        r = sym_range(finite)
        return attention_trace(shown, colorscale="RdBu", zmin=-r, zmax=r, label="φ(q_i)·φ(k_j)",
                               digits=digits, **kw)
    return attention_trace(shown, zmin=0.0, label="φ(q_i)·φ(k_j)", digits=digits, **kw)
