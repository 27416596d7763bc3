"""Plotly figures for the book: pure builders per chapter, the data they show, the static-site renderer.

Every builder takes arrays and returns a ``plotly.graph_objects.Figure``; nothing here changes global
state except :func:`use_static_renderer`. Builders are tested on their traces (a heatmap's ``z`` is the
matrix it claims to show), so a figure in the book is a checked statement, not a drawing.

Glossary (code -> text)
-----------------------
``scores``   φ(q_i)·φ(k_j), the unnormalized kernel matrix (N x N)
``weights``  the normalized attention matrix A (rows sum to 1)
``S``        Σ_{j≤t} φ(k_j) v_jᵀ, the state (d_phi x d_v)
``z``        Σ_{j≤t} φ(k_j), the normalizer (d_phi)

The package, by job (each explorer of :mod:`linattn_core.tools.widgets` has a ``*_twin`` builder here: the
same picture as a plotly figure whose own sliders and menus work on the static site):

- the house style (palette, template, axis and legend helpers) is :mod:`linattn_core.tools.style`, below
  this package and :mod:`linattn_core.tools.timing`, whose plots use it too;
- :mod:`~linattn_core.tools.viz.site`: the static-site renderer (:func:`use_static_renderer`,
  :func:`figure_html`) with its keyboard script;
- :mod:`~linattn_core.tools.viz.controls`: sliders, menus, frames and the layout of a twin;
- :mod:`~linattn_core.tools.viz.data`: the numbers the figures show, computed by the library;
- one module per chapter: :mod:`~linattn_core.tools.viz.softmax` (:func:`attention_heatmap`),
  :mod:`~linattn_core.tools.viz.causal` (kernel matrix, state, matrix vs state, chunk layout),
  :mod:`~linattn_core.tools.viz.feature_maps` (feature-map comparison, Performer error),
  :mod:`~linattn_core.tools.viz.tradeoffs` (cost, from the one cost model
  :mod:`linattn_core.tools.timing.cost`),
  :mod:`~linattn_core.tools.viz.beyond` (decay).

Every public name is re-exported here: ``from linattn_core.tools import viz; viz.attention_heatmap(...)``.
Imported during the book build (``LINATTN_BOOK_BUILD``), this package makes :func:`use_static_renderer`'s
renderer plotly's default: every chapter that shows a figure imports it (directly, or through
:mod:`~linattn_core.tools.widgets`) before the figure is shown.
"""

from __future__ import annotations

from ..style import HIGHLIGHT, MASK_GREY, OKABE_ITO, PALETTE, SIG_DIGITS, legend_below, log_axis, sig_round
from ..timing.cost import cost_curves as cost_model
from ..timing.cost import decode_memory as decode_memory_model
from .beyond import decay_figure, decay_twin
from .causal import (
    CHUNK_CATEGORIES,
    chunk_diagram,
    chunk_twin,
    kernel_matrix_figure,
    matrix_vs_state_figure,
    matrix_vs_state_twin,
    state_figure,
)
from .data import (
    PERFORMER_VARIANTS,
    chunk_layout,
    decay_data,
    feature_map_comparison_data,
    matrix_vs_state_data,
    performer_error_curves,
    resolve_feature_map,
    seeded_qkv,
)
from .feature_maps import feature_map_comparison, feature_map_twin, performer_error_figure, performer_twin
from .site import BOOK_RENDERER, figure_html, figure_nbytes, glue, is_book_build, use_static_renderer
from .softmax import attention_heatmap
from .tradeoffs import cost_figure, cost_twin

__all__ = [
    "BOOK_RENDERER",
    "CHUNK_CATEGORIES",
    "HIGHLIGHT",
    "MASK_GREY",
    "OKABE_ITO",
    "PALETTE",
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
    "glue",
    "is_book_build",
    "kernel_matrix_figure",
    "legend_below",
    "log_axis",
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

if is_book_build():  # the book build: every figure through the site-wide plotly.js, no CDN, nothing inlined
    use_static_renderer()
