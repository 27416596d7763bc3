"""The training chapter's figure builders (linattn_core.tools.viz.training), checked on their traces."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close

from linattn_core.lm.compare import Seeds, contrast
from linattn_core.tools.viz import training as vt


def run(seed, losses, steps=(0, 250, 500)):
    return {"config": {"seed": seed}, "final_val_loss": losses[-1],
            "curves": {"val_step": list(steps), "val_loss": list(losses)}}


def test_every_layer_has_its_own_colour_and_pairs_share_one():
    from linattn_core.lm.layers import LAYERS

    assert set(LAYERS) <= set(vt.LAYER_STYLE)
    solid = [c for c, dash in vt.LAYER_STYLE.values() if dash == "solid"]
    assert len(solid) == len(set(solid))  # the solid lines are told apart by colour alone
    assert vt.style_of("retnet")[0] == vt.style_of("retnet_no_decay")[0] != vt.style_of("gla")[0]
    assert vt.style_of("deltanet_additive") == (vt.style_of("deltanet")[0], "dot")
    assert vt.style_of("unknown")[1] == "dash"


def test_lr_sweep_rings_the_chosen_rate():
    sweeps = {"softmax": {"1e-3": {"final_val_loss": 2.0}, "1e-2": {"final_val_loss": 1.9},
                          "3e-3": {"final_val_loss": 1.8}}}
    fig = vt.lr_sweep_figure(sweeps, {"softmax": "3e-3"})
    line, ring = fig.data
    assert list(line.x) == [1e-3, 3e-3, 1e-2] and list(line.y) == [2.0, 1.8, 1.9]  # sorted by rate
    assert (list(ring.x), list(ring.y)) == ([3e-3], [1.8]) and ring.showlegend is False
    assert fig.layout.xaxis.type == "log" and fig.layout.meta["alt"]


def test_seed_curves_band_spans_the_lowest_and_highest_seed():
    runs = {"elu+1": [run(0, [4.0, 2.5, 2.0]), run(1, [4.0, 2.7, 2.2]), run(2, [4.0, 2.6, 1.9])]}
    fig = vt.seed_curves_figure(runs, tokens_per_step=1000, baselines={"unigram": 3.3, "bigram": 2.5})
    band, mean = fig.data
    assert [s.y0 for s in fig.layout.shapes] == [3.3, 2.5]  # the baselines as lines
    assert band.fill == "toself" and band.showlegend is False
    assert_close(np.array(band.y), [4.0, 2.7, 2.2, 1.9, 2.5, 4.0], dtype="float64")  # max out, min back
    assert_close(np.array(mean.x), [0.0, 0.25, 0.5], dtype="float64")  # millions of characters
    assert_close(np.array(mean.y), [4.0, 2.6, 2.0333333333333333], dtype="float64")


def test_seed_curves_against_the_seconds_spent_training():
    runs = {"gla": [run(0, [4.0, 2.5, 2.0]), run(1, [4.0, 2.7, 2.2])]}
    runs["gla"][0]["curves"]["val_train_s"] = [0.0, 60.0, 120.0]
    runs["gla"][1]["curves"]["val_train_s"] = [0.0, 90.0, 180.0]
    mean = vt.seed_curves_figure(runs, tokens_per_step=1000, x="seconds").data[1]
    assert_close(np.array(mean.x), [0.0, 1.25, 2.5], dtype="float64")  # minutes, the seeds' mean clock
    timed = vt.seed_curves_figure(runs, tokens_per_step=1000, x="seconds", step_s={"gla": 0.6}).data[1]
    assert_close(np.array(timed.x), [0.0, 2.5, 5.0], dtype="float64")  # steps 0, 250, 500 at 0.6 s each
    with pytest.raises(ValueError, match="characters' or 'seconds'"):
        vt.seed_curves_figure(runs, tokens_per_step=1000, x="steps")


def test_seed_curves_refuse_seeds_evaluated_at_different_steps():
    runs = {"relu": [run(0, [4.0, 2.0]), run(1, [4.0, 2.1, 2.0], steps=(0, 100, 200))]}
    runs["relu"][0]["curves"]["val_step"] = [0, 200]
    with pytest.raises(ValueError, match="different steps"):
        vt.seed_curves_figure(runs, tokens_per_step=1)


def test_contrast_rows_show_each_seed_and_the_mean():
    c = contrast(Seeds("deltanet", (1.5, 1.6, 1.55)), Seeds("deltanet_additive", (1.7, 1.65, 1.8)))
    fig = vt.contrast_figure([("delta rule vs additive", c)])
    seeds, mean = fig.data
    assert_close(np.array(seeds.x), [-0.2, -0.05, -0.25], dtype="float64")
    assert_close(np.array(mean.x), [c.gap], dtype="float64")
    low, high = c.interval
    assert_close([mean.error_x.array[0], mean.error_x.arrayminus[0]], [high - c.gap, c.gap - low],
                 dtype="float64")
    assert c.verdict in mean.hovertemplate


def test_recall_points_are_the_seed_means_with_their_range():
    points = {"deltanet": [(4000, [0.9, 1.0, 0.95]), (1000, [0.2, 0.4, 0.3])]}
    fig = vt.recall_state_figure(points, chance=0.1)
    (tr,) = fig.data
    assert list(tr.x) == [1000, 4000]  # sorted by state size
    assert_close(np.array(tr.y), [0.3, 0.95], dtype="float64")
    assert_close(np.array(tr.error_y.array), [0.1, 0.05], dtype="float64")
    assert_close(np.array(tr.error_y.arrayminus), [0.1, 0.05], dtype="float64")
    assert fig.layout.xaxis.type == "log"


def test_capacity_points_are_the_seed_means_by_pairs_with_the_no_lookup_line():
    points = {"gla": [(16, 576, [0.1, 0.3, 0.2]), (4, 576, [1.0, 0.9, 0.95])]}
    fig = vt.recall_capacity_figure(points, chance={4: 0.4, 16: 0.2})
    tr, line = fig.data
    assert list(tr.x) == [4, 16] and list(tr.customdata) == [576, 576]  # sorted by pairs, state in hover
    assert_close(np.array(tr.y), [0.95, 0.2], dtype="float64")
    assert_close(np.array(tr.error_y.array), [0.05, 0.1], dtype="float64")
    assert_close(np.array(tr.error_y.arrayminus), [0.05, 0.1], dtype="float64")
    assert list(line.x) == [4, 16] and list(line.y) == [0.4, 0.2]
    assert list(fig.layout.xaxis.tickvals) == [4, 16] and fig.layout.xaxis.type == "log"
    assert len(vt.recall_capacity_figure(points).data) == 1  # no line without chance


def test_heads_points_are_the_seed_means_per_pairs_panel_on_the_whole_plan():
    points = {("elu+1", 4, 16): [0.1, 0.3, 0.2], ("elu+1", 1, 16): [0.9, 1.0, 0.95],
              ("softmax", 4, 4): [1.0] * 3}
    fig = vt.recall_heads_figure(points, state={("elu+1", 1): 1344, ("elu+1", 4): 576, ("softmax", 4): 4384},
                                 heads=(1, 2, 4), pairs=(4, 8, 16), chance={4: 0.27, 8: 0.17, 16: 0.12})
    by = {(tr.name, tr.xaxis): tr for tr in fig.data}
    elu = by["elu+1", "x3"]  # the third panel: 16 pairs
    assert list(elu.x) == [1, 4] and list(elu.customdata) == [1344, 576]
    assert_close(np.array(elu.y), [0.95, 0.2], dtype="float64")
    assert_close(np.array(elu.error_y.array), [0.05, 0.1], dtype="float64")
    assert list(by["softmax", "x"].x) == [4] and ("softmax", "x3") not in by
    assert [a.text for a in fig.layout.annotations][:3] == ["4 pairs", "8 pairs", "16 pairs"]  # every panel
    chance = [tr for tr in fig.data if tr.legendgroup == "chance"]
    assert [list(tr.y) for tr in chance] == [[0.27] * 3, [0.17] * 3, [0.12] * 3]  # across all heads
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 4]
    with pytest.raises(ValueError, match="heads"):
        vt.recall_heads_figure({("elu+1", 8, 4): [0.5]}, state={}, heads=(1, 2, 4), pairs=(4,))


def _run(steps, accuracy):
    return {"curves": {"val_step": list(steps), "val_accuracy": list(accuracy)}}


def test_recall_curves_draw_every_run_of_every_panel_the_longer_budget_solid():
    short = {0: _run([1000, 2000, 3000], [0.1, 0.2, 0.3]), 1: _run([1000, 2000, 3000], [0.1, 0.5, 1.0])}
    long = {0: _run([3000, 6000, 9000], [0.2, 0.6, 0.9])}
    panels = {"deltanet, 4 heads, 16 pairs": {"3,000 steps": short, "9,000 steps": long},
              "gla, 4 heads, 16 pairs": {"3,000 steps": {2: short[0]}}}
    fig = vt.recall_curves_figure(panels, chance={"gla, 4 heads, 16 pairs": 0.12}, cols=1)
    names = [(tr.name, tr.xaxis, tr.line.dash) for tr in fig.data]
    assert names == [("seed 0, 3,000 steps", "x", "dot"), ("seed 1, 3,000 steps", "x", "dot"),
                     ("seed 0, 9,000 steps", "x", "solid"), ("seed 2, 3,000 steps", "x2", "solid")]
    assert list(fig.data[2].y) == [0.2, 0.6, 0.9] and list(fig.data[2].x) == [3000, 6000, 9000]
    assert fig.data[0].line.color == fig.data[2].line.color != fig.data[1].line.color  # a seed, one colour
    assert [a.text for a in fig.layout.annotations][:2] == list(panels)
    assert [sh.y0 for sh in fig.layout.shapes] == [0.12] and fig.layout.shapes[0].yref == "y2"
    assert sum(tr.showlegend for tr in fig.data) == 4
    longer = {1: _run([6000, 12000, 18000], [0.3, 0.7, 0.8])}
    budgets = vt.recall_curves_figure({"a": {"3k": short, "9k": long, "18k": longer}})
    assert [(tr.name, tr.line.dash) for tr in budgets.data] == [
        ("seed 0, 3k", "dot"), ("seed 1, 3k", "dot"), ("seed 0, 9k", "dash"), ("seed 1, 18k", "solid")]
    again = vt.recall_curves_figure({"a": {"x": short}, "b": {"x": short}}, cols=3)
    assert [tr.showlegend for tr in again.data] == [True, True, False, False]  # one legend entry a run
    three = vt.recall_curves_figure({"a": {"x": short}, "b": {"x": short}, "c": {"x": short}}, cols=2)
    titled = [bool(three.layout[f"xaxis{i}"].title.text) for i in ("", "2", "3")]
    assert titled == [False, True, True]  # a step axis under the last panel of each column
    many = vt.recall_curves_figure({f"p{i}": {"x": short} for i in range(13)}, cols=2)  # seven rows
    spans = [(a.domain[1] - a.domain[0]) * many.layout.height for a in many.select_yaxes()]
    assert len(spans) == 14 and min(spans) > 150  # every panel keeps room to read, at any number of rows
    with pytest.raises(ValueError, match="at least one panel"):
        vt.recall_curves_figure({})
    with pytest.raises(ValueError, match="cols >= 1"):
        vt.recall_curves_figure(panels, cols=0)
