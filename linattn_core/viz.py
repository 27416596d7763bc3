"""Plotly figures for the book: pure builders, a few compute-and-draw helpers, the static-site renderer.

Every builder takes arrays and returns a ``plotly.graph_objects.Figure``; nothing here changes global
state except :func:`use_static_renderer`. Builders are tested on their traces (a heatmap's ``z`` is the
matrix it claims to show), so a figure in the book is a checked statement, not a drawing.

Glossary (code -> text)
-----------------------
``scores``   φ(q_i)·φ(k_j), the unnormalised kernel matrix (N x N)
``weights``  the normalised attention matrix A (rows sum to 1)
``S``        Σ_{j≤t} φ(k_j) v_jᵀ, the state (d_phi x d_v)
``z``        Σ_{j≤t} φ(k_j), the normaliser (d_phi)

Conventions: colour-blind-safe scales (viridis / cividis for magnitudes, RdBu centred on zero for signed
values), axis titles with units, Unicode instead of LaTeX in titles (plotly shows raw TeX), and alt text in
``fig.layout.meta["alt"]`` for every figure (the static renderer turns it into an ``aria-label``).
"""

from __future__ import annotations

import hashlib
import html
import itertools
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer
from plotly.subplots import make_subplots

__all__ = [
    "BOOK_RENDERER",
    "SIG_DIGITS",
    "attention_heatmap",
    "figure_html",
    "kernel_matrix_figure",
    "sig_round",
    "state_figure",
    "use_static_renderer",
]

#: Significant digits kept in precomputed frames/variants (keeps chapter pages small).
SIG_DIGITS = 4
#: Name under which :func:`use_static_renderer` registers its renderer.
BOOK_RENDERER = "linattn_book"

# Okabe-Ito: a qualitative palette readable with every common colour-vision deficiency.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MASK_GREY = "#d4d4d4"  # masked (future) cells: shown as gaps over this plot background
HIGHLIGHT = "#D55E00"  # outline of the highlighted row (vermillion: visible on viridis and on RdBu)

# A small template: plotly's default one adds ~6.5 KB of JSON to every figure.
_TEMPLATE = go.layout.Template(
    layout={
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 13},
        "colorway": list(OKABE_ITO),
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
        "hoverlabel": {"namelength": -1},
        "xaxis": {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "ticks": "outside"},
        "yaxis": {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "ticks": "outside"},
        "legend": {"bgcolor": "rgba(255,255,255,0.7)"},
    }
)


# ----------------------------------------------------------------------------------------------------
# small utilities
# ----------------------------------------------------------------------------------------------------
def sig_round(a: Any, digits: int = SIG_DIGITS) -> np.ndarray:
    """Round every entry of ``a`` to ``digits`` significant digits (NaN and inf pass through).

    Used for precomputed frames: 4 digits are more than the eye can see and halve the JSON.
    """
    x = np.asarray(_to_numpy(a), dtype=np.float64)
    out = x.copy()
    finite = np.isfinite(x) & (x != 0)
    if np.any(finite):
        mag = np.floor(np.log10(np.abs(x[finite])))
        scale = 10.0 ** (digits - 1 - mag)
        out[finite] = np.round(x[finite] * scale) / scale
    return out


