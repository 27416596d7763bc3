"""Controls that work on the static site: plotly sliders (frames) and menus (restyle / update).

A static twin of an explorer carries its own controls: a slider steps through precomputed frames, a
menu switches which traces are visible. :func:`arrange` lays out title, menu, plot, legend and slider
in fixed pixel bands, so that nothing overlaps at any width.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

_ANIMATE_OPTS = {"mode": "immediate", "frame": {"duration": 0, "redraw": True}, "transition": {"duration": 0}}


def frame_slider(labels: Sequence[Any], frame_names: Sequence[str], *, prefix: str, active: int = 0,
                 y: float = -0.08, x: float = 0.0, length: float = 1.0) -> dict:
    """A plotly slider whose step k shows frame ``frame_names[k]`` (works with no kernel)."""
    steps = [{"label": str(lab), "method": "animate", "args": [[name], _ANIMATE_OPTS]}
             for lab, name in zip(labels, frame_names, strict=True)]
    return {"active": active, "steps": steps, "x": x, "len": length, "y": y, "yanchor": "top",
            "xanchor": "left", "currentvalue": {"prefix": prefix, "visible": True, "xanchor": "left"},
            "pad": {"t": 30, "b": 10}, "transition": {"duration": 0}}


def menu(labels: Sequence[str], args: Sequence[list], *, method: str = "restyle", active: int = 0,
         label: str = "", buttons: bool = False) -> dict:
    """A plotly dropdown (or a row of buttons); option k calls ``Plotly.<method>(*args[k])``.

    Placed top-left by :func:`arrange`; ``label`` is drawn to its left (plotly menus have no label).
    """
    items = [{"label": lab, "method": method, "args": a} for lab, a in zip(labels, args, strict=True)]
    return {"type": "buttons" if buttons else "dropdown", "buttons": items, "active": active, "x": 0.0,
            "y": 1.1, "xanchor": "left", "yanchor": "top", "showactive": True,
            "direction": "right" if buttons else "down", "name": label,
            "pad": {"l": 8 + round(7.2 * len(label)) if label else 0, "t": 0, "r": 0, "b": 0},
            "bgcolor": "#f5f5f5", "bordercolor": "#999", "font": {"size": 13}}


def control_label(fig: go.Figure, text: str) -> None:
    """A text label left of the top menu (positioned by :func:`arrange`)."""
    fig.add_annotation(text=text, x=0.0, y=1.1, xref="paper", yref="paper", xanchor="left", yanchor="top",
                       showarrow=False, name="control-label", font={"size": 13})


def arrange(fig: go.Figure, *, height: int, legend_rows: int = 0, axis_px: int = 58) -> go.Figure:
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


def frames_for(fig: go.Figure, names: Sequence[str], traces: Sequence[int],
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


def visible_groups(groups: Sequence[int], n_shared: int, chosen: int) -> list[bool]:
    """``visible`` per trace: shared traces always, group traces only for the chosen group."""
    return [True] * n_shared + [g == chosen for g in groups]
