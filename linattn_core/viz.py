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

What is here, by chapter (each explorer of :mod:`linattn_core.widgets` has a ``*_twin`` builder here: the
same picture as a plotly figure whose own sliders and menus work on the static site)

- softmax: :func:`attention_heatmap`;
- causal: :func:`kernel_matrix_figure`, :func:`state_figure`, :func:`matrix_vs_state_figure` (data from
  :func:`matrix_vs_state_data`), :func:`chunk_layout`, :func:`chunk_diagram`;
- feature maps: :func:`feature_map_comparison` (:func:`feature_map_comparison_data`),
  :func:`performer_error_figure` (:func:`performer_error_curves`);
- trade-offs: :func:`cost_figure` (:func:`cost_model`, :func:`decode_memory_model`);
- beyond: :func:`decay_figure` (:func:`decay_data`);
- the book build: :func:`use_static_renderer`, :func:`figure_html`.

Conventions: colour-blind-safe scales (viridis / cividis for magnitudes, RdBu centred on zero for signed
values), axis titles with units, Unicode instead of LaTeX in titles (plotly shows raw TeX), and alt text in
``fig.layout.meta["alt"]`` for every figure (the static renderer turns it into an ``aria-label``).
"""

from __future__ import annotations

import hashlib
import html
import itertools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer
from plotly.subplots import make_subplots

__all__ = [
    "BOOK_RENDERER",
    "CHUNK_CATEGORIES",
    "OKABE_ITO",
    "PERFORMER_VARIANTS",
    "SIG_DIGITS",
    "attention_heatmap",
    "chunk_diagram",
    "chunk_layout",
    "chunk_twin",
    "cost_figure",
    "cost_model",
    "cost_twin",
    "decay_data",
    "decay_figure",
    "decay_twin",
    "decode_memory_model",
    "feature_map_comparison",
    "feature_map_comparison_data",
    "feature_map_twin",
    "figure_html",
    "figure_nbytes",
    "is_book_build",
    "kernel_matrix_figure",
    "matrix_vs_state_data",
    "matrix_vs_state_figure",
    "matrix_vs_state_twin",
    "performer_error_curves",
    "performer_error_figure",
    "performer_twin",
    "resolve_feature_map",
    "seeded_qkv",
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
MASK_GREY = "#d4d4d4"  # masked (future) cells: a grey heatmap under the data, which has gaps there
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


# Keyboard access for the static twins: plotly's own sliders and menus are SVG and take no focus. The
# <figure> is focusable; ← → (Home, End) step the first slider, ↑ ↓ cycle the first menu, exactly as a
# click would (same frames, same restyle/update arguments); a polite live region announces the value.
_KEYS_JS = """
(function () {
  var gd = document.getElementById('{plot_id}');
  var fig = gd && gd.closest('figure.linattn-figure');
  if (!fig || fig.dataset.linattnKeys) { return; }
  fig.dataset.linattnKeys = '1';
  var opts = {mode: 'immediate', frame: {duration: 0, redraw: true}, transition: {duration: 0}};
  function say(text) {  // looked up now: the span is parsed after this script ran
    var live = fig.querySelector('.linattn-live');
    if (live) { live.textContent = text; }
  }
  function slide(i) {
    var s = gd.layout.sliders && gd.layout.sliders[0];
    if (!s) { return false; }
    i = Math.max(0, Math.min(s.steps.length - 1, i));
    var step = s.steps[i];
    Plotly.animate(gd, step.args[0], opts).then(function () {
      return Plotly.relayout(gd, {'sliders[0].active': i});
    });
    say(((s.currentvalue && s.currentvalue.prefix) || '') + step.label);
    return true;
  }
  function menu(delta) {
    var m = gd.layout.updatemenus && gd.layout.updatemenus[0];
    if (!m) { return false; }
    var n = m.buttons.length, i = (((m.active || 0) + delta) % n + n) % n, b = m.buttons[i];
    Plotly[b.method].apply(null, [gd].concat(b.args)).then(function () {
      return Plotly.relayout(gd, {'updatemenus[0].active': i});
    });
    say(((m.name || '') + ' ' + b.label).trim());
    return true;
  }
  fig.addEventListener('keydown', function (e) {
    var s = gd.layout.sliders && gd.layout.sliders[0], at = s ? (s.active || 0) : 0, done = false;
    if (e.key === 'ArrowRight') { done = slide(at + 1); }
    else if (e.key === 'ArrowLeft') { done = slide(at - 1); }
    else if (e.key === 'Home') { done = slide(0); }
    else if (e.key === 'End') { done = s ? slide(s.steps.length - 1) : false; }
    else if (e.key === 'ArrowDown') { done = menu(1); }
    else if (e.key === 'ArrowUp') { done = menu(-1); }
    if (done) { e.preventDefault(); }
  });
})();
"""


def _keys_hint(fig_dict: Mapping[str, Any]) -> str:
    layout = fig_dict.get("layout", {}) or {}
    parts = []
    if layout.get("sliders"):
        parts.append("← → move the slider")
    if layout.get("updatemenus"):
        parts.append("↑ ↓ change the menu")
    return ("Keyboard: select the figure (Tab), then " + " and ".join(parts) + ".") if parts else ""


def figure_html(fig: go.Figure | Mapping[str, Any]) -> str:
    """The HTML fragment the book shows for ``fig``: a ``<figure>`` with an aria-label around a plotly div.

    plotly.js is NOT included (the site serves ``plotly.min.js`` once, via ``html_js_files``), nor is
    MathJax; no CDN is referenced. The div id is derived from the figure's content and a per-process
    counter, so rebuilding a page gives the same HTML. A figure with sliders or menus (a static twin) is
    also keyboard-usable: focusable, with arrow keys bound to its first slider and first menu.
    """
    fig_dict = fig.to_dict() if isinstance(fig, go.Figure) else dict(fig)
    digest = hashlib.sha1(pio.to_json(fig_dict, validate=False).encode()).hexdigest()[:10]
    div_id = f"linattn-fig-{next(_counter)}-{digest}"
    hint = _keys_hint(fig_dict)
    div = pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                      config=dict(_PLOT_CONFIG), div_id=div_id, default_height="450px", validate=False,
                      auto_play=False,  # frames are for the controls, not a movie on page load
                      post_script=_KEYS_JS if hint else None)
    label = html.escape(_alt_text(fig_dict), quote=True)
    if not hint:
        return f'<figure class="linattn-figure" role="group" aria-label="{label}">{div}</figure>'
    return (f'<figure class="linattn-figure" role="group" aria-label="{label}" tabindex="0" '
            f'aria-describedby="{div_id}-keys">{div}'
            f'<figcaption id="{div_id}-keys" class="linattn-keys" style="font-size:0.8em;opacity:0.75">'
            f'{html.escape(hint)}</figcaption>'
            f'<span class="linattn-live" aria-live="polite" style="position:absolute;width:1px;height:1px;'
            f'overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap"></span></figure>')


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
    fig = go.Figure([_future_trace(W.shape[0])] if causal else [])
    fig.add_trace(_attention_trace(W, colorscale=colorscale, zmin=zmin, zmax=zmax))
    _matrix_axes(fig, *W.shape)
    n_q, n_k = W.shape
    text = alt or (f"Heatmap of a {n_q} by {n_k} attention matrix: rows are query positions i, columns key "
                   f"positions j, colour the weight" + (", future entries greyed out." if causal else "."))
    return _finish(fig, title=title, alt=text, height=height)


def _future_trace(n: int) -> go.Heatmap:
    """Grey cells exactly where j > i (the future), NaN elsewhere; drawn under the data heatmap."""
    mask = np.full((n, n), np.nan)
    mask[np.triu_indices(n, k=1)] = 1.0
    return go.Heatmap(z=_lst(mask), colorscale=[[0, MASK_GREY], [1, MASK_GREY]], zmin=0, zmax=1,
                      showscale=False, hoverongaps=False, name="future (masked)",
                      hovertemplate="query i=%{y}<br>key j=%{x}<br>future: masked<extra></extra>")


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
    fig = go.Figure([_future_trace(n)] if causal else [])
    fig.add_trace(_score_trace(shown))
    if highlight_row is not None:
        fig.add_trace(_row_outline(highlight_row, M.shape[1]))
    _matrix_axes(fig, *M.shape)
    text = alt or (f"{n} by {M.shape[1]} kernel matrix of scores φ(q_i)·φ(k_j)"
                   + (", entries above the diagonal (the future) greyed out" if causal else "")
                   + (f", row {highlight_row} outlined." if highlight_row is not None else "."))
    return _finish(fig, title=title, alt=text, height=height)


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
    fig.update_xaxes(range=[min(0.0, 1.05 * float(z_.min())), z_max if z_max is not None else _zmax(z_)],
                     row=1, col=2)  # the identity map's z can be negative
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


# ----------------------------------------------------------------------------------------------------
# controls that work on the static site: plotly sliders (frames) and dropdowns (restyle / update)
# ----------------------------------------------------------------------------------------------------
_ANIMATE_OPTS = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}


def _slider(labels: Sequence[Any], frame_names: Sequence[str], *, prefix: str, active: int = 0,
            y: float = -0.08, x: float = 0.0, length: float = 1.0) -> dict:
    """A plotly slider whose step k shows frame ``frame_names[k]`` (works with no kernel)."""
    steps = [{"label": str(lab), "method": "animate", "args": [[name], _ANIMATE_OPTS]}
             for lab, name in zip(labels, frame_names, strict=True)]
    return {"active": active, "steps": steps, "x": x, "len": length, "y": y, "yanchor": "top",
            "xanchor": "left", "currentvalue": {"prefix": prefix, "visible": True, "xanchor": "left"},
            "pad": {"t": 30, "b": 10}, "transition": {"duration": 0}}


def _dropdown(labels: Sequence[str], args: Sequence[list], *, method: str = "restyle", active: int = 0,
              label: str = "", buttons: bool = False) -> dict:
    """A plotly dropdown (or a row of buttons); option k calls ``Plotly.<method>(*args[k])``.

    Placed top-left by :func:`_arrange`; ``label`` is drawn to its left (plotly menus have no label).
    """
    items = [{"label": lab, "method": method, "args": a} for lab, a in zip(labels, args, strict=True)]
    return {"type": "buttons" if buttons else "dropdown", "buttons": items, "active": active, "x": 0.0,
            "y": 1.1, "xanchor": "left", "yanchor": "top", "showactive": True,
            "direction": "right" if buttons else "down", "name": label,
            "pad": {"l": 8 + round(7.2 * len(label)) if label else 0, "t": 0, "r": 0, "b": 0},
            "bgcolor": "#f5f5f5", "bordercolor": "#999", "font": {"size": 13}}


def _control_label(fig: go.Figure, text: str) -> None:
    """A text label left of the top menu (positioned by :func:`_arrange`)."""
    fig.add_annotation(text=text, x=0.0, y=1.1, xref="paper", yref="paper", xanchor="left", yanchor="top",
                       showarrow=False, name="control-label", font={"size": 13})


def _arrange(fig: go.Figure, *, height: int, legend_rows: int = 0, axis_px: int = 58) -> go.Figure:
    """Lay out title, top menu, plot area, legend and bottom slider in fixed pixel bands.

    Title at the very top; the menu (if any) in a band under it; under the plot area the x-axis titles
    (``axis_px``), then the legend (``legend_rows`` rows), then the slider (if any). Paper coordinates
    are computed from pixels, so nothing overlaps whatever the figure's width.
    """
    has_menu = bool(fig.layout.updatemenus)
    has_slider = bool(fig.layout.sliders)
    top = 128 if has_menu else 78
    legend_px = 24 * legend_rows
    bottom = axis_px + legend_px + (82 if has_slider else 0) + 8
    plot_h = max(height - top - bottom, 120)
    fig.update_layout(height=height, margin={"t": top, "b": bottom},
                      title={"y": 1 - 10 / height, "yanchor": "top", "yref": "container"})
    if legend_rows:
        fig.update_layout(legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -axis_px / plot_h,
                                  "yanchor": "top"})
    for sl in fig.layout.sliders:
        sl.update(y=-(axis_px + legend_px) / plot_h, yanchor="top", pad={"t": 8, "b": 0})
    y_menu = 1 + (top - 44) / plot_h
    for m in fig.layout.updatemenus:
        m.update(y=y_menu, yanchor="top")
    for ann in fig.layout.annotations:
        if ann.name == "control-label":
            ann.update(y=y_menu, yanchor="top", yshift=-7)
    return fig


# What a frame may change in a trace: the data, plus the few attributes whose value depends on the step.
# Everything else (hover templates, styles, colour bars) stays as the figure's trace has it; sending it
# again would only fatten the page, and a colour bar in a frame would replace the placed one.
_FRAME_KEYS = ("type", "x", "y", "z", "zmin", "zmax", "name", "customdata", "text")


def _frames(fig: go.Figure, names: Sequence[str], traces: Sequence[int],
            data: Sequence[Sequence[go.BaseTraceType]],
            layouts: Sequence[Mapping[str, Any]] | None = None) -> list[go.Frame]:
    """Frames ``names[f]`` updating the traces at indices ``traces`` of ``fig`` with ``data[f]``.

    Only data keys are kept (:data:`_FRAME_KEYS`), and a key is left out when it has the same value in
    every frame and in ``fig``'s own trace (e.g. the fixed x of a curve): no frame would change it.
    """
    rows = [[{k: _jsonable(v) for k, v in tr.to_plotly_json().items() if k in _FRAME_KEYS}
             for tr in frame_data] for frame_data in data]
    for j, idx in enumerate(traces):
        own = {k: _jsonable(v) for k, v in fig.data[idx].to_plotly_json().items()}
        for key in list(rows[0][j]) if rows else []:
            if key != "type" and all(r[j].get(key) == own.get(key) for r in rows):
                for r in rows:
                    r[j].pop(key, None)
    return [go.Frame(name=n, traces=list(traces), data=r, **({"layout": layouts[f]} if layouts else {}))
            for f, (n, r) in enumerate(zip(names, rows, strict=True))]


def _jsonable(v: Any) -> Any:
    """Nested lists for numpy arrays and tuples (plotly returns either), so values compare with ==."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _visibility(groups: Sequence[int], n_shared: int, chosen: int) -> list[bool]:
    """``visible`` per trace: shared traces always, group traces only for the chosen group."""
    return [True] * n_shared + [g == chosen for g in groups]


