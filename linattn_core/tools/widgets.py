"""Explorers: controls wired to the figure builders of :mod:`linattn_core.tools.viz`, nothing more.

Each explorer shows the right form for where it runs:

- in a live kernel (JupyterLab, Colab): an :class:`Explorer`, an ipywidgets container of labelled
  controls above a plotly figure drawn in an ``ipywidgets.Output``; moving a control calls a ``viz``
  builder and draws the new figure;
- during the book build (``LINATTN_BOOK_BUILD`` set) or with ``static=True``: the builder's *static twin*,
  one plotly figure whose own sliders and menus (frames, ``restyle``/``update`` of precomputed variants)
  work on a static web page with no kernel behind it.

All numbers come from ``viz`` (which calls the library); the callbacks here only pick a precomputed
result and redraw. The explorers the book calls, with no arguments:

======================================  ===========================================================
:func:`matrix_vs_state_explorer`        step t and feature map: kernel matrix row vs state S_t, z_t
:func:`feature_map_explorer`            a feature map's attention beside softmax's, denominators
:func:`performer_explorer`              random features m, orthogonal/iid, positive/trig: errors
:func:`cost_explorer`                   d, d_v: FLOPs, bytes, KV cache vs fixed state
:func:`chunk_explorer`                  chunk size: which entries a chunk computes, which the state
:func:`decay_explorer`                  decay γ: the causal weights fade away from the diagonal
======================================  ===========================================================
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from . import viz

__all__ = [
    "Explorer",
    "chunk_explorer",
    "cost_explorer",
    "decay_explorer",
    "feature_map_explorer",
    "matrix_vs_state_explorer",
    "performer_explorer",
]


def _want_static(static: bool | None) -> bool:
    """``static=None`` means: static during the book build, live otherwise."""
    return viz.is_book_build() if static is None else bool(static)


def _check_choice(name: str, value: Any, options: Sequence[Any], options_name: str) -> None:
    """The initial value of a control must be one of its options (before any computation)."""
    if value not in list(options):
        raise ValueError(f"{name}={value!r} must be one of {options_name}={list(options)}")


def _renderer() -> str:
    """plotly's renderer for a live explorer's figure: Colab's own there; elsewhere plotly's mimetype,
    which JupyterLab, Notebook 7, VS Code and Binder draw with the jupyterlab-plotly extension that is
    installed with plotly."""
    return "colab" if "google.colab" in sys.modules else "plotly_mimetype"


class Explorer(W.VBox):
    """A live explorer: an ipywidgets VBox of labelled controls above a figure that follows them.

    The figure is drawn into an :class:`ipywidgets.Output` as an ordinary plotly output, redrawn whole
    on every change, not into a plotly ``FigureWidget``. A FigureWidget is an anywidget whose browser
    side must load plotly's 5 MB bundle within anywidget's 2 s limit; where it does not (a loaded
    machine, a slow Binder) its model drops every message sent after its comm opened, and plotly sends a
    FigureWidget's traces and layout in such a message, so the figure comes up blank and never follows
    its controls. An Output and the plotly mimetype have no time limit: each redraw is one output
    message, rendered whenever the browser gets to it.

    Attributes
    ----------
    controls : dict[str, ipywidgets.Widget]
        The controls by name; setting ``controls[name].value`` redraws, as moving the control does.
    output : ipywidgets.Output
        Where the figure is drawn.
    last_figure : plotly.graph_objects.Figure
        What the builder returned for the current control values: the figure shown.
    """

    def __init__(self, controls: Mapping[str, W.ValueWidget], render: Callable[..., go.Figure], *,
                 description: str = "", extra: Sequence[W.Widget] = (), **kwargs: Any) -> None:
        self.controls = dict(controls)
        self._render = render
        self.output = W.Output()
        self.last_figure = render(**self.values)
        self._draw()
        for c in self.controls.values():
            c.observe(self._on_change, names="value")
        rows: list[W.Widget] = [W.HTML(f"<p>{html.escape(description)}</p>")] if description else []
        rows += [W.HBox([*extra, *self.controls.values()], layout=W.Layout(flex_flow="row wrap")),
                 self.output]
        super().__init__(children=rows, **kwargs)

    @property
    def values(self) -> dict[str, Any]:
        """The current value of every control, by name (the builder's keyword arguments)."""
        return {name: c.value for name, c in self.controls.items()}

    def _draw(self) -> None:
        # wait=True: the old figure stays until the new one arrives, so the page does not jump
        self.output.clear_output(wait=True)
        with self.output:
            self.last_figure.show(renderer=_renderer())

    def _on_change(self, _change: Any = None) -> None:
        self.last_figure = self._render(**self.values)
        self._draw()


def _style() -> dict:
    return {"description_width": "initial"}


# ----------------------------------------------------------------------------------------------------
# 1. matrix view vs state view
# ----------------------------------------------------------------------------------------------------
def matrix_vs_state_explorer(N: int = 12, d: int = 4, d_v: int = 4,
                             feature_maps: Sequence[Any] = ("elu+1", "relu", "softplus", "performer"),
                             seed: int = 0, static: bool | None = None) -> Explorer | go.Figure:
    """Step through causal linear attention: row t of the kernel matrix vs the state (S_t, z_t).

    A slider over the step t and a choice of feature map. Left: the causal kernel matrix φ(Q)φ(K)ᵀ with
    row t outlined and the future greyed; right: S_t and z_t; below: y_t from the normalized matrix row
    and from the state, with their max abs difference. Inputs are seeded standard normal.

    Parameters
    ----------
    N, d, d_v : int
        Sequence length, key/query dimension, value dimension.
    feature_maps : sequence of names or callables
        The choices offered ("performer" uses m = 4 d unstabilised random features).
    seed : int
        Seed of q, k, v (and of the Performer projection).
    static : bool or None
        None: static during the book build (``LINATTN_BOOK_BUILD``), live otherwise.

    Returns
    -------
    Explorer or plotly.graph_objects.Figure
        The live explorer in a kernel; the static twin (a figure with its own controls) during the book
        build or with ``static=True``.
    """
    q, k, v = viz.seeded_qkv(N, d, d_v, seed)
    datas = {}
    for fm in feature_maps:
        data = viz.matrix_vs_state_data(q, k, v, fm)
        datas[data["label"]] = data
    if _want_static(static):
        return viz.matrix_vs_state_twin(datas)
    labels = list(datas)
    controls = {
        "label": W.ToggleButtons(options=labels, value=labels[0], description="feature map φ:",
                                 style=_style()),
        "t": W.IntSlider(value=0, min=0, max=N - 1, description="step t:", continuous_update=True,
                         style=_style()),
    }
    play = W.Play(value=0, min=0, max=N - 1, interval=800, description="play the steps",
                  tooltip="play the steps")
    W.link((play, "value"), (controls["t"], "value"))
    return Explorer(controls, lambda label, t: viz.matrix_vs_state_figure(datas[label], t), extra=[play],
                    description="Move the step t: the outlined row of the matrix and the state S_t, z_t "
                                "give the same output y_t.")


# ----------------------------------------------------------------------------------------------------
# 2. feature maps against softmax
# ----------------------------------------------------------------------------------------------------
def feature_map_explorer(N: int = 16, d: int = 8, d_v: int = 8,
                         feature_maps: Sequence[Any] = ("elu+1", "relu", "softplus", "performer", "cosformer",
                                                        "identity"),
                         seed: int = 1, static: bool | None = None) -> Explorer | go.Figure:
    """Pick a feature map: its normalized attention beside softmax's for the same q, k, the difference,
    and the distribution of the denominators φ(q_i)·Σ_j φ(k_j) (the identity map has some ≤ 0).

    Parameters
    ----------
    N, d, d_v : int
        Number of tokens, key/query dimension, value dimension (non-causal attention).
    feature_maps : sequence of names or callables
    seed : int
        Seed of q, k, v and of the Performer projection.
    static : bool or None
        None: static during the book build, live otherwise.

    Returns
    -------
    Explorer or plotly.graph_objects.Figure
        The live explorer in a kernel; the static twin (a figure with its own controls) during the book
        build or with ``static=True``.
    """
    q, k, v = viz.seeded_qkv(N, d, d_v, seed)
    data = viz.feature_map_comparison_data(q, k, v, feature_maps, seed=seed)
    if _want_static(static):
        return viz.feature_map_twin(data)
    labels = list(data["maps"])
    controls = {"label": W.ToggleButtons(options=labels, value=labels[0], description="feature map φ:",
                                         style=_style())}
    return Explorer(controls, lambda label: viz.feature_map_comparison(data, label),
                    description="Choose a feature map and compare its attention with softmax's.")


# ----------------------------------------------------------------------------------------------------
# 3. Performer random features
# ----------------------------------------------------------------------------------------------------
def performer_explorer(d: int = 16, N: int = 48, ms: Sequence[int] = (4, 8, 16, 32, 64, 128, 256),
                       n_seeds: int = 10, seed: int = 0, static: bool | None = None) -> Explorer | go.Figure:
    """Number of random features m, orthogonal or iid projections, positive or trigonometric features:
    the kernel-estimate error and the attention-output error against softmax (log-log), the chosen
    setting marked, and its kernel estimates against the exact values.

    Parameters
    ----------
    d, N : int
        Key/query dimension and number of tokens.
    ms : sequence of int
        The feature counts m offered (errors are computed for each, for all four variants).
    n_seeds : int
        Projections drawn per (m, variant); the errors are their median.
    seed : int
    static : bool or None
        None: static during the book build, live otherwise.

    Returns
    -------
    Explorer or plotly.graph_objects.Figure
        The live explorer in a kernel; the static twin (a figure with its own controls) during the book
        build or with ``static=True``.
    """
    curves = viz.performer_error_curves(d=d, N=N, ms=ms, n_seeds=n_seeds, seed=seed)
    if _want_static(static):
        return viz.performer_twin(curves)
    m_opts = [int(m) for m in curves["ms"]]
    controls = {
        "m": W.SelectionSlider(options=m_opts, value=m_opts[len(m_opts) // 2],
                               description="random features m:",
                               style=_style()),
        "orthogonal": W.ToggleButtons(options=[("orthogonal", True), ("iid", False)], value=True,
                                      description="projection:", style=_style()),
        "kind": W.ToggleButtons(options=[("positive", "positive"), ("trigonometric", "trig")],
                                value="positive",
                                description="features:", style=_style()),
    }
    return Explorer(controls, lambda m, orthogonal, kind: viz.performer_error_figure(
        curves, m=m, kind=kind, orthogonal=orthogonal),
        description="Errors are medians over seeded draws of the random projection.")


# ----------------------------------------------------------------------------------------------------
# 4. cost
# ----------------------------------------------------------------------------------------------------
def cost_explorer(d: int = 64, d_v: int = 64, ds: Sequence[int] = (16, 32, 64, 128),
                  d_vs: Sequence[int] = (16, 32, 64, 128), itemsize: int = 4,
                  measured: Sequence[Mapping[str, Any]] | None = None,
                  static: bool | None = None) -> Explorer | go.Figure:
    """Quadratic vs linear attention as N grows (analytic FLOPs and bytes, log-log), measured times if
    ``measured`` (records with ``N``, ``method``, ``median_s``) is given, and the memory kept while
    decoding: a KV cache that grows with the context vs the fixed state. Controls: d and d_v.

    Parameters
    ----------
    d, d_v : int
        The initial key/query and value dimensions (must be among ``ds`` and ``d_vs``).
    ds, d_vs : sequence of int
        The values offered.
    itemsize : int
        Bytes per number (4: float32).
    measured : list of mappings, optional
        Timing records (``N``, ``method``, ``median_s``), drawn on their own log-log panel.
    static : bool or None
        None: static during the book build, live otherwise.

    Returns
    -------
    Explorer or plotly.graph_objects.Figure
        The live explorer in a kernel; the static twin (a figure with its own controls) during the book
        build or with ``static=True``.
    """
    _check_choice("d", d, ds, "ds")
    _check_choice("d_v", d_v, d_vs, "d_vs")
    if _want_static(static):
        return viz.cost_twin(ds=ds, d_vs=d_vs, d0=d, d_v0=d_v, itemsize=itemsize, measured=measured)
    controls = {
        "d": W.SelectionSlider(options=[int(x) for x in ds], value=d, description="key/query dim d:",
                               style=_style()),
        "d_v": W.ToggleButtons(options=[int(x) for x in d_vs], value=d_v, description="value dim d_v:",
                               style=_style()),
    }
    return Explorer(controls,
                    lambda d, d_v: viz.cost_figure(d=d, d_v=d_v, itemsize=itemsize, measured=measured),
                    description="Analytic counts for one head in float32 (φ = elu+1, so d_phi = d).")


# ----------------------------------------------------------------------------------------------------
# 5. chunkwise-parallel form
# ----------------------------------------------------------------------------------------------------
def chunk_explorer(N: int = 16, chunk_size: int = 4, chunk_sizes: Sequence[int] = (1, 2, 3, 4, 5, 8, 16),
                   static: bool | None = None) -> Explorer | go.Figure:
    """Chunk size → which entries of the causal N x N matrix a chunk computes with its masked product
    (diagonal blocks) and which reach its queries through the state carried from earlier chunks.

    Parameters
    ----------
    N : int
        Sequence length.
    chunk_size : int
        The initial chunk size (one of ``chunk_sizes``); sizes need not divide N.
    chunk_sizes : sequence of int
    static : bool or None
        None: static during the book build, live otherwise.

    Returns
    -------
    Explorer or plotly.graph_objects.Figure
        The live explorer in a kernel; the static twin (a figure with its own controls) during the book
        build or with ``static=True``.
    """
    _check_choice("chunk_size", chunk_size, chunk_sizes, "chunk_sizes")
    if _want_static(static):
        return viz.chunk_twin(N, chunk_sizes, c0=chunk_size)
    controls = {"chunk_size": W.SelectionSlider(options=[int(c) for c in chunk_sizes], value=chunk_size,
                                                description="chunk size C:", style=_style())}
    return Explorer(controls, lambda chunk_size: viz.chunk_diagram(N, chunk_size),
                    description="Chunk size 1 is the recurrent form; chunk size N is the quadratic form.")


# ----------------------------------------------------------------------------------------------------
# 6. decay (used by the chapter "beyond")
# ----------------------------------------------------------------------------------------------------
def decay_explorer(N: int = 24, d: int = 8, d_v: int = 4,
                   gammas: Sequence[float] = (1.0, 0.98, 0.95, 0.9, 0.8, 0.7, 0.5), gamma: float = 0.9,
                   feature_map: Any = "elu+1", seed: int = 0,
                   static: bool | None = None) -> Explorer | go.Figure:
    """A slider over a constant decay γ: the causal weights of decayed linear attention (the quadratic
    reference) narrow towards the diagonal as γ falls; the last query's weights are shown as bars.

    Parameters
    ----------
    N, d, d_v : int
    gammas : sequence of float
        The decays offered, each in (0, 1]; 1 is plain causal linear attention.
    gamma : float
        The initial decay (one of ``gammas``).
    feature_map : name or callable
    seed : int
    static : bool or None
        None: static during the book build, live otherwise.

    Returns
    -------
    Explorer or plotly.graph_objects.Figure
        The live explorer in a kernel; the static twin (a figure with its own controls) during the book
        build or with ``static=True``.
    """
    _check_choice("gamma", float(gamma), [float(g) for g in gammas], "gammas")
    q, k, v = viz.seeded_qkv(N, d, d_v, seed)
    data = viz.decay_data(q, k, v, gammas, feature_map=feature_map)
    if _want_static(static):
        return viz.decay_twin(data, g0=gamma)
    controls = {"gamma": W.SelectionSlider(options=data["gammas"], value=float(gamma), description="decay γ:",
                                           style=_style())}
    return Explorer(controls, lambda gamma: viz.decay_figure(data, gamma),
                    description="γ = 1 is plain causal linear attention; smaller γ forgets faster.")