def _to_numpy(x: Any) -> np.ndarray:
    """numpy view of an array-like or a torch tensor (without importing torch)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _as_float(name: str, x: Any, ndim: int | tuple[int, ...]) -> np.ndarray:
    """Convert ``x`` to a float64 array with the given number of dims, or raise naming ``name``."""
    arr = _to_numpy(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in dims:
        want = " or ".join(f"{k}-D" for k in dims)
        raise ValueError(f"{name} must be {want}, got shape {arr.shape}")
    return arr


def _lst(a: Any, digits: int | None = None) -> Any:
    """Plain (nested) list of floats, NaN -> None (JSON null), optionally rounded; small in JSON."""
    x = np.asarray(a, dtype=np.float64)
    if digits is not None:
        x = sig_round(x, digits)
    obj = x.astype(object)
    obj[~np.isfinite(x)] = None
    return obj.tolist()


def _finish(fig: go.Figure, *, title: str | None, alt: str, height: int = 420, width: int | None = None,
            **layout: Any) -> go.Figure:
    """Apply the house template, a title, a fixed height and the alt text (``layout.meta["alt"]``)."""
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    meta["alt"] = alt
    fig.update_layout(template=_TEMPLATE, height=height, meta=meta, **layout)
    if width is not None:
        fig.update_layout(width=width)
    if title is not None:
        fig.update_layout(title={"text": title, "x": 0.01, "xanchor": "left"})
    return fig


def _matrix_axes(fig: go.Figure, n_rows: int, n_cols: int, *, row: int | None = None, col: int | None = None,
                 x_title: str = "key position j", y_title: str = "query position i") -> None:
    """Matrix orientation: row 0 at the top, integer ticks, square-ish cells, no grid lines."""
    kw = {} if row is None else {"row": row, "col": col}
    fig.update_xaxes(title_text=x_title, range=[-0.5, n_cols - 0.5], showgrid=False, zeroline=False,
                     tickmode="auto", nticks=min(n_cols, 13), constrain="domain", **kw)
    fig.update_yaxes(title_text=y_title, range=[n_rows - 0.5, -0.5], showgrid=False, zeroline=False,
                     tickmode="auto", nticks=min(n_rows, 13), constrain="domain", **kw)


def _sym_range(*arrays: Any) -> float:
    """Half-width of a colour range centred on zero that covers every finite entry."""
    m = 0.0
    for a in arrays:
        x = np.asarray(a, dtype=np.float64)
        x = x[np.isfinite(x)]
        if x.size:
            m = max(m, float(np.max(np.abs(x))))
    return m if m > 0 else 1.0


def _row_outline(row: int, n_cols: int, **kw: Any) -> go.Scatter:
    """A rectangle (as a scatter line, so frames can move it) around matrix row ``row``."""
    x0, x1, y0, y1 = -0.5, n_cols - 0.5, row - 0.5, row + 0.5
    return go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines",
                      line={"color": HIGHLIGHT, "width": 3}, hoverinfo="skip", showlegend=False,
                      name=f"row {row}", **kw)


# ----------------------------------------------------------------------------------------------------
# the static-site renderer
# ----------------------------------------------------------------------------------------------------
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_counter = itertools.count()


def _alt_text(fig_dict: Mapping[str, Any]) -> str:
    layout = fig_dict.get("layout", {}) or {}
    meta = layout.get("meta")
    if isinstance(meta, Mapping) and meta.get("alt"):
        return str(meta["alt"])
    title = layout.get("title")
    if isinstance(title, Mapping) and title.get("text"):
        return str(title["text"])
    if isinstance(title, str) and title:
        return title
    return "Interactive plotly figure"


def figure_html(fig: go.Figure | Mapping[str, Any]) -> str:
    """The HTML fragment the book shows for ``fig``: a ``<figure>`` with an aria-label around a plotly div.

    plotly.js is NOT included (the site serves ``plotly.min.js`` once, via ``html_js_files``), nor is
    MathJax; no CDN is referenced. The div id is derived from the figure's content and a per-process
    counter, so rebuilding a page gives the same HTML.
    """
    fig_dict = fig.to_dict() if isinstance(fig, go.Figure) else dict(fig)
    digest = hashlib.sha1(pio.to_json(fig_dict, validate=False).encode()).hexdigest()[:10]
    div_id = f"linattn-fig-{next(_counter)}-{digest}"
    div = pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                      config=dict(_PLOT_CONFIG), div_id=div_id, default_height="450px", validate=False)
    label = html.escape(_alt_text(fig_dict), quote=True)
    return f'<figure class="linattn-figure" role="group" aria-label="{label}">{div}</figure>'


class _BookHtmlRenderer(MimetypeRenderer):
    """Renders a figure as ``text/html`` relying on the site-wide plotly.js (see :func:`figure_html`)."""

    def to_mimebundle(self, fig_dict: dict) -> dict:
        return {"text/html": figure_html(fig_dict)}


def use_static_renderer() -> str:
    """Register the book renderer and make it plotly's default; return its name.

    Called by ``import linattn_core`` when ``LINATTN_BOOK_BUILD`` is set. Without it, myst-nb cannot render
    plotly's default mimetype (the figure silently vanishes), and the other HTML renderers either inline
    4.9 MB of plotly.js per page or load it from a CDN.
    """
    pio.renderers[BOOK_RENDERER] = _BookHtmlRenderer()
    pio.renderers.default = BOOK_RENDERER
    return BOOK_RENDERER


def is_book_build() -> bool:
    """True when the book is being built (``LINATTN_BOOK_BUILD`` set to anything but ``""``/``"0"``)."""
    return os.environ.get("LINATTN_BOOK_BUILD", "") not in ("", "0")


# ----------------------------------------------------------------------------------------------------
# attention and kernel matrices
# ----------------------------------------------------------------------------------------------------
def _attention_trace(weights: np.ndarray, *, colorscale: str = "Viridis", zmin: float | None = 0.0,
                     zmax: float | None = None, colorbar: Mapping[str, Any] | None = None,
                     label: str = "weight", digits: int | None = None, **kw: Any) -> go.Heatmap:
    # weights: (N_q, N_k)
    return go.Heatmap(
        z=_lst(weights, digits), colorscale=colorscale, zmin=zmin, zmax=zmax,
        colorbar=dict(colorbar or {"title": {"text": label}}),
        hovertemplate="query i=%{y}<br>key j=%{x}<br>" + label + "=%{z:.4g}<extra></extra>",
        hoverongaps=False, **kw)


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
    W = _as_float("weights", weights, 2)
    if causal:
        W = _mask_future(W, "weights")
    fig = go.Figure(_attention_trace(W, colorscale=colorscale, zmin=zmin, zmax=zmax))
    _matrix_axes(fig, *W.shape)
    n_q, n_k = W.shape
    text = alt or (f"Heatmap of a {n_q} by {n_k} attention matrix: rows are query positions i, columns key "
                   f"positions j, colour the weight" + (", future entries greyed out." if causal else "."))
    return _finish(fig, title=title, alt=text, height=height, plot_bgcolor=MASK_GREY if causal else "white")


def _mask_future(M: np.ndarray, name: str) -> np.ndarray:
    """Copy of square ``M`` with the strictly upper triangle (j > i, the future) set to NaN."""
    if M.shape[0] != M.shape[1]:
        raise ValueError(f"{name} must be square to mask the future, got shape {M.shape}")
    out = M.copy()
    out[np.triu_indices(M.shape[0], k=1)] = np.nan
    return out


def kernel_matrix_figure(scores: Any, *, causal: bool = True, highlight_row: int | None = None,
                         title: str | None = "Kernel matrix φ(Q)φ(K)ᵀ", colorscale: str = "Viridis",
                         alt: str | None = None, height: int = 420) -> go.Figure:
    """The kernel matrix ``scores[i, j] = φ(q_i)·φ(k_j)``, future greyed if ``causal``, one row outlined.

    Parameters
    ----------
    scores : array (N, N)
        Unnormalised scores (signed values get a diverging scale centred on zero).
    causal : bool
        Grey out j > i (shown as gaps: the trace's ``z`` holds NaN there).
    highlight_row : int or None
        Outline this query row (the row a recurrent step t reads).
    """
    # scores: (N, N)
    M = _as_float("scores", scores, 2)
    n = M.shape[0]
    if highlight_row is not None and not 0 <= highlight_row < n:
        raise ValueError(f"highlight_row must be in [0, {n}), got {highlight_row} "
                         f"for scores of shape {M.shape}")
    shown = _mask_future(M, "scores") if causal else M
    fig = go.Figure(_score_trace(shown))
    if highlight_row is not None:
        fig.add_trace(_row_outline(highlight_row, M.shape[1]))
    _matrix_axes(fig, *M.shape)
    text = alt or (f"{n} by {M.shape[1]} kernel matrix of scores φ(q_i)·φ(k_j)"
                   + (", entries above the diagonal (the future) greyed out" if causal else "")
                   + (f", row {highlight_row} outlined." if highlight_row is not None else "."))
    return _finish(fig, title=title, alt=text, height=height, plot_bgcolor=MASK_GREY if causal else "white")


def _score_trace(shown: np.ndarray, digits: int | None = None, **kw: Any) -> go.Heatmap:
    """Heatmap trace for scores: viridis from 0 if all are >= 0, RdBu centred on zero otherwise."""
    finite = shown[np.isfinite(shown)]
    if finite.size and finite.min() < 0:
        r = _sym_range(finite)
        return _attention_trace(shown, colorscale="RdBu", zmin=-r, zmax=r, label="φ(q_i)·φ(k_j)",
                                digits=digits, **kw)
    return _attention_trace(shown, zmin=0.0, label="φ(q_i)·φ(k_j)", digits=digits, **kw)


# ----------------------------------------------------------------------------------------------------
# the state S_t and the normaliser z_t
# ----------------------------------------------------------------------------------------------------
def _state_traces(S: np.ndarray, z: np.ndarray, *, s_range: float, digits: int | None = None,
                  **kw: Any) -> list[go.BaseTraceType]:
    # S: (d_phi, d_v), z: (d_phi,)
    heat = go.Heatmap(z=_lst(S, digits), colorscale="RdBu", zmid=0.0, zmin=-s_range, zmax=s_range,
                      colorbar={"title": {"text": "S entry"}, "x": 0.62, "len": 0.9},
                      hovertemplate="feature r=%{y}<br>value dim c=%{x}<br>S=%{z:.4g}<extra></extra>",
                      name="S_t", **kw)
    bars = go.Bar(x=_lst(z, digits), y=list(range(len(z))), orientation="h", marker={"color": OKABE_ITO[0]},
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
    S_ = _as_float("S", S, 2)
    z_ = _as_float("z", z, 1)
    if z_.shape[0] != S_.shape[0]:
        raise ValueError(f"z must have d_phi = S.shape[0] entries: S has shape {S_.shape}, z has {z_.shape}")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], shared_yaxes=True,
                        horizontal_spacing=0.2,
                        subplot_titles=("S_t = Σ_{j≤t} φ(k_j) v_jᵀ", "z_t = Σ_{j≤t} φ(k_j)"))
    for tr, c in zip(_state_traces(S_, z_, s_range=s_range or _sym_range(S_)), (1, 2), strict=True):
        fig.add_trace(tr, row=1, col=c)
    _state_axes(fig, S_.shape, z_max if z_max is not None else _zmax(z_))
    at = f" after step t = {t}" if t is not None else ""
    text = alt or (f"Heatmap of the {S_.shape[0]} by {S_.shape[1]} state S{at} on a diverging scale centred "
                   f"on zero, beside a bar chart of the {S_.shape[0]} entries of z.")
    default_title = f"State after step {t}" if t is not None else "State S and normaliser z"
    return _finish(fig, title=title or default_title, alt=text, height=height)


def _zmax(z: np.ndarray) -> float:
    m = float(np.nanmax(np.abs(z))) if z.size else 1.0
    return 1.05 * m if m > 0 else 1.0


def _state_axes(fig: go.Figure, shape: tuple[int, int], z_max: float, *, row: int = 1, col: int = 1) -> None:
    d_phi, d_v = shape
    fig.update_xaxes(title_text="value dim c", range=[-0.5, d_v - 0.5], showgrid=False, row=row, col=col,
                     dtick=1 if d_v <= 16 else None)
    fig.update_yaxes(title_text="feature r", range=[d_phi - 0.5, -0.5], showgrid=False, row=row, col=col,
                     dtick=1 if d_phi <= 16 else None)
    fig.update_xaxes(title_text="z_t entry", range=[min(0.0, -z_max if z_max < 0 else 0.0), z_max],
                     row=row, col=col + 1)
    fig.update_yaxes(range=[d_phi - 0.5, -0.5], row=row, col=col + 1)
