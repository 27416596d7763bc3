"""Explorers: every control changes what it drives, live (ipywidgets) and static (plotly twin).

No browser here (tests/book/browser/ drives Chromium): the live explorers are driven from Python by setting
``control.value``, as a reader's click does through the kernel, and the static twins are checked on their
frames and menus, which is all the website's plotly.js replays.
"""

from __future__ import annotations

import json
import sys

import ipywidgets
import numpy as np
import plotly.graph_objects as go
import pytest
from _tolerances import assert_close

from linattn_core import LinearAttentionState
from linattn_core.tools import viz, widgets

# Small versions of the five explorers (the book calls them with no arguments: see the budget test).
SMALL = {
    "matrix_vs_state": lambda static: widgets.matrix_vs_state_explorer(
        N=5, d=3, d_v=2, feature_maps=("elu+1", "performer"), static=static),
    "feature_map": lambda static: widgets.feature_map_explorer(
        N=6, d=4, d_v=3, feature_maps=("identity", "relu", "cosformer"), static=static),
    "performer": lambda static: widgets.performer_explorer(d=4, N=8, ms=(2, 8, 32), n_seeds=2, static=static),
    "cost": lambda static: widgets.cost_explorer(
        d=32, d_v=16, ds=(16, 32), d_vs=(16, 64), static=static,
        measured=[{"N": 128, "method": "chunked", "median_s": 2e-4}]),
    "chunk": lambda static: widgets.chunk_explorer(N=6, chunk_size=2, chunk_sizes=(1, 2, 4), static=static),
    "decay": lambda static: widgets.decay_explorer(N=6, d=3, d_v=2, gammas=(1.0, 0.5), gamma=0.5,
                                                   static=static),
}


def data_json(fig) -> list:
    """The traces as plain JSON, without plotly's per-object ``uid``."""
    traces = [{k: val for k, val in t.to_plotly_json().items() if k != "uid"} for t in fig.data]
    return json.loads(json.dumps(traces, default=str))


def floats(x) -> np.ndarray:
    a = np.asarray(x, dtype=object)
    return np.frompyfunc(lambda e: np.nan if e is None else float(e), 1, 1)(a).astype(np.float64)


# --- which form -----------------------------------------------------------------------------------
def test_book_build_gets_the_static_twin_and_a_kernel_gets_a_widget(monkeypatch):
    monkeypatch.setenv("LINATTN_BOOK_BUILD", "1")
    assert isinstance(SMALL["chunk"](None), go.Figure)
    monkeypatch.delenv("LINATTN_BOOK_BUILD")
    live = SMALL["chunk"](None)
    assert isinstance(live, widgets.Explorer) and isinstance(live, ipywidgets.VBox)
    assert isinstance(SMALL["chunk"](True), go.Figure)


# --- static twins: no control may do nothing -------------------------------------------------------
@pytest.mark.parametrize("name", list(SMALL))
def test_static_twin_controls_all_change_the_figure(name):
    fig = SMALL[name](True)
    assert fig.layout.sliders or fig.layout.updatemenus, "a static twin needs a control"
    names = {f.name for f in fig.frames}
    assert not any("colorbar" in json.dumps(f.to_plotly_json()) for f in fig.frames), \
        "a frame must not carry a colour bar (plotly.js would move the placed one)"
    for slider in fig.layout.sliders:
        targets = [step.args[0][0] for step in slider.steps]
        assert len(set(targets)) == len(targets) and set(targets) <= names, "one frame per slider value"
        frames = {f.name: json.dumps(data_json(f)) for f in fig.frames}
        assert len({frames[t] for t in targets}) == len(targets), "two slider values show the same frame"
        assert slider.currentvalue.prefix, "the slider needs a visible label"
    for menu in fig.layout.updatemenus:
        states = [json.dumps(b.args, sort_keys=True) for b in menu.buttons]
        assert len(set(states)) == len(states) >= 2, "two menu entries do the same thing"
        for b in menu.buttons:
            vis = b.args[0]["visible"]
            assert len(vis) == len(fig.data) and any(vis), "a menu entry must show something"
        assert any(a.name == "control-label" for a in fig.layout.annotations), "menus need a label"


@pytest.mark.parametrize("name", [n for n in SMALL if n != "feature_map"])
def test_static_twin_opens_on_the_frame_its_slider_shows(name):
    fig = SMALL[name](True)
    slider = fig.layout.sliders[0]
    frame = next(f for f in fig.frames if f.name == slider.steps[slider.active].args[0][0])
    for idx, tr in zip(frame.traces, frame.data, strict=True):
        shown = fig.data[idx].to_plotly_json()
        for key, val in tr.to_plotly_json().items():
            assert json.dumps(shown.get(key), default=list) == json.dumps(val, default=list), (idx, key)


