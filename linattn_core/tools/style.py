"""House style of the book's figures: palette, template, axis and legend helpers, array conversion.

Everything a figure builder shares lives here, under public names, so that no module reaches into
another's private helpers: the chapters' figures (:mod:`linattn_core.tools.viz`) and the timing plots
(:mod:`linattn_core.tools.timing.plots`) both build on it, and it imports neither.

Conventions: colour-blind-safe colours (:data:`PALETTE` for series, viridis / cividis for magnitudes,
RdBu centred on zero for signed values), axis titles with units, Unicode instead of LaTeX in titles
(plotly shows raw TeX), and alt text in ``fig.layout.meta["alt"]`` for every figure (the static renderer
turns it into an ``aria-label``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

#: Significant digits kept in precomputed frames/variants (keeps chapter pages small).
SIG_DIGITS = 4
#: Okabe-Ito: a qualitative palette readable with every common colour-vision deficiency (the chapters'
#: own figures pick entries by index). Its orange, sky blue and yellow are pale on white (contrast
#: 2.3, 2.3 and 1.3 to 1), too faint for thin lines: series use :data:`PALETTE`.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
#: Colours for series, in order: Okabe-Ito's blue, vermillion, bluish green and reddish purple (chosen
#: to stay apart under the common colour-vision deficiencies), black, Okabe-Ito's orange darkened,
#: Paul Tol's wine and a grey. Every one has a contrast of at least 3 to 1 on white (the threshold for
#: graphical objects); beyond the first five, series also need a dash or marker of their own.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000", "#A06A00", "#882255", "#666666")
MASK_GREY = "#d4d4d4"  # masked (future) cells: a grey heatmap under the data, which has gaps there
HIGHLIGHT = "#D55E00"  # outline of the highlighted row (vermillion: visible on viridis and on RdBu)

# A small template: plotly's default one adds ~6.5 KB of JSON to every figure.
TEMPLATE = go.layout.Template(
    layout={
        "font": {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 13},
        "colorway": list(PALETTE),
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
        "hoverlabel": {"namelength": -1},
        "xaxis": {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "ticks": "outside"},
        "yaxis": {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "ticks": "outside"},
        "legend": {"bgcolor": "rgba(255,255,255,0.7)"},
    }
)


def sig_round(a: Any, digits: int = SIG_DIGITS) -> np.ndarray:
    """Round every entry of ``a`` to ``digits`` significant digits (NaN and inf pass through).

    Used for precomputed frames: 4 digits are more than the eye can see and halve the JSON.
    """
    x = np.asarray(to_numpy(a), dtype=np.float64)
    out = x.copy()
    finite = np.isfinite(x) & (x != 0)
    if np.any(finite):
        mag = np.floor(np.log10(np.abs(x[finite])))
        scale = 10.0 ** (digits - 1 - mag)
        out[finite] = np.round(x[finite] * scale) / scale
    return out


def to_numpy(x: Any) -> np.ndarray:
    """numpy view of an array-like or a torch tensor (without importing torch)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def as_float(name: str, x: Any, ndim: int | tuple[int, ...]) -> np.ndarray:
    """Convert ``x`` to a float64 array with the given number of dims, or raise naming ``name``."""
    arr = to_numpy(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    dims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.ndim not in dims:
        want = " or ".join(f"{k}-D" for k in dims)
        raise ValueError(f"{name} must be {want}, got shape {arr.shape}")
    return arr


def json_list(a: Any, digits: int | None = None) -> Any:
    """Plain (nested) list of floats, NaN -> None (JSON null), optionally rounded; small in JSON."""
    x = np.asarray(a, dtype=np.float64)
    if digits is not None:
        x = sig_round(x, digits)
    obj = x.astype(object)
    obj[~np.isfinite(x)] = None
    return obj.tolist()


def finish(fig: go.Figure, *, title: str | None, alt: str, height: int = 420, width: int | None = None,
           **layout: Any) -> go.Figure:
    """Apply the house template, a title, a fixed height and the alt text (``layout.meta["alt"]``)."""
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    meta["alt"] = alt
    fig.update_layout(template=TEMPLATE, height=height, meta=meta, **layout)
    if width is not None:
        fig.update_layout(width=width)
    if title is not None:
        fig.update_layout(title={"text": title, "x": 0.01, "xanchor": "left"})
    return fig


def matrix_axes(fig: go.Figure, n_rows: int, n_cols: int, *, row: int | None = None, col: int | None = None,
                x_title: str = "key position j", y_title: str = "query position i") -> None:
    """Matrix orientation: row 0 at the top, integer ticks, square-ish cells, no grid lines."""
    kw = {} if row is None else {"row": row, "col": col}
    fig.update_xaxes(title_text=x_title, range=[-0.5, n_cols - 0.5], showgrid=False, zeroline=False,
                     tickmode="auto", nticks=min(n_cols, 13), constrain="domain", **kw)
    fig.update_yaxes(title_text=y_title, range=[n_rows - 0.5, -0.5], showgrid=False, zeroline=False,
                     tickmode="auto", nticks=min(n_rows, 13), constrain="domain", **kw)


def sym_range(*arrays: Any) -> float:
    """Half-width of a colour range centred on zero that covers every finite entry."""
    m = 0.0
    for a in arrays:
        x = np.asarray(a, dtype=np.float64)
        x = x[np.isfinite(x)]
        if x.size:
            m = max(m, float(np.max(np.abs(x))))
    return m if m > 0 else 1.0


def row_outline(row: int, n_cols: int, **kw: Any) -> go.Scatter:
    """A rectangle (as a scatter line, so frames can move it) around matrix row ``row``."""
    x0, x1, y0, y1 = -0.5, n_cols - 0.5, row - 0.5, row + 0.5
    return go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines",
                      line={"color": HIGHLIGHT, "width": 3}, hoverinfo="skip", showlegend=False,
                      name=f"row {row}", **kw)