def figure_nbytes(fig: go.Figure) -> int:
    """Size of the figure's JSON (what the static renderer puts in the page), in bytes."""
    return len(pio.to_json(fig, validate=False).encode())


# ----------------------------------------------------------------------------------------------------
# feature maps by name, with the options the explorers need
# ----------------------------------------------------------------------------------------------------
def resolve_feature_map(feature_map: Any, *, d: int, seed: int = 0, num_features: int | None = None,
                        **options: Any) -> tuple[str, Any]:
    """``(label, phi)`` for a name or a callable.

    ``"performer"`` gets ``d``, ``num_features`` (default 4 d), ``seed`` and ``stabilize=False`` (so
    φ(q)·φ(k) is the plain unbiased kernel estimate the pictures are about); other ``options`` go to
    :func:`linattn_core.get_feature_map` unchanged.
    """
    from .feature_maps import as_feature_map, get_feature_map

    if callable(feature_map):
        return getattr(feature_map, "name", None) or getattr(feature_map, "__name__", "custom φ"), \
            as_feature_map(feature_map, d)
    if not isinstance(feature_map, str):
        raise TypeError(f"feature_map must be a name or a callable, got {type(feature_map).__name__}")
    if feature_map == "performer":
        m = num_features if num_features is not None else 4 * d
        opts = {"stabilize": False, **options}
        return f"performer (m={m})", get_feature_map("performer", d=d, num_features=m, seed=seed, **opts)
    return feature_map, get_feature_map(feature_map, **options)


