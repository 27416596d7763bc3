"""Figure builders: every trace shows exactly the numbers it claims to show.

Builders get arrays and must draw them unchanged (exact comparisons, float64 tolerance). Static twins
round to ``viz.SIG_DIGITS`` significant digits, so their frames are compared with ``viz.sig_round`` of
the expected values. Expected values are computed here independently (loops, the library's reference
functions), not read back from the module under test.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from _tolerances import assert_close

from linattn_core import LinearAttentionState, get_feature_map, kernel_attention, softmax_attention
from linattn_core.tools import style, viz


def arr(x) -> np.ndarray:
    """A trace attribute (nested lists with None for gaps, tuples or numpy) as floats, gaps as NaN."""
    a = np.asarray(x, dtype=object)
    return np.frompyfunc(lambda e: np.nan if e is None else float(e), 1, 1)(a).astype(np.float64)


def future(n: int) -> np.ndarray:
    """Boolean (n, n): True exactly where key j is after query i."""
    return np.array([[j > i for j in range(n)] for i in range(n)])


@pytest.fixture
def restore_renderer():
    before = pio.renderers.default
    yield
    pio.renderers.default = before


# --- the static-site renderer --------------------------------------------------------------------
def test_static_renderer_emits_aria_labelled_html_without_cdn(restore_renderer):
    W = np.random.default_rng(0).random((5, 5))
    fig = viz.attention_heatmap(W, alt='Weights "quoted" & <escaped>')
    name = viz.use_static_renderer()
    assert pio.renderers.default == name
    bundle = pio.renderers[name].to_mimebundle(fig.to_dict())
    out = bundle["text/html"]
    assert set(bundle) == {"text/html"}
    assert out.startswith('<figure class="linattn-figure" role="group" aria-label="')
    assert f'aria-label="{html.escape(fig.layout.meta["alt"], quote=True)}"' in out
    assert "cdn" not in out.lower() and "https://" not in out
    assert not re.search(r"<script[^>]*\bsrc=", out), "plotly.js must come from the site, not the figure"
    assert "Plotly.newPlot" in out and "MathJax" not in out
    assert len(out) < 50_000, "plotly.js itself must not be inlined"
    assert '"displaylogo": false' in out and '"responsive": true' in out


def test_static_renderer_does_not_autoplay_frames(restore_renderer):
    out = viz.figure_html(viz.chunk_twin(6, (1, 2, 3), c0=2))
    assert "Plotly.addFrames" in out
    assert "Plotly.animate('" not in out, "plotly's autoplay call (Plotly.animate('<id>', null)) is there"


def test_static_twins_are_keyboard_usable_and_plain_figures_stay_plain():
    twin = viz.figure_html(viz.chunk_twin(6, (1, 2, 3), c0=2))
    assert 'tabindex="0"' in twin and "aria-describedby=" in twin and 'aria-live="polite"' in twin
    hint = twin.split("<figcaption")[1].split("</figcaption>")[0]
    assert "ArrowRight" in twin and "← → move the slider" in hint and "menu" not in hint
    assert "cdn" not in twin.lower() and "https://" not in twin
    plain = viz.figure_html(viz.chunk_diagram(4, 2))
    assert "tabindex" not in plain and "ArrowRight" not in plain


def test_importing_the_figures_during_the_book_build_installs_the_renderer():
    # the figures' package installs it; the library itself never imports up into the tools tier
    code = ("import sys, linattn_core; print('linattn_core.tools' in sys.modules);"
            " import linattn_core.tools.viz, plotly.io as pio; print(pio.renderers.default)")
    env = {**os.environ, "LINATTN_BOOK_BUILD": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", viz.BOOK_RENDERER]


def test_builders_take_torch_tensors():
    torch = pytest.importorskip("torch")
    W = torch.softmax(torch.randn(4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64), -1)
    fig = viz.attention_heatmap(W)
    assert_close(arr(fig.data[0].z), W.numpy(), what="heatmap of a tensor")


def test_alt_text_falls_back_to_the_title():
    fig = go.Figure(go.Scatter(x=[0, 1], y=[1, 2]), layout={"title": {"text": "A line"}})
    assert 'aria-label="A line"' in viz.figure_html(fig)


def test_build_flag_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("LINATTN_BOOK_BUILD", "1")
    assert viz.is_book_build()
    monkeypatch.setenv("LINATTN_BOOK_BUILD", "0")
    assert not viz.is_book_build()
    monkeypatch.delenv("LINATTN_BOOK_BUILD")
    assert not viz.is_book_build()


def test_sig_round_keeps_the_requested_significant_digits():
    x = np.array([123456.0, -0.00123456, 0.0, np.nan, 1.0])
    out = viz.sig_round(x, 3)
    np.testing.assert_array_equal(out[[0, 1, 2, 4]], [123000.0, -0.00123, 0.0, 1.0])
    assert np.isnan(out[3])


# --- matrices ------------------------------------------------------------------------------------
def test_attention_heatmap_shows_the_matrix_and_masks_exactly_the_future():
    W = np.random.default_rng(1).random((6, 6))
    plain = viz.attention_heatmap(W)
    assert_close(arr(plain.data[0].z), W, what="heatmap z")
    assert plain.data[0].colorscale[0][1] == "#440154"  # viridis
    assert plain.layout.xaxis.title.text == "key position j"
    assert plain.layout.yaxis.title.text == "query position i"
    causal = viz.attention_heatmap(W, causal=True)
    mask, data = arr(causal.data[0].z), arr(causal.data[1].z)
    np.testing.assert_array_equal(np.isnan(data), future(6))
    np.testing.assert_array_equal(~np.isnan(mask), future(6))
    assert_close(data[~future(6)], W[~future(6)], what="past entries")
    assert plain.layout.meta["alt"] and causal.layout.meta["alt"]


def test_builders_reject_bad_shapes_naming_the_argument():
    with pytest.raises(ValueError, match=r"weights.*shape"):
        viz.attention_heatmap(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"scores.*square"):
        viz.kernel_matrix_figure(np.zeros((3, 4)), causal=True)
    with pytest.raises(ValueError, match="highlight_row"):
        viz.kernel_matrix_figure(np.zeros((3, 3)), highlight_row=3)
    with pytest.raises(ValueError, match="z must have d_phi"):
        viz.state_figure(np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(TypeError, match="weights"):
        viz.attention_heatmap(np.array([["a", "b"]]))


def test_kernel_matrix_outlines_the_chosen_row_and_uses_a_diverging_scale_for_signed_scores():
    rng = np.random.default_rng(2)
    M = rng.standard_normal((5, 5))
    fig = viz.kernel_matrix_figure(M, highlight_row=3)
    _, heat, outline = fig.data
    assert_close(arr(heat.z)[~future(5)], M[~future(5)], what="scores")
    assert heat.zmin == -heat.zmax and heat.colorscale[0][1] != "#440154"  # RdBu, centred on 0
    assert min(outline.y) == 2.5 and max(outline.y) == 3.5
    positive = viz.kernel_matrix_figure(np.abs(M), causal=False)
    assert positive.data[0].zmin == 0 and positive.data[0].colorscale[0][1] == "#440154"


def test_state_figure_shows_S_and_z():
    rng = np.random.default_rng(3)
    S, z = rng.standard_normal((6, 3)), rng.random(6)
    fig = viz.state_figure(S, z, t=2)
    heat, bars = fig.data
    assert_close(arr(heat.z), S, what="S heatmap")
    assert_close(arr(bars.x), z, what="z bars")
    assert heat.zmid == 0 and heat.zmin == -heat.zmax == -np.abs(S).max()
    signed = viz.state_figure(S, -z)  # the identity map's z can be negative: the bar axis must show it
    assert signed.layout.xaxis2.range[0] <= -z.max()


# --- matrix view vs state view -------------------------------------------------------------------
@pytest.fixture(scope="module")
def mvs():
    q, k, v = viz.seeded_qkv(7, 3, 2, seed=5)
    return q, k, v, viz.matrix_vs_state_data(q, k, v, "elu+1")


def test_matrix_vs_state_data_matches_a_plain_loop(mvs):
    q, k, v, data = mvs
    phi = get_feature_map("elu+1")
    fk, fq = phi(k), phi(q)
    for t in range(len(q)):
        S = sum(np.outer(fk[j], v[j]) for j in range(t + 1))
        z = fk[: t + 1].sum(0)
        assert_close(data["S"][t], S, what=f"S after {t + 1} tokens")
        assert_close(data["z"][t], z, what=f"z after {t + 1} tokens")
        assert_close(data["y_state"][t], fq[t] @ S / (fq[t] @ z), what=f"y_{t}")
    assert_close(data["y_matrix"], data["y_state"], what="matrix vs state")
    assert_close(data["scores"], fq @ fk.T, what="scores")


@pytest.mark.parametrize("name", ["identity", "cosformer", "performer"])
def test_matrix_vs_state_data_streams_every_map(name):
    q, k, v = viz.seeded_qkv(6, 3, 2, seed=1)
    q, k = q + 1.0, k + 1.0  # keep the identity map's denominators away from zero
    data = viz.matrix_vs_state_data(q, k, v, name)
    assert_close(data["y_matrix"], data["y_state"], what=f"{name}: matrix vs state")


def test_matrix_vs_state_figure_draws_step_t(mvs):
    *_, data = mvs
    t = 4
    fig = viz.matrix_vs_state_figure(data, t)
    _, scores, outline, S, z, y_m, y_s = fig.data
    np.testing.assert_array_equal(np.isnan(arr(scores.z)), future(7))
    assert_close(arr(S.z), data["S"][t], what="S_t")
    assert_close(arr(z.x), data["z"][t], what="z_t")
    assert_close(arr(y_m.y), data["y_matrix"][t], what="y from the matrix")
    assert_close(arr(y_s.y), data["y_state"][t], what="y from the state")
    assert f"{data['max_diff'][t]:.1e}" in y_s.name
    assert min(outline.y) == t - 0.5
    with pytest.raises(ValueError, match="t must be in"):
        viz.matrix_vs_state_figure(data, 7)


def test_matrix_vs_state_twin_frames_hold_the_streaming_state():
    N, d, d_v = 6, 3, 2
    q, k, v = viz.seeded_qkv(N, d, d_v, seed=7)
    maps = ["elu+1", "relu"]
    datas = {m: viz.matrix_vs_state_data(q, k, v, m) for m in maps}
    fig = viz.matrix_vs_state_twin(datas)
    assert [f.name for f in fig.frames] == [f"t={t}" for t in range(N)]
    assert [s.label for s in fig.layout.sliders[0].steps] == [str(t) for t in range(N)]
    per = 7
    for g, m in enumerate(maps):
        state = LinearAttentionState(d, d_v, m)
        for t in range(N):
            state.update(k[t], v[t])
            frame = fig.frames[t]
            pos = list(frame.traces).index(g * per + 3)
            assert_close(arr(frame.data[pos].z), viz.sig_round(state.S), what=f"{m}: S in frame {t}")
            pos = list(frame.traces).index(g * per + 4)
            assert_close(arr(frame.data[pos].x), viz.sig_round(state.z), what=f"{m}: z in frame {t}")
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == maps
    for g, b in enumerate(buttons):
        assert b.args[0]["visible"] == [i // per == g for i in range(per * len(maps))]
    assert viz.figure_nbytes(fig) < 300_000


# --- feature maps vs softmax ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def fmc():
    q, k, v = viz.seeded_qkv(9, 4, 3, seed=11)
    return q, k, v, viz.feature_map_comparison_data(q, k, v, ("identity", "elu+1", "performer"))


def test_feature_map_comparison_data_against_softmax(fmc):
    q, k, v, data = fmc
    _, w_s = softmax_attention(q, k, v, return_weights=True)
    assert_close(data["softmax"]["weights"], w_s, what="softmax weights")
    ident = data["maps"]["identity"]
    den = q @ k.sum(0)
    assert ident["n_nonpositive"] == int((den <= 0).sum()) > 0
    assert_close(ident["denominators"], den, what="identity denominators")
    for label in ("elu+1", "performer (m=16)"):
        m = data["maps"][label]
        assert m["n_nonpositive"] == 0
        assert_close(m["weights"].sum(1), np.ones(9), what=f"{label} rows sum to 1")
        assert_close(m["diff"], m["weights"] - w_s, what=f"{label} difference")


def test_feature_map_comparison_figure_and_twin(fmc):
    *_, data = fmc
    fig = viz.feature_map_comparison(data, "elu+1")
    soft, heat, diff, hist = fig.data
    m = data["maps"]["elu+1"]
    assert_close(arr(soft.z), data["softmax"]["weights"], what="softmax panel")
    assert_close(arr(heat.z), m["weights"], what="map panel")
    assert_close(arr(diff.z), m["diff"], what="difference panel")
    assert_close(arr(hist.x), m["denominators"], what="histogram")
    assert diff.zmid == 0
    twin = viz.feature_map_twin(data)
    buttons = twin.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == list(data["maps"])
    for g, (b, label) in enumerate(zip(buttons, data["maps"], strict=True)):
        assert b.args[0]["visible"] == [True] + [(i // 3) == g for i in range(3 * len(buttons))]
        assert b.args[1]["title.text"].startswith(label)
        assert_close(arr(twin.data[1 + 3 * g].z), viz.sig_round(data["maps"][label]["weights"]),
                     what=f"twin panel of {label}")
    assert "≤ 0" in buttons[0].args[1]["title.text"]  # the identity map's non-positive denominators


# --- Performer -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def curves():
    return viz.performer_error_curves(d=8, N=16, ms=(4, 64), n_seeds=3, n_pairs=20)


def test_performer_errors_shrink_with_more_features(curves):
    assert set(curves["variants"]) == set(viz.PERFORMER_VARIANTS)
    for key, var in curves["variants"].items():
        assert np.all(np.isfinite(var["kernel"])) and np.all(np.isfinite(var["output"])), key
        assert var["kernel"][-1] < var["kernel"][0], key


def test_performer_kernel_error_is_recomputable(curves):
    q, k, _ = viz.seeded_qkv(16, 8, 8, 0)
    q, k = 0.75 * q, 0.75 * k
    K = np.exp(q @ k.T / np.sqrt(8))
    errs = []
    for s in range(3):
        phi = get_feature_map("performer", d=8, num_features=64, seed=s, orthogonal=True, stabilize=False)
        errs.append(np.mean(np.abs(phi(q) @ phi(k).T - K) / K))
    assert_close(curves["variants"][("positive", True)]["kernel"][1], np.median(errs), what="kernel error")


def test_performer_output_error_is_that_of_kernel_attention(curves):
    q, k, v = viz.seeded_qkv(16, 8, 8, 0)
    q, k = 0.75 * q, 0.75 * k
    y = softmax_attention(q, k, v)
    errs = []
    for s in range(3):
        phi = get_feature_map("performer", d=8, num_features=4, seed=s, orthogonal=False, stabilize=False,
                              kind="trig")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # trigonometric features: denominators <= 0
            y_hat = kernel_attention(q, k, v, phi)
        errs.append(np.linalg.norm(y_hat - y) / np.linalg.norm(y))
    assert_close(curves["variants"][("trig", False)]["output"][0], np.median(errs), what="output error")


def test_performer_figure_and_twin(curves):
    fig = viz.performer_error_figure(curves, m=64, kind="trig", orthogonal=False)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    var = curves["variants"][("trig", False)]
    marker = fig.data[-3]
    assert list(marker.x) == [64]
    assert_close(arr(marker.y), var["kernel"][1:], what="marker")
    assert_close(arr(fig.data[-1].y), var["pairs"][1], what="scatter of estimates")
    with pytest.raises(ValueError, match="m must be one of"):
        viz.performer_error_figure(curves, m=5)
    twin = viz.performer_twin(curves)
    assert [f.name for f in twin.frames] == ["m=4", "m=64"]
    assert len(twin.layout.updatemenus[0].buttons) == 4
    g = viz.PERFORMER_VARIANTS.index(("trig", False))
    frame = twin.frames[1]
    assert_close(arr(frame.data[3 * g].y), viz.sig_round(var["kernel"][1:]), what="twin marker")


# --- cost ----------------------------------------------------------------------------------------
def test_cost_model_is_the_timing_model():
    # the explorer's counts are the one cost model's, written out here from its formulas
    N = np.array([10.0, 100.0])
    c = viz.cost_model(N, d=2, d_v=3, d_phi=5, itemsize=4)
    assert_close(c["flops_quadratic"], 2 * N**2 * (2 + 3), what="softmax FLOPs")
    assert_close(c["flops_linear"], 4 * N * 5 * 3, what="linear FLOPs")
    assert_close(c["bytes_quadratic"], 4 * (N * (2 * 2 + 2 * 3) + 4 * N**2), what="softmax bytes")
    assert_close(c["bytes_linear"], 4 * (N * (2 * 2 + 2 * 3) + 4 * N * 5), what="linear bytes")
    x = float(c["crossover_N"])
    assert_close(x, 2 * 5 * 3 / (2 + 3), what="crossover 2 d_phi d_v / (d + d_v)")
    at = viz.cost_model(np.array([x]), d=2, d_v=3, d_phi=5)
    assert_close(at["flops_quadratic"], at["flops_linear"], what="equal FLOPs at the crossover")
    m = viz.decode_memory_model(np.array([1.0, 10.0, 100.0]), d=4, d_v=4, itemsize=2)
    np.testing.assert_array_equal(m["kv_cache"], [16.0, 160.0, 1600.0])
    np.testing.assert_array_equal(m["state"], [40.0, 40.0, 40.0])
    with pytest.raises(ValueError, match="d_v must be a positive integer, got 0"):
        viz.cost_model(10, d=2, d_v=0)


def test_cost_figure_draws_the_model_and_the_measurements():
    N = np.array([16.0, 256.0, 4096.0])
    measured = [{"N": 64, "method": "cumsum", "median_s": 1e-3},
                {"N": 16, "method": "cumsum", "median_s": 4e-4}]
    fig = viz.cost_figure(d=8, d_v=4, N=N, measured=measured)
    c = viz.cost_model(N, d=8, d_v=4)
    by_name = {(t.name, t.xaxis): t for t in fig.data}
    assert_close(arr(by_name[("softmax (N×N scores)", "x")].y), c["flops_quadratic"], what="flops")
    assert_close(arr(by_name[("linear (state S, z)", "x2")].y), c["bytes_linear"], what="bytes")
    cross = by_name[("equal FLOPs", "x")]
    assert_close(arr(cross.x), [float(c["crossover_N"])], what="crossover marker")
    meas = by_name[("measured: cumsum", "x4")]
    assert list(meas.x) == [16.0, 64.0] and list(meas.y) == [4e-4, 1e-3]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    with pytest.raises(ValueError, match=r"measured\[0\]"):
        viz.cost_figure(measured=[{"N": 3}])


# --- chunks --------------------------------------------------------------------------------------
@pytest.mark.parametrize("N,C", [(1, 1), (7, 3), (8, 4), (5, 8), (6, 1), (6, 6)])
def test_chunk_layout_against_the_definition(N, C):
    L = viz.chunk_layout(N, C)
    for i in range(N):
        for j in range(N):
            want = 0 if j > i else (1 if i // C == j // C else 2)
            assert L[i, j] == want, (i, j)


def test_chunk_twin_has_one_correct_frame_per_size():
    sizes = (1, 2, 3, 6)
    fig = viz.chunk_twin(6, sizes, c0=2)
    assert [f.name for f in fig.frames] == [f"C={c}" for c in sizes]
    for f, c in zip(fig.frames, sizes, strict=True):
        np.testing.assert_array_equal(np.array(f.data[0].z), viz.chunk_layout(6, c))
        assert f"C = {c}" in f.layout.title.text
    assert fig.layout.sliders[0].active == 1
    with pytest.raises(ValueError, match="chunk_size"):
        viz.chunk_layout(4, 0)


# --- decay ---------------------------------------------------------------------------------------
def test_decay_weights_and_twin_frames():
    N = 6
    q, k, v = viz.seeded_qkv(N, 3, 2, seed=4)
    data = viz.decay_data(q, k, v, (1.0, 0.8, 0.5), recent=2)
    phi = get_feature_map("elu+1")
    scores = phi(q) @ phi(k).T
    for a, g in enumerate(data["gammas"]):
        raw = np.array([[scores[i, j] * g ** (i - j) if j <= i else 0.0 for j in range(N)] for i in range(N)])
        assert_close(data["weights"][a], raw / raw.sum(1, keepdims=True), what=f"weights, γ = {g}")
        assert_close(data["recent_mass"][a], data["weights"][a][-1, -2:].sum(), what="recent mass")
    fig = viz.decay_figure(data, 0.8)
    np.testing.assert_array_equal(np.isnan(arr(fig.data[1].z)), future(N))
    assert_close(arr(fig.data[3].y), data["weights"][1][-1], what="last row bars")
    twin = viz.decay_twin(data, g0=0.8)
    assert [f.name for f in twin.frames] == ["γ=1", "γ=0.8", "γ=0.5"]
    for a, f in enumerate(twin.frames):
        assert_close(arr(f.data[2].y), viz.sig_round(data["weights"][a][-1]), what=f"frame {f.name}")
    with pytest.raises(ValueError, match="gammas"):
        viz.decay_data(q, k, v, (1.5,))


# --- conventions ---------------------------------------------------------------------------------
def test_every_figure_has_alt_text_and_latex_free_titles(mvs, fmc, curves):
    *_, data = mvs
    figs = [viz.attention_heatmap(np.eye(3)), viz.kernel_matrix_figure(np.eye(3)),
            viz.state_figure(np.eye(3), np.ones(3)), viz.matrix_vs_state_figure(data, 0),
            viz.feature_map_comparison(fmc[-1]), viz.performer_error_figure(curves), viz.cost_figure(),
            viz.chunk_diagram(), viz.decay_figure(viz.decay_data(*viz.seeded_qkv(5, 2, 2), (0.9,)))]
    for fig in figs:
        assert len(fig.layout.meta["alt"]) > 20
        texts = [fig.layout.title.text or ""] + [a.text for a in fig.layout.annotations]
        assert not any("$" in t or "\\" in t for t in texts), texts


def _contrast_on_white(hex_colour: str) -> float:
    """WCAG contrast ratio of a colour against white."""
    rgb = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    luminance = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return 1.05 / (luminance + 0.05)


def test_series_palette_is_visible_on_white():
    # thin lines need a contrast of 3:1 (WCAG, graphical objects); Okabe-Ito's yellow has 1.3
    assert len(set(viz.PALETTE)) == len(viz.PALETTE) >= 7
    assert min(_contrast_on_white(c) for c in viz.PALETTE) >= 3.0
    assert _contrast_on_white("#F0E442") < 3.0  # the check can fail


def test_log_axes_label_every_tick_with_its_value():
    fig = viz.cost_figure(measured=[{"N": 64, "method": "cumsum", "median_s": 1e-3},
                                    {"N": 128, "method": "cumsum", "median_s": 2e-3}])
    axes = [fig.layout[k] for k in fig.layout if k.startswith(("xaxis", "yaxis"))]
    logs = [ax for ax in axes if ax.type == "log"]
    assert len(logs) == 8 and all(ax.tickformat in ("~s", "~g") for ax in logs)
    assert viz.log_axis(si=True) == {"type": "log", "tickformat": "~s"}


def test_legend_below_makes_room_for_every_row():
    fig = go.Figure([go.Scatter(x=[1, 2], y=[1, 2], name=f"a long method name number {i} (causal)")
                     for i in range(7)])
    fig.update_layout(height=400)
    rows = style.legend_rows([tr.name for tr in fig.data])
    assert rows >= 2
    viz.legend_below(fig)
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.y < 0
    assert fig.layout.margin.b >= 56 + 24 * rows and fig.layout.height >= 400 + 24 * rows