def log_axis(*, si: bool = False, **kw: Any) -> dict[str, Any]:
    """Keyword arguments for ``fig.update_xaxes`` / ``update_yaxes``: a log axis whose every label is a
    whole number.

    Without a ``tickformat``, plotly labels the ticks between decades with their first digit only ("2",
    "5"), which reads as the value 2. With one, every tick shows its value: ``si=True`` gives 1k, 2k, 5k,
    1M (lengths, FLOPs, bytes), ``si=False`` plain numbers 0.02, 0.05, 0.1 (milliseconds, MiB, errors,
    where an SI suffix "m" would read as a unit).
    """
    return {"type": "log", "tickformat": "~s" if si else "~g", **kw}


def legend_rows(names: list[str], width_px: int = 600) -> int:
    """Rows a horizontal legend of ``names`` needs in a plot ``width_px`` wide (13 px font, swatch and gap
    about 50 px, about 7 px per character): an estimate on the safe side."""
    rows, used = 1, 0
    for name in names:
        w = 50 + 7 * len(name)
        if used and used + w > width_px:
            rows, used = rows + 1, 0
        used += w
    return rows


def legend_below(fig: go.Figure, *, axis_px: int = 56, width_px: int = 600) -> go.Figure:
    """Move the legend under the x-axis title, growing the figure and its bottom margin to fit it.

    A legend to the right takes its width from the plot, and long names are cut at the page's edge; below
    the plot it wraps into as many rows as it needs (:func:`legend_rows`).
    """
    names = [str(tr.name) for tr in fig.data if tr.showlegend is not False and tr.name]
    rows = legend_rows(names, width_px) if names else 0
    legend_px = 24 * rows + 8
    top = fig.layout.margin.t if fig.layout.margin.t is not None else 60
    height = (fig.layout.height or 460) + legend_px
    bottom = axis_px + legend_px
    plot_h = max(height - top - bottom, 120)
    fig.update_layout(height=height, margin={"b": bottom},
                      legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -axis_px / plot_h,
                              "yanchor": "top", "bgcolor": "rgba(255,255,255,0)"})
    return fig