def _features(phi: Any, q: np.ndarray, k: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """φ(q), φ(k) as the attention functions see them (``pair`` handles positions and stabilisers)."""
    if hasattr(phi, "pair"):
        fq, fk = phi.pair(q, k, causal=causal)
    else:
        fq, fk = phi(q), phi(k)
    return np.asarray(fq, dtype=np.float64), np.asarray(fk, dtype=np.float64)


def seeded_qkv(N: int, d: int, d_v: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeded standard-normal ``q, k: (N, d)`` and ``v: (N, d_v)`` in float64 (signed, as in the tests)."""
    # q, k: (N, d), v: (N, d_v)
    for name, val in (("N", N), ("d", d), ("d_v", d_v)):
        if not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, d)), rng.standard_normal((N, d)), rng.standard_normal((N, d_v))


# ----------------------------------------------------------------------------------------------------
# matrix view vs state view of causal linear attention
# ----------------------------------------------------------------------------------------------------
def matrix_vs_state_data(q: Any, k: Any, v: Any, feature_map: Any = "elu+1", *, eps: float = 1e-6,
                         label: str | None = None) -> dict[str, Any]:
    """Everything the matrix-vs-state picture shows, computed by the library both ways.

    Parameters
    ----------
    q, k : array (N, d);  v : array (N, d_v)
    feature_map : name or callable φ

    Returns
    -------
    dict with ``scores`` (N, N) = φ(q_i)·φ(k_j) (the full matrix; the causal mask is the figure's job),
    ``weights`` (N, N) causal normalised attention, ``y_matrix`` (N, d_v) = weights @ v (from
    ``kernel_attention``), ``S`` (N, d_phi, d_v) and ``z`` (N, d_phi): the state after t + 1 tokens, and
    ``y_state`` (N, d_v): the outputs of :class:`LinearAttentionState.step`; ``max_diff`` (N,) per step.
    """
    import warnings

    from .attention import kernel_attention
    from .streaming import LinearAttentionState

    # q, k: (N, d), v: (N, d_v)
    q_ = _as_float("q", q, 2)
    k_ = _as_float("k", k, 2)
    v_ = _as_float("v", v, 2)
    if q_.shape != k_.shape or v_.shape[0] != q_.shape[0]:
        raise ValueError(f"q, k must be (N, d) and v (N, d_v) with the same N; got q {q_.shape}, "
                         f"k {k_.shape}, v {v_.shape}")
    (N, d), d_v = q_.shape, v_.shape[1]
    # cosFormer's positions need M up front to stream: the whole sequence, as in the matrix form
    extra = {"max_len": N} if feature_map == "cosformer" else {}
    name, phi = resolve_feature_map(feature_map, d=d, **extra)
    phi_q, phi_k = _features(phi, q_, k_, causal=True)  # (N, d_phi) each
    scores = phi_q @ phi_k.T  # (N, N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # identity map: non-positive denominators
        y_matrix, weights = kernel_attention(q_, k_, v_, phi, causal=True, eps=eps, return_weights=True)
        state = LinearAttentionState(d, d_v, phi, eps=eps)
        S, z, y_state = [], [], []
        for t in range(N):
            y_state.append(np.asarray(state.step(q_[t], k_[t], v_[t])))
            S.append(np.array(state.S, dtype=np.float64))
            z.append(np.array(state.z, dtype=np.float64))
    y_matrix, y_state = np.asarray(y_matrix), np.stack(y_state)
    return {"label": label or name, "scores": scores, "weights": np.asarray(weights), "y_matrix": y_matrix,
            "S": np.stack(S), "z": np.stack(z), "y_state": y_state,
            "max_diff": np.max(np.abs(y_matrix - y_state), axis=1), "v": v_}


_MVS_PER_GROUP = 7  # future mask, kernel heatmap, row outline, S heatmap, z bars, y from matrix, y from state


def _mvs_ranges(data: Mapping[str, Any]) -> dict[str, float]:
    z = data["z"]
    ys = np.concatenate([data["y_matrix"].ravel(), data["y_state"].ravel()])
    return {"s": _sym_range(data["S"]), "z_lo": min(0.0, 1.05 * float(z.min())),
            "z_hi": max(1e-12, 1.05 * float(z.max())), "y": 1.1 * _sym_range(ys)}


def _mvs_dynamic(data: Mapping[str, Any], t: int, digits: int | None) -> list[go.BaseTraceType]:
    """The traces that change with t: outline, S_t, z_t, y_t both ways (in group order, from index 2)."""
    N, d_v = data["y_matrix"].shape
    r = _mvs_ranges(data)
    S_t, z_t = data["S"][t], data["z"][t]
    heat, bars = _state_traces(S_t, z_t, s_range=r["s"], digits=digits)
    c = list(range(d_v))
    y_m = go.Bar(x=c, y=_lst(data["y_matrix"][t], digits), name="y_t from row t of the normalised matrix",
                 marker={"color": OKABE_ITO[1]}, offsetgroup="matrix",
                 hovertemplate="c=%{x}<br>y=%{y:.6g}<extra>from the matrix</extra>")
    y_s = go.Bar(x=c, y=_lst(data["y_state"][t], digits), offsetgroup="state",
                 name=f"y_t from S_t, z_t   (max |difference| = {data['max_diff'][t]:.1e})",
                 marker={"color": OKABE_ITO[0]},
                 hovertemplate="c=%{x}<br>y=%{y:.6g}<extra>from the state</extra>")
    return [_row_outline(t, N), heat, bars, y_m, y_s]


def _mvs_group(data: Mapping[str, Any], t: int, digits: int | None) -> list[go.BaseTraceType]:
    shown = _mask_future(np.asarray(data["scores"], dtype=np.float64), "scores")
    return [_future_trace(shown.shape[0]), _score_trace(shown, digits), *_mvs_dynamic(data, t, digits)]


def _mvs_canvas() -> go.Figure:
    return make_subplots(
        rows=2, cols=3, column_widths=[0.42, 0.36, 0.22], row_heights=[0.64, 0.36],
        horizontal_spacing=0.15, vertical_spacing=0.2,
        specs=[[{}, {}, {}], [{"colspan": 3}, None, None]],
        subplot_titles=("scores φ(q_i)·φ(k_j)", "state S_t", "normaliser z_t",
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
    _matrix_axes(fig, N, N, row=1, col=1)
    _state_axes(fig, (d_phi, d_v), 1.0, row=1, col=2)
    fig.update_xaxes(title_text="output dim c", dtick=1, range=[-0.5, d_v - 0.5], row=2, col=1)
    fig.update_yaxes(title_text="y_t[c]", zeroline=True, zerolinecolor="#888", row=2, col=1)
    fig.update_layout(_mvs_axis_ranges(data), barmode="group")


def matrix_vs_state_figure(data: Mapping[str, Any], t: int, *, title: str | None = None,
                           alt: str | None = None, height: int = 700) -> go.Figure:
    """Step ``t`` of causal linear attention seen two ways (from :func:`matrix_vs_state_data`).

    Left: the causal kernel matrix with row t outlined (future greyed); middle: the state S_t; right: z_t;
    below: y_t from row t of the normalised matrix and from (S_t, z_t), with their max abs difference.
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
    _finish(fig, title=title or f"Matrix view vs state view, step t = {t} ({data['label']})", alt=text,
            height=height)
    return _arrange(fig, height=height, legend_rows=2)


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
    fig.frames = _frames(fig, [f"t={t}" for t in range(N)], dyn_idx,
                         [[tr for lab in labels for tr in _mvs_dynamic(datas[lab], t, digits)]
                          for t in range(N)])
    args = [[{"visible": [gi == g for gi in groups]}, _mvs_axis_ranges(datas[lab])]
            for g, lab in enumerate(labels)]
    fig.update_layout(
        sliders=[_slider(range(N), [f"t={t}" for t in range(N)], prefix="step t = ", active=t0)],
        updatemenus=[_dropdown(labels, args, method="update", label="feature map φ:", buttons=True)])
    _control_label(fig, "feature map φ:")
    text = (f"Interactive figure with a slider over the step t (0 to {N - 1}) and buttons for the feature "
            f"maps ({', '.join(labels)}). Left: the causal {N} by {N} kernel matrix with row t outlined and "
            f"the future greyed; middle: the state S_t; right: z_t; below: y_t from the matrix and from the "
            f"state, which agree.")
    _finish(fig, title=title or "Matrix view vs state view: the same y_t, two ways", alt=text, height=height)
    return _arrange(fig, height=height, legend_rows=2)


# ----------------------------------------------------------------------------------------------------
# feature maps against softmax
# ----------------------------------------------------------------------------------------------------
def feature_map_comparison_data(q: Any, k: Any, v: Any, feature_maps: Sequence[Any] = ("elu+1",), *,
                                eps: float = 1e-6, seed: int = 0) -> dict[str, Any]:
    """Normalised attention of each feature map beside softmax's, for the same q, k, v (non-causal).

    Returns
    -------
    dict with ``softmax``: {``weights`` (N_q, N_k), ``y`` (N_q, d_v)} and ``maps``: label -> {``weights``,
    ``y``, ``diff`` = weights - softmax weights, ``denominators`` (N_q,) = φ(q_i)·Σ_j φ(k_j),
    ``max_abs`` = max |diff|, ``tv`` = mean over rows of half the L1 distance (attention mass misplaced),
    ``out_rel`` = ‖y - y_softmax‖ / ‖y_softmax‖, ``n_nonpositive`` = number of denominators ≤ 0}.
    """
    import warnings

    from .attention import kernel_attention, softmax_attention

    # q: (N_q, d), k: (N_k, d), v: (N_k, d_v)
    q_, k_, v_ = _as_float("q", q, 2), _as_float("k", k, 2), _as_float("v", v, 2)
    y_s, w_s = softmax_attention(q_, k_, v_, return_weights=True)
    maps: dict[str, Any] = {}
    for fm in feature_maps:
        label, phi = resolve_feature_map(fm, d=q_.shape[1], seed=seed)
        fq, fk = _features(phi, q_, k_, causal=False)
        den = fq @ fk.sum(axis=0)  # (N_q,)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # counted below instead
            y, w = kernel_attention(q_, k_, v_, phi, eps=eps, return_weights=True)
        w, y = np.asarray(w, dtype=np.float64), np.asarray(y, dtype=np.float64)
        diff = w - w_s
        maps[label] = {"weights": w, "y": y, "diff": diff, "denominators": den,
                       "max_abs": float(np.max(np.abs(diff))), "tv": float(0.5 * np.abs(diff).sum(1).mean()),
                       "out_rel": float(np.linalg.norm(y - y_s) / np.linalg.norm(y_s)),
                       "n_nonpositive": int(np.sum(den <= 0))}
    return {"softmax": {"weights": np.asarray(w_s), "y": np.asarray(y_s)}, "maps": maps}


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
        heat = _attention_trace(w, zmin=0.0, zmax=w_max, digits=digits, label="A_φ", name="A_φ")
    else:  # the identity map: signed weights, some huge where the clamp met a tiny denominator
        heat = _attention_trace(w, colorscale="RdBu", zmin=-1.0, zmax=1.0, digits=digits, name="A_φ",
                                label="A_φ", colorbar={"title": {"text": "A_φ, ±1"}})
    r = min(_sym_range(m["diff"]), 1.0)
    diff = go.Heatmap(z=_lst(m["diff"], digits), colorscale="RdBu", zmid=0.0, zmin=-r, zmax=r,
                      colorbar={"title": {"text": "ΔA"}}, name="ΔA", hoverongaps=False,
                      hovertemplate="query i=%{y}<br>key j=%{x}<br>A_φ − A_softmax=%{z:.3g}<extra></extra>")
    den = np.asarray(m["denominators"], dtype=np.float64)
    hist = go.Histogram(x=_lst(den, digits), nbinsx=min(30, max(5, den.size // 2)), name="denominators",
                        marker={"color": OKABE_ITO[5] if m["n_nonpositive"] else OKABE_ITO[0]},
                        hovertemplate="φ(q_i)·z in [%{x}]<br>%{y} queries<extra></extra>", showlegend=False)
    return [heat, diff, hist]


def _fm_canvas() -> go.Figure:
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.2, vertical_spacing=0.17,
                        subplot_titles=("A_φ: normalised φ(q_i)·φ(k_j)", "A_softmax",
                                        "difference A_φ − A_softmax", "denominators φ(q_i)·Σ_j φ(k_j)"))
    return fig


def _fm_layout(fig: go.Figure, n_q: int, n_k: int) -> None:
    for r, c in ((1, 1), (1, 2), (2, 1)):
        _matrix_axes(fig, n_q, n_k, row=r, col=c, y_title="query position i" if c == 1 else "")
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
    """A feature map's normalised attention beside softmax's, their difference and the denominators.

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
    fig.add_trace(_attention_trace(w_s, zmin=0.0, zmax=w_max, label="A_softmax", name="A_softmax"),
                  row=1, col=2)
    for tr, (r, c) in zip(_fm_group(maps[label], w_max, None), ((1, 1), (2, 1), (2, 2)), strict=True):
        fig.add_trace(tr, row=r, col=c)
    _fm_layout(fig, n_q, n_k)
    m = maps[label]
    text = alt or (f"Four panels for the {label} feature map on {n_q} queries and {n_k} keys: its attention "
                   f"matrix, softmax's, their difference (max {m['max_abs']:.2g}) and a histogram of the "
                   f"denominators, {m['n_nonpositive']} of which are zero or negative.")
    _finish(fig, title=title or _fm_title(label, m), alt=text, height=height, title_font_size=14)
    return _arrange(fig, height=height)


def feature_map_twin(data: Mapping[str, Any], *, digits: int = SIG_DIGITS, height: int = 760) -> go.Figure:
    """Static twin of the feature-map explorer: a dropdown over the maps (``update``: visibility + title)."""
    maps = data["maps"]
    labels = list(maps)
    w_s = np.asarray(data["softmax"]["weights"], dtype=np.float64)
    n_q, n_k = w_s.shape
    w_max = float(w_s.max())
    fig = _fm_canvas()
    fig.add_trace(_attention_trace(w_s, zmin=0.0, zmax=w_max, label="A_softmax", name="A_softmax",
                                   digits=digits), row=1, col=2)
    groups: list[int] = []
    for g, lab in enumerate(labels):
        for tr, (r, c) in zip(_fm_group(maps[lab], w_max, digits), ((1, 1), (2, 1), (2, 2)), strict=True):
            tr.visible = g == 0
            fig.add_trace(tr, row=r, col=c)
            groups.append(g)
    _fm_layout(fig, n_q, n_k)
    args = [[{"visible": _visibility(groups, 1, g)}, {"title.text": _fm_title(lab, maps[lab])}]
            for g, lab in enumerate(labels)]
    fig.update_layout(updatemenus=[_dropdown(labels, args, method="update", label="feature map φ:",
                                             buttons=len(labels) <= 4)])
    _control_label(fig, "feature map φ:")
    text = (f"Interactive figure with a menu of feature maps ({', '.join(labels)}). For the chosen map: its "
            f"attention matrix beside softmax's for the same {n_q} queries and {n_k} keys, their difference "
            f"and a histogram of the denominators (the identity map has some at or below zero).")
    _finish(fig, title=_fm_title(labels[0], maps[labels[0]]), alt=text, height=height, title_font_size=14)
    return _arrange(fig, height=height)


# ----------------------------------------------------------------------------------------------------
# Performer: error of random features against the exact softmax kernel
# ----------------------------------------------------------------------------------------------------
PERFORMER_VARIANTS = (("positive", True), ("positive", False), ("trig", True), ("trig", False))


def _variant_label(kind: str, orthogonal: bool) -> str:
    return f"{'positive' if kind == 'positive' else 'trigonometric'}, {'orthogonal' if orthogonal else 'iid'}"


def performer_error_curves(*, d: int = 16, N: int = 48, ms: Sequence[int] = (4, 8, 16, 32, 64, 128, 256),
                           n_seeds: int = 10, seed: int = 0, input_scale: float = 0.75,
                           n_pairs: int = 150, eps: float = 1e-6) -> dict[str, Any]:
    """Relative errors of Performer random features against softmax, for every m and variant.

    For each variant (positive / trigonometric features, orthogonal / iid projections) and each m, the
    errors are the median over ``n_seeds`` projections (the same seeds for every variant, so the
    comparison is paired; the median because single draws are heavy-tailed):

    - ``kernel``: mean over entries of |K̂_ij − K_ij| / K_ij, with K_ij = exp(q_i·k_j / √d) and
      K̂ = φ(Q)φ(K)ᵀ. Entrywise relative error, so small kernel values count as much as large ones
      (where the positive features shine);
    - ``output``: ‖Ŷ − Y‖_F / ‖Y‖_F against :func:`softmax_attention` (trigonometric features can give
      denominators ≤ 0: the clamp then makes the output error huge).

    q and k are seeded standard normal times ``input_scale``. ``pairs`` keeps, for the first seed,
    ``n_pairs`` sampled entries (K_ij, K̂_ij) for a scatter plot.
    """
    from .attention import softmax_attention
    from .feature_maps import get_feature_map

    ms = [int(m) for m in ms]
    if not ms or min(ms) < 1:
        raise ValueError(f"ms must be a non-empty list of positive feature counts, got {ms}")
    q, k, v = seeded_qkv(N, d, d, seed)
    q, k = q * input_scale, k * input_scale
    K = np.exp(q @ k.T / np.sqrt(d))  # (N, N)
    y = np.asarray(softmax_attention(q, k, v))
    pick = np.random.default_rng(seed + 1).choice(N * N, size=min(n_pairs, N * N), replace=False)
    out: dict[str, Any] = {"ms": np.array(ms), "d": d, "N": N, "n_seeds": n_seeds, "variants": {},
                           "exact_pairs": K.ravel()[pick]}
    for kind, orth in PERFORMER_VARIANTS:
        ker = np.zeros((len(ms), n_seeds))
        outp = np.zeros((len(ms), n_seeds))
        pairs = []
        for a, m in enumerate(ms):
            for s in range(n_seeds):
                phi = get_feature_map("performer", d=d, num_features=m, seed=seed + s, orthogonal=orth,
                                      stabilize=False, kind=kind)
                fq, fk = _features(phi, q, k, causal=False)
                K_hat = fq @ fk.T
                ker[a, s] = np.mean(np.abs(K_hat - K) / K)
                # the normalised output from K̂, exactly as kernel_attention forms it (the clamp
                # max(den, eps) included), without computing the features a second time
                y_hat = (K_hat @ v) / np.maximum(K_hat.sum(1), eps)[:, None]
                outp[a, s] = np.linalg.norm(y_hat - y) / np.linalg.norm(y)
                if s == 0:
                    pairs.append(K_hat.ravel()[pick])
        out["variants"][(kind, orth)] = {"kernel": np.median(ker, 1), "output": np.median(outp, 1),
                                         "kernel_all": ker, "output_all": outp, "pairs": np.stack(pairs)}
    return out


def _perf_style(kind: str, orth: bool) -> dict:
    colour = OKABE_ITO[0] if kind == "positive" else OKABE_ITO[5]
    return {"color": colour, "dash": "solid" if orth else "dash"}


def _perf_curves(curves: Mapping[str, Any]) -> list[tuple[go.Scatter, int]]:
    """The error curves of every variant: (trace, subplot column), kernel error in 1, output error in 2."""
    ms = curves["ms"].tolist()
    traces = []
    for key, col in (("kernel", 1), ("output", 2)):
        for kind, orth in PERFORMER_VARIANTS:
            lab = _variant_label(kind, orth)
            traces.append((go.Scatter(
                x=ms, y=_lst(curves["variants"][(kind, orth)][key], SIG_DIGITS), mode="lines+markers",
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
    mk = [go.Scatter(x=[m], y=_lst([var[key][a]], digits), mode="markers", marker=sel, showlegend=False,
                     name=f"m = {m}", hovertemplate="m=%{x}<br>error=%{y:.3g}<extra>chosen</extra>")
          for key in ("kernel", "output")]
    sc = go.Scatter(x=_lst(curves["exact_pairs"], digits), y=_lst(var["pairs"][a], digits), mode="markers",
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
    allv = np.concatenate([np.r_[v["kernel"], v["output"]] for v in curves["variants"].values()])
    allv = allv[np.isfinite(allv) & (allv > 0)]
    # cap at 100: trigonometric outputs with denominators <= 0 reach 1e7 and would flatten the rest
    ylo, yhi = np.log10(allv.min()) - 0.15, min(np.log10(allv.max()) + 0.15, 2.0)
    for c in (1, 2):
        fig.update_xaxes(type="log", title_text="features m", row=1, col=c)
        fig.update_yaxes(type="log", title_text="relative error" if c == 1 else None, range=[ylo, yhi],
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
    lab = _variant_label(kind, orthogonal)
    text = alt or (f"Log-log plots of the relative error of the kernel estimate and of the attention output "
                   f"against the number of random features m, for positive and trigonometric features with "
                   f"orthogonal or iid projections; errors fall as m grows. m = {m} ({lab}) is marked, and a "
                   f"scatter compares its kernel estimates with the exact values.")
    _finish(fig, title=title or f"Performer random features: error vs m (chosen: m = {m}, {lab})",
            alt=text, height=height)
    return _arrange(fig, height=height, legend_rows=2)


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
    fig.frames = _frames(fig, [f"m={m}" for m in ms], idx,
                         [[tr for kind, orth in PERFORMER_VARIANTS
                           for tr in _perf_selected(curves, kind, orth, a, digits)] for a in range(len(ms))])
    labels = [_variant_label(kind, orth) for kind, orth in PERFORMER_VARIANTS]
    fig.update_layout(
        sliders=[_slider(ms, [f"m={m}" for m in ms], prefix="random features m = ", active=a0)],
        updatemenus=[_dropdown(labels, [[{"visible": _visibility(groups, n_shared, g)}]
                                        for g in range(len(labels))], label="features:")])
    _control_label(fig, "features:")
    text = ("Interactive figure with a slider over the number of random features m and a menu of variants "
            "(positive or trigonometric features, orthogonal or iid projections). Log-log curves show the "
            "kernel and output errors falling with m; the chosen m is marked, and a scatter compares kernel "
            "estimates with exact values.")
    _finish(fig, title="Performer random features: error vs m", alt=text, height=height)
    return _arrange(fig, height=height, legend_rows=2)


# ----------------------------------------------------------------------------------------------------
# cost: quadratic vs linear, KV cache vs fixed state
# ----------------------------------------------------------------------------------------------------
def cost_model(N: Any, *, d: int = 64, d_v: int | None = None, d_phi: int | None = None,
               itemsize: int = 4) -> dict[str, np.ndarray]:
    """Analytic FLOPs and bytes of one attention head, quadratic (softmax / kernel matrix) vs linear.

    FLOPs count a multiply-add as 2 and ignore the O(N²) exponentials and the O(N d) feature map:

    - quadratic: Q Kᵀ (2 N² d) and A V (2 N² d_v);
    - linear: S = φ(K)ᵀ V (2 N d_phi d_v), z (N d_phi), φ(Q) S (2 N d_phi d_v), φ(Q) z (2 N d_phi).

    Bytes: the inputs and output (N (2 d + 2 d_v) numbers) plus the quadratic form's N x N score matrix,
    or the linear form's features (2 N d_phi) and state (d_phi d_v + d_phi).

    Returns a dict of float arrays shaped like ``N``, plus ``crossover_N``: where the FLOP counts meet.
    """
    # N: any shape
    N_ = np.asarray(N, dtype=np.float64)
    if np.any(N_ < 1):
        raise ValueError(f"N must be >= 1 everywhere, got min {N_.min()}")
    d_v = d if d_v is None else d_v
    d_phi = d if d_phi is None else d_phi
    for name, val in (("d", d), ("d_v", d_v), ("d_phi", d_phi), ("itemsize", itemsize)):
        if not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    io = N_ * (2 * d + 2 * d_v)
    return {
        "flops_quadratic": 2 * N_**2 * (d + d_v),
        "flops_linear": N_ * (4 * d_phi * d_v + 3 * d_phi),
        "bytes_quadratic": itemsize * (io + N_**2),
        "bytes_linear": itemsize * (io + 2 * N_ * d_phi + d_phi * d_v + d_phi),
        "crossover_N": np.float64((4 * d_phi * d_v + 3 * d_phi) / (2 * (d + d_v))),
    }


def decode_memory_model(T: Any, *, d: int = 64, d_v: int | None = None, d_phi: int | None = None,
                        itemsize: int = 4, n_layers: int = 1, n_heads: int = 1) -> dict[str, np.ndarray]:
    """Bytes kept between decoding steps after ``T`` tokens: a KV cache (T (d + d_v) numbers per head and
    layer, growing) vs the fixed linear-attention state (d_phi d_v + d_phi numbers, constant)."""
    T_ = np.asarray(T, dtype=np.float64)
    d_v = d if d_v is None else d_v
    d_phi = d if d_phi is None else d_phi
    per = itemsize * n_layers * n_heads
    state = per * (d_phi * d_v + d_phi)
    return {"kv_cache": per * T_ * (d + d_v), "state": np.full_like(T_, float(state)),
            "crossover_T": np.float64((d_phi * d_v + d_phi) / (d + d_v))}




def _cost_traces(N: np.ndarray, T: np.ndarray, d: int, d_v: int, d_phi: int | None, itemsize: int,
                 digits: int | None) -> list[go.BaseTraceType]:
    c = cost_model(N, d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)
    mem = decode_memory_model(T, d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)
    quad, lin = {"color": OKABE_ITO[5]}, {"color": OKABE_ITO[0]}
    n, t = N.tolist(), T.tolist()

    def line(x, y, name, style, show, unit):
        return go.Scatter(x=x, y=_lst(y, digits), mode="lines", name=name, line={**style, "width": 2.5},
                          legendgroup=name, showlegend=show,
                          hovertemplate="%{x:.3s}<br>%{y:.3s} " + unit + "<extra>" + name + "</extra>")

    return [line(n, c["flops_quadratic"], "quadratic (N×N scores)", quad, True, "FLOPs"),
            line(n, c["flops_linear"], "linear (state S, z)", lin, True, "FLOPs"),
            line(n, c["bytes_quadratic"], "quadratic (N×N scores)", quad, False, "bytes"),
            line(n, c["bytes_linear"], "linear (state S, z)", lin, False, "bytes"),
            line(t, mem["kv_cache"], "KV cache (softmax)", {**quad, "dash": "dot"}, True, "bytes"),
            line(t, mem["state"], "fixed state (linear)", {**lin, "dash": "dot"}, True, "bytes"),
            _crossover(float(c["crossover_N"]), float(cost_model(c["crossover_N"], d=d, d_v=d_v, d_phi=d_phi,
                                                                  itemsize=itemsize)["flops_linear"]),
                       "equal FLOPs", "FLOPs", digits),
            _crossover(float(mem["crossover_T"]), float(mem["state"].flat[0]), "cache = state", "bytes",
                       digits)]


def _crossover(x: float, y: float, what: str, unit: str, digits: int | None) -> go.Scatter:
    """A marked point where the two curves of a panel meet, labelled with its N."""
    return go.Scatter(x=_lst([x], digits), y=_lst([y], digits), mode="markers+text", showlegend=False,
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
                                      "size": 8, "color": OKABE_ITO[(j + 2) % len(OKABE_ITO)]},
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
        fig.update_xaxes(type="log", title_text=xt, row=1, col=c)
        fig.update_yaxes(type="log", title_text=yt, row=1, col=c, exponentformat="SI",
                         **({"range": yr[yt.split()[0]]} if yr else {}))
    if has_measured:
        fig.update_xaxes(type="log", title_text="sequence length N", row=2, col=1)
        fig.update_yaxes(type="log", title_text="seconds", row=2, col=1)


def cost_figure(*, d: int = 64, d_v: int | None = None, d_phi: int | None = None, itemsize: int = 4,
                N: Any = None, T: Any = None, measured: Sequence[Mapping[str, Any]] | None = None,
                title: str | None = None, alt: str | None = None, height: int | None = None) -> go.Figure:
    """Log-log cost curves: FLOPs and bytes vs N (quadratic vs linear, :func:`cost_model`), KV-cache vs
    fixed-state bytes vs context length (:func:`decode_memory_model`), and measured times if given.

    Parameters
    ----------
    measured : list of mappings with keys ``N``, ``method``, ``median_s``, optional
        E.g. the records of a ``linattn_core.timing`` sweep; drawn per method on a log-log panel.
    """
    d_v = d if d_v is None else d_v
    N_ = np.unique(np.round(np.logspace(4, 17, 27, base=2))) if N is None else np.asarray(N, dtype=np.float64)
    T_ = N_ if T is None else np.asarray(T, dtype=np.float64)
    fig, _ = _cost_canvas(measured)
    for tr, (r, c) in zip(_cost_traces(N_, T_, d, d_v, d_phi, itemsize, None), _COST_CELLS, strict=True):
        fig.add_trace(tr, row=r, col=c)
    _cost_axes(fig, bool(measured))
    x = float(cost_model(N_, d=d, d_v=d_v, d_phi=d_phi, itemsize=itemsize)["crossover_N"])
    text = alt or (f"Three log-log panels for d = {d}, d_v = {d_v}: FLOPs and bytes against sequence length, "
                   f"where the quadratic form grows as N squared and the linear form as N, crossing near "
                   f"N = {x:.0f}; and memory kept while decoding, where the KV cache grows with the context "
                   f"and the linear state stays constant." + (" A fourth panel shows measured times."
                                                              if measured else ""))
    h = height or (760 if measured else 500)
    _finish(fig, title=title or f"Cost of attention, quadratic vs linear (d = {d}, d_v = {d_v})",
            alt=text, height=h)
    return _arrange(fig, height=h, legend_rows=2)


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
    allc = [cost_model(N_, d=d, d_v=dv, itemsize=itemsize) for d in ds for dv in d_vs]
    allm = [decode_memory_model(N_, d=d, d_v=dv, itemsize=itemsize) for d in ds for dv in d_vs]
    f = np.concatenate([np.r_[c["flops_quadratic"], c["flops_linear"]] for c in allc])
    b = np.concatenate([np.r_[c["bytes_quadratic"], c["bytes_linear"]] for c in allc]
                       + [np.r_[m["kv_cache"], m["state"]] for m in allm])
    yr = {"FLOPs": (np.log10(f.min()) - 0.2, np.log10(f.max()) + 0.2),
          "bytes": (np.log10(b.min()) - 0.2, np.log10(b.max()) + 0.2)}
    _cost_axes(fig, bool(measured), yr)
    idx = list(range(n_shared, len(fig.data)))
    fig.frames = _frames(fig, [f"d={d}" for d in ds], idx,
                         [[tr for dv in d_vs for tr in _cost_traces(N_, N_, d, dv, None, itemsize, digits)]
                          for d in ds])
    fig.update_layout(
        sliders=[_slider(ds, [f"d={d}" for d in ds], prefix="key/query dim d = ", active=ds.index(d0),
                         length=0.6)],
        updatemenus=[_dropdown([str(x) for x in d_vs], [[{"visible": _visibility(groups, n_shared, g)}]
                                                        for g in range(len(d_vs))],
                               active=d_vs.index(d_v0), label="value dim d_v:", buttons=True)])
    _control_label(fig, "value dim d_v:")
    text = ("Interactive figure with a slider over d and a menu for d_v. Three log-log panels: FLOPs and "
            "bytes against sequence length (quadratic grows as N squared, linear as N) and memory kept while "
            "decoding (the KV cache grows with the context, the linear state stays constant)."
            + (" A fourth panel shows measured times." if measured else ""))
    h = height or (800 if measured else 560)
    _finish(fig, title="Cost of attention, quadratic vs linear (φ = elu+1, so d_phi = d)", alt=text, height=h)
    return _arrange(fig, height=h, legend_rows=2)


# ----------------------------------------------------------------------------------------------------
# chunkwise-parallel causal attention: who computes which entry
# ----------------------------------------------------------------------------------------------------
#: Codes of :func:`chunk_layout`, in order 0, 1, 2.
CHUNK_CATEGORIES = ("future: masked, never computed", "same chunk: masked intra-chunk product",
                    "earlier chunk: enters through the carried state")
_CHUNK_COLOURS = (MASK_GREY, OKABE_ITO[1], OKABE_ITO[0])


def chunk_layout(N: int, chunk_size: int) -> np.ndarray:
    """Integer (N, N) map of causal attention computed chunkwise: 0 future (j > i), 1 same chunk and
    j ≤ i (the masked product inside a chunk), 2 key in an earlier chunk (folded into the state S, z
    carried into query i's chunk). Any ``N`` works with any ``chunk_size`` (the last chunk may be short)."""
    for name, val in (("N", N), ("chunk_size", chunk_size)):
        if not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    i = np.arange(N)[:, None]
    j = np.arange(N)[None, :]
    same = (i // chunk_size) == (j // chunk_size)
    return np.where(j > i, 0, np.where(same, 1, 2)).astype(np.int64)


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
    _matrix_axes(fig, N, N)
    text = alt or (f"{N} by {N} causal attention matrix split into chunks of {chunk_size}: diagonal blocks "
                   f"are computed by a masked product inside each chunk, entries left of them reach the "
                   f"queries through the state carried from earlier chunks, and the future is greyed out.")
    _finish(fig, title=title or _chunk_title(N, chunk_size), alt=text, height=height, title_font_size=14)
    return _arrange(fig, height=height)


def chunk_twin(N: int = 16, chunk_sizes: Sequence[int] = (1, 2, 3, 4, 5, 8, 16), *, c0: int = 4,
               height: int = 600) -> go.Figure:
    """Static twin of the chunk explorer: a slider over the chunk size, one frame each (data + title)."""
    sizes = [int(c) for c in chunk_sizes]
    if c0 not in sizes:
        raise ValueError(f"c0={c0} must be one of chunk_sizes={sizes}")
    fig = chunk_diagram(N, c0)
    fig.frames = _frames(fig, [f"C={c}" for c in sizes], [0, 1], [_chunk_traces(N, c) for c in sizes],
                         [{"title": {"text": _chunk_title(N, c)}} for c in sizes])
    fig.update_layout(sliders=[_slider(sizes, [f"C={c}" for c in sizes], prefix="chunk size C = ",
                                       active=sizes.index(c0))])
    text = (f"Interactive figure with a slider over the chunk size (values {', '.join(map(str, sizes))}). "
            f"The {N} by {N} causal attention matrix is coloured by who computes each entry: diagonal blocks "
            f"by a masked product inside each chunk, entries left of them through the carried state, the "
            f"future greyed out.")
    _finish(fig, title=_chunk_title(N, c0), alt=text, height=height)
    return _arrange(fig, height=height)


# ----------------------------------------------------------------------------------------------------
# decay (RetNet-style γ): the causal weights fade away from the diagonal
# ----------------------------------------------------------------------------------------------------
def decay_data(q: Any, k: Any, v: Any, gammas: Sequence[float] = (1.0, 0.95, 0.9, 0.8, 0.7, 0.5), *,
               feature_map: Any = "elu+1", recent: int = 8) -> dict[str, Any]:
    """Implied causal weights of decayed linear attention for each constant decay γ.

    Returns ``gammas``, ``weights`` (G, N, N) from :func:`linattn_core.decay.decayed_kernel_attention`,
    and ``recent_mass`` (G,): the share of the last query's weight on its ``recent`` most recent tokens.
    """
    from .decay import decayed_kernel_attention

    gs = [float(g) for g in gammas]
    if not gs or any(not 0 < g <= 1 for g in gs):
        raise ValueError(f"gammas must be decays in (0, 1], got {gammas}")
    W = np.stack([np.asarray(decayed_kernel_attention(q, k, v, feature_map, decay=g, return_weights=True)[1],
                             dtype=np.float64) for g in gs])  # (G, N, N)
    return {"gammas": gs, "weights": W, "recent": recent, "recent_mass": W[:, -1, -recent:].sum(-1)}


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
    heat = _attention_trace(_mask_future(W, "weights"), zmin=0.0, zmax=zmax, digits=digits,
                            colorbar={"title": {"text": ""}, "thickness": 8, "tickfont": {"size": 10}})
    bars = go.Bar(x=list(range(N)), y=_lst(W[-1], digits), marker={"color": OKABE_ITO[0]}, showlegend=False,
                  name="last query's weights", hovertemplate="key j=%{x}<br>weight=%{y:.3g}<extra></extra>")
    return [heat, _row_outline(N - 1, N), bars]


def _decay_build(data: Mapping[str, Any], a: int, digits: int | None, height: int) -> go.Figure:
    N = data["weights"].shape[1]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.17,
                        subplot_titles=("causal weights ∝ γ^(i − j) φ(q_i)·φ(k_j)",
                                        f"row i = {N - 1}, the last query"))
    fig.add_trace(_future_trace(N), row=1, col=1)
    for tr, c in zip(_decay_traces(data, a, digits), (1, 1, 2), strict=True):
        fig.add_trace(tr, row=1, col=c)
    fig.data[1].colorbar.update(x=fig.layout.xaxis.domain[1] + 0.01, xanchor="left")
    _matrix_axes(fig, N, N, row=1, col=1)
    fig.update_xaxes(title_text="key position j", range=[-0.5, N - 0.5], row=1, col=2)
    top = float(data["weights"][:, -1, :].max()) * 1.08  # one axis for every γ: heights compare
    fig.update_yaxes(title_text="weight", range=[0, top], row=1, col=2)
    g = data["gammas"][a]
    text = (f"Left: the {N} by {N} causal attention weights of linear attention with decay γ = {g:g}, "
            f"future greyed, last row outlined (colours saturate in the first rows, whose few weights are "
            f"large); right: the last query's weights over the key positions. The smaller γ, the more "
            f"weight sits near the diagonal.")
    _finish(fig, title=_decay_title(g, data["recent_mass"][a], data["recent"]), alt=text, height=height,
            title_font_size=14)
    return fig


def decay_figure(data: Mapping[str, Any], gamma: float | None = None, *, height: int = 460) -> go.Figure:
    """One decay γ (from :func:`decay_data`): the causal weights with the last row outlined, and that row
    as bars over the key positions. Trace order: future mask, weights, outline, bars."""
    gs = data["gammas"]
    gamma = gs[0] if gamma is None else float(gamma)
    if gamma not in gs:
        raise ValueError(f"gamma must be one of the computed decays {gs}, got {gamma}")
    return _arrange(_decay_build(data, gs.index(gamma), None, height), height=height)


def decay_twin(data: Mapping[str, Any], *, g0: float | None = None, digits: int = SIG_DIGITS,
               height: int = 540) -> go.Figure:
    """Static twin of the decay explorer: a slider over γ, one frame per decay (traces 1-3 and title)."""
    gs = data["gammas"]
    g0 = gs[min(2, len(gs) - 1)] if g0 is None else float(g0)
    if g0 not in gs:
        raise ValueError(f"g0 must be one of {gs}, got {g0}")
    fig = _decay_build(data, gs.index(g0), digits, height)
    fig.frames = _frames(fig, [f"γ={g:g}" for g in gs], [1, 2, 3],
                         [_decay_traces(data, a, digits) for a in range(len(gs))],
                         [{"title": {"text": _decay_title(g, mass, data["recent"])}}
                          for g, mass in zip(gs, data["recent_mass"], strict=True)])
    fig.update_layout(sliders=[_slider([f"{g:g}" for g in gs], [f"γ={g:g}" for g in gs],
                                       prefix="decay γ = ", active=gs.index(g0))])
    N = data["weights"].shape[1]
    fig.layout.meta = {"alt": f"Interactive figure with a slider over the decay γ "
                              f"({', '.join(f'{g:g}' for g in gs)}). Left: the {N} by {N} causal weights of "
                              f"decayed linear attention; right: the last query's weights. As γ falls, the "
                              f"weight gathers near the diagonal."}
    return _arrange(fig, height=height)