def test_matrix_vs_state_twin_frames_match_the_streaming_state():
    fig = SMALL["matrix_vs_state"](True)
    _, k, v = viz.seeded_qkv(5, 3, 2, 0)
    state = LinearAttentionState(3, 2, "elu+1")
    for t in range(5):
        state.update(k[t], v[t])
        frame = fig.frames[t]
        S = frame.data[list(frame.traces).index(3)]  # group 0 (elu+1), trace 3 = S_t
        assert_close(floats(S.z), viz.sig_round(state.S), what=f"S in frame {t}")


@pytest.mark.parametrize("name", list(SMALL))
def test_static_twins_are_small(name):
    assert viz.figure_nbytes(SMALL[name](True)) < 300_000


@pytest.mark.slow
def test_default_static_twins_fit_the_page_budget():
    """What the book shows: each explorer with no arguments, under 300 KB of JSON."""
    for make in (widgets.matrix_vs_state_explorer, widgets.feature_map_explorer, widgets.performer_explorer,
                 widgets.cost_explorer, widgets.chunk_explorer, widgets.decay_explorer):
        fig = make(static=True)
        size = viz.figure_nbytes(fig)
        assert size < 300_000, f"{make.__name__}: {size} bytes"
        assert fig.layout.meta["alt"]


# --- live explorers: setting each control's value redraws -----------------------------------------
@pytest.fixture
def shown(monkeypatch):
    """Every figure a live explorer draws, with the renderer it asked for (no kernel here to render it)."""
    calls = []
    monkeypatch.setattr(go.Figure, "show", lambda fig, renderer=None: calls.append((fig, renderer)))
    return calls


@pytest.mark.parametrize("name", list(SMALL))
def test_every_live_control_updates_the_figure(name, shown):
    exp = SMALL[name](False)
    assert isinstance(exp.output, ipywidgets.Output) and exp.output in exp.children
    assert exp.controls, "an explorer needs controls"
    assert [f for f, _ in shown] == [exp.last_figure], "the first figure is drawn once, at construction"
    for key, control in exp.controls.items():
        assert control.description, f"control {key} needs a label"
        options = [o[1] if isinstance(o, tuple) else o for o in getattr(control, "options", ())] or \
            list(range(control.min, control.max + 1))
        other = next(o for o in options if o != control.value)
        before = data_json(exp.last_figure)
        n_drawn = len(shown)
        control.value = other
        assert data_json(exp.last_figure) != before, f"{name}: moving {key} did not change the figure"
        assert len(shown) == n_drawn + 1 and shown[-1][0] is exp.last_figure, \
            f"{name}: moving {key} must draw the builder's new figure, once"


def test_live_figures_are_plain_plotly_outputs_not_figure_widgets(shown, monkeypatch):
    """The race-free path: a whole figure per redraw through plotly's mimetype (Colab: its renderer),
    never a FigureWidget, whose browser model drops messages when plotly's bundle loads slowly."""
    exp = SMALL["chunk"](False)
    assert not any(isinstance(w, go.FigureWidget) for w in exp.children)
    assert all(type(f) is go.Figure for f, _ in shown)
    assert shown[-1][1] == "plotly_mimetype"
    monkeypatch.setitem(sys.modules, "google.colab", object())
    exp.controls["chunk_size"].value = 4
    assert shown[-1][1] == "colab"


def test_live_matrix_vs_state_shows_the_state_after_t_plus_one_tokens(shown):
    exp = SMALL["matrix_vs_state"](False)
    _, k, v = viz.seeded_qkv(5, 3, 2, 0)
    exp.controls["t"].value = 3
    state = LinearAttentionState(3, 2, "elu+1")
    for t in range(4):
        state.update(k[t], v[t])
    assert_close(floats(shown[-1][0].data[3].z), state.S, what="S_3 in the widget")
    exp.controls["label"].value = "performer (m=12)"
    assert floats(shown[-1][0].data[3].z).shape == (12, 2)


def test_live_chunk_explorer_draws_the_layout(shown):
    exp = SMALL["chunk"](False)
    exp.controls["chunk_size"].value = 4
    np.testing.assert_array_equal(floats(shown[-1][0].data[0].z), viz.chunk_layout(6, 4))
    assert shown[-1][0] is exp.last_figure


@pytest.mark.parametrize("static", [True, False])
def test_an_initial_value_outside_the_options_is_a_clear_error(static):
    with pytest.raises(ValueError, match=r"chunk_size=7 must be one of chunk_sizes"):
        widgets.chunk_explorer(chunk_size=7, static=static)
    with pytest.raises(ValueError, match=r"d_v=8 must be one of d_vs"):
        widgets.cost_explorer(d_v=8, static=static)
    with pytest.raises(ValueError, match=r"gamma=0.3 must be one of gammas"):
        widgets.decay_explorer(gamma=0.3, static=static)
    with pytest.raises(ValueError, match="N must be a positive integer"):
        widgets.matrix_vs_state_explorer(N=0, static=static)
