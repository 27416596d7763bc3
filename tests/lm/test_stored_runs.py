"""The stored experiments of the training chapter (linattn_core/lm/results/, made by scripts/stored_runs.py).

- the language model on Shakespeare, one epoch (the ``epoch`` preset, ``epoch-NAME-lrRATE-seedS.json``):
  a learning-rate sweep of every layer with seed 0 (four rates spanning 30x, and the next one past an
  edge where the best sits there), then more seeds at the chosen rate, and the runs the contrasts
  need (one side at the other's rate; two more seeds where a gap is small);
- recall (MQAR): the sweep of the rate at width 48 (``mqar-sweep-KIND-lrRATE.json``), then every width
  and seed of the ``state`` preset at the chosen rate (``mqar-KIND-wWIDTH-seedS.json``), and every
  number of pairs and seed of the ``capacity`` preset (``mqar-capacity-KIND-pPAIRS-seedS.json``);
  recall at fixed parameters (the ``heads`` preset, ``mqar-heads-KIND-hH-pP-lrRATE-seedS.json``: each
  point's sweep, then its seeds), the points not settled at 3,000 steps run for longer
  (``mqar-long-...``, 9,000 steps, the same name after the prefix) with the rate swept again there,
  and those still moving at the rate that sweep chose longer again (``mqar-longer-...``, 18,000
  steps); the longer runs kept outside that plan are named in ``stored.HEADS_LONG_EXTRA``.

Each file must be the current preset's run (only the rate, the length and the seed overridden, as its
recorded command says), have run to its end on one thread with a recorded commit, and reproduce: its
first training losses, recomputed here from its configuration on the same data, equal the stored
ones to float32 rounding. The completeness tests say which files a plan still lacks.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace

import numpy as np
import pytest
from _tolerances import assert_close

torch = pytest.importorskip("torch")

from linattn_core.lm import data, mqar, stored  # noqa: E402 - after the importorskip
from linattn_core.lm import train as T  # noqa: E402
from linattn_core.lm.stored import RECALL_SWEEP_LRS, RECALL_SWEEP_WIDTH  # noqa: E402

LM_RUNS = stored.lm_runs()  # every layer as the paper has it, and softmax-conv4, by file name
REPLAY = 3  # first training losses recomputed per stored run
LM_FILES = stored.names("epoch-*.json")
MQAR_FILES = stored.names("mqar-*.json")
EPOCH_NAME = re.compile(r"epoch-(.+)-lr(.+)-seed(\d+)\.json")


def test_the_epoch_plan_names_every_layer_once():
    plan = stored.EPOCH_CORE + stored.EPOCH_OTHERS
    assert sorted(plan) == sorted(LM_RUNS) and len(set(plan)) == len(plan)
    assert {a for _, a, _ in stored.EPOCH_CONTRASTS} | {b for _, _, b in stored.EPOCH_CONTRASTS} <= set(plan)
    rates = sorted(float(r) for r in stored.EPOCH_LRS)
    assert rates[-1] / rates[0] >= 30  # the sweep spans at least 30x


def test_every_recall_run_is_stored():
    preset = mqar.PRESETS["state"]
    want = [f"mqar-sweep-{k}-lr{lr}.json" for k in preset.kinds for lr in RECALL_SWEEP_LRS]
    want += [stored.recall_name(p, *run) for p in ("state", "capacity") for run in mqar.PRESETS[p].runs()]
    missing = sorted(set(want) - set(stored.names()))
    assert not missing, f"not stored yet ({len(missing)}): {missing[:6]}...: python scripts/stored_runs.py"


def test_every_point_of_the_heads_plan_is_stored():
    preset = mqar.PRESETS["heads"]
    points = stored.heads_points(preset.kinds, preset.pairs)
    assert len(points) == len(preset.kinds) * len(stored.RECALL_HEADS) * len(preset.pairs)
    missing = sorted(key for key, point in points.items() if not point["complete"])
    assert not missing, f"not complete yet: {missing}: python scripts/stored_runs.py mqar-heads"


@pytest.mark.parametrize("steps", [stored.HEADS_LONG_STEPS, stored.HEADS_LONGER_STEPS])
def test_every_point_that_runs_longer_has_its_plan_stored_and_a_chosen_rate(steps):
    preset = mqar.PRESETS["heads"]
    points = stored.heads_long_points(preset.kinds, preset.pairs, steps)
    if steps == stored.HEADS_LONG_STEPS:
        assert points  # the plan has points to run longer, and this test something to check
    missing = [(key, lr, seed) for key in points for lr, seed in stored.heads_long_plan(*key, steps)
               if seed not in stored.heads_long_runs(*key, lr, steps)]
    assert not missing, f"not stored yet: {missing}: python scripts/stored_runs.py mqar-heads-long"
    for key in points:  # the sweep at this budget is complete: it chose, and every seed ran there
        chosen = stored.heads_long_chosen_lr(*key, steps)
        assert sorted(stored.heads_long_runs(*key, chosen, steps)) == list(stored.RECALL_SEEDS), key


def _longer_plan() -> set[str]:
    preset = mqar.PRESETS["heads"]
    return {stored.heads_long_name(*key, lr, seed, steps)
            for steps in (stored.HEADS_LONG_STEPS, stored.HEADS_LONGER_STEPS)
            for key in stored.heads_long_points(preset.kinds, preset.pairs, steps)
            for lr, seed in stored.heads_long_plan(*key, steps)}


def test_no_longer_run_is_stored_outside_the_plan_but_the_stated_ones():
    outside = set(stored.names("mqar-long*.json")) - _longer_plan()
    assert outside <= set(stored.HEADS_LONG_EXTRA), sorted(outside - set(stored.HEADS_LONG_EXTRA))


def test_the_longer_runs_kept_outside_the_plan_are_stored_and_outside_it():
    # the list names files the chapter shows as they are: none lacking, none the plan itself lists
    assert stored.HEADS_LONG_EXTRA and set(stored.HEADS_LONG_EXTRA) <= set(stored.names("mqar-long*.json"))
    assert not set(stored.HEADS_LONG_EXTRA) & _longer_plan()


def _curve(accuracies, every=250):
    return {"curves": {"val_step": [every * (i + 1) for i in range(len(accuracies))],
                       "val_accuracy": list(accuracies)}}


def test_a_run_moved_by_what_its_accuracy_did_over_its_last_thousand_steps():
    # evaluations every 250 steps: the last is compared with the one 1,000 steps before it
    assert stored.heads_moved(_curve([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])) == pytest.approx(0.4)
    assert stored.heads_moved(_curve([0.1, 0.9, 0.5, 0.5, 0.5, 0.6])) == pytest.approx(0.3)  # not the span
    assert stored.heads_moved(_curve([0.9, 0.8, 0.7, 0.6, 0.5])) == pytest.approx(0.4)  # down counts too
    assert stored.heads_moved(_curve([0.1, 0.2, 0.3, 0.5, 0.99])) == 0.0  # at the ceiling: nowhere to go
    assert stored.heads_moved(_curve([0.5, 0.5, 0.5, 0.5, 0.515])) == pytest.approx(0.015)
    assert stored.heads_moved(_curve([0.1, 0.5, 0.9]), last=250) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no evaluation 1000 steps before its last"):
        stored.heads_moved(_curve([0.1, 0.2, 0.3]))  # 750 steps in all


def test_a_point_is_moving_when_any_seed_moved_more_than_the_threshold():
    flat, ceiling = _curve([0.5] * 5 + [0.5 + stored.HEADS_FLAT / 2]), _curve([0.1] * 5 + [1.0])
    assert not stored.heads_moving({"runs": {0: flat, 1: ceiling}})
    moving = _curve([0.5] * 5 + [0.5 + 2 * stored.HEADS_FLAT])
    assert stored.heads_moving({"runs": {0: flat, 1: ceiling, 2: moving}})


def test_the_longer_runs_of_a_point_are_read_at_its_chosen_rate(monkeypatch, tmp_path):
    for name in ("mqar-long-x-h4-p8-lr1e-2-seed0.json", "mqar-long-x-h4-p8-lr1e-2-seed2.json",
                 "mqar-long-x-h4-p8-lr3e-3-seed1.json", "mqar-long-x-h2-p8-lr1e-2-seed1.json",
                 "mqar-heads-x-h4-p8-lr1e-2-seed1.json"):
        (tmp_path / name).write_text(json.dumps({"runs": [{"name": name}]}))
    monkeypatch.setattr(stored, "directory", lambda: tmp_path)
    monkeypatch.setattr(stored, "heads_chosen_lr", lambda kind, heads, pairs: "1e-2")
    runs = stored.heads_long_runs("x", 4, 8)
    assert {s: r["name"] for s, r in runs.items()} == {0: "mqar-long-x-h4-p8-lr1e-2-seed0.json",
                                                       2: "mqar-long-x-h4-p8-lr1e-2-seed2.json"}
    assert stored.heads_long_runs("x", 1, 8) == {}
    assert stored.heads_long_name("x", 4, 8, "1e-2", 0) == "mqar-long-x-h4-p8-lr1e-2-seed0.json"


def test_a_longer_point_that_lost_a_seed_goes_again_at_the_next_lower_rate(monkeypatch, tmp_path):
    def store(lr, seed, accuracy):
        name = stored.heads_long_name("x", 4, 8, lr, seed)
        (tmp_path / name).write_text(json.dumps({"runs": [{"final_accuracy": accuracy}]}))

    monkeypatch.setattr(stored, "directory", lambda: tmp_path)
    monkeypatch.setattr(stored, "heads_chosen_lr", lambda kind, heads, pairs: "1e-2")
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2"]  # nothing stored: the chosen rate
    store("1e-2", 0, None)
    store("1e-2", 1, 0.5)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2"]  # a seed lost, but the point not complete yet
    store("1e-2", 2, 0.4)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2", "3e-3"]
    for seed in stored.RECALL_SEEDS:
        store("3e-3", seed, 0.6)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2", "3e-3"]  # every seed finite: read this one
    store("3e-3", 1, None)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2", "3e-3", "1e-3"]  # down the ladder again
    for seed in stored.RECALL_SEEDS:  # past the sweep's low edge, to the rate beyond it
        store("1e-3", seed, None if seed == 2 else 0.6)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2", "3e-3", "1e-3", "3e-4"]
    monkeypatch.setattr(stored, "heads_chosen_lr", lambda kind, heads, pairs: "1e-5")
    for seed in stored.RECALL_SEEDS:  # the bottom of the ladder: nothing lower to try
        store("1e-5", seed, None)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-5"]


def test_a_point_is_unsettled_when_a_seed_moves_diverged_or_ended_below_the_settled_level():
    flat_high = _curve([stored.HEADS_SETTLED] * 6)
    flat_low = _curve([stored.HEADS_SETTLED - 0.01] * 6)
    for run, accuracy in ((flat_high, stored.HEADS_SETTLED), (flat_low, stored.HEADS_SETTLED - 0.01)):
        run["final_accuracy"] = accuracy
    assert not stored.heads_unsettled({"runs": {0: flat_high, 1: flat_high}})  # the boundary is settled
    assert stored.heads_unsettled({"runs": {0: flat_high, 1: flat_low}})  # flat, but on a plateau below it
    moving = _curve([0.5] * 5 + [0.5 + 2 * stored.HEADS_FLAT]) | {"final_accuracy": 0.99}
    moving["curves"]["val_accuracy"][-1] = 0.985
    assert stored.heads_unsettled({"runs": {0: flat_high, 1: moving}})
    diverged = {"final_accuracy": None, "curves": {"val_step": [250], "val_accuracy": [0.1]}}
    assert stored.heads_unsettled({"runs": {0: flat_high, 1: diverged}})


def test_the_points_still_moving_at_the_rate_the_longer_budget_chose_run_longer_again(monkeypatch, tmp_path):
    def store(steps, lr, seed, accuracies):
        run = _curve(accuracies) | {"final_accuracy": accuracies[-1] if accuracies else None,
                                    "final_loss": 1.0}
        name = stored.heads_long_name("x", 4, 8, lr, seed, steps)
        (tmp_path / name).write_text(json.dumps({"runs": [run]}))

    long, longer = stored.HEADS_LONG_STEPS, stored.HEADS_LONGER_STEPS
    moving = [0.5] * 5 + [0.5 + 2 * stored.HEADS_FLAT]
    monkeypatch.setattr(stored, "directory", lambda: tmp_path)
    monkeypatch.setattr(stored, "heads_chosen_lr", lambda kind, heads, pairs: "1e-2")
    monkeypatch.setattr(stored, "heads_points", lambda kinds, pairs: {
        ("x", 4, 8): {"complete": True, "runs": {0: _curve([0.5] * 6) | {"final_accuracy": 0.5}}},
        ("x", 2, 8): {"complete": True, "runs": {0: _curve([1.0] * 6) | {"final_accuracy": 1.0}}},
        ("x", 1, 8): {"complete": False, "runs": {}}})
    assert stored.heads_long_points(("x",), (8,)) == [("x", 4, 8)]  # flat at 0.5: not settled
    assert stored.heads_long_points(("x",), (8,), longer) == []  # its longer runs not stored yet
    store(long, "1e-2", 0, [])  # diverged: the point goes again one rate lower
    for seed in (1, 2):
        store(long, "1e-2", seed, moving)
    assert stored.heads_long_lrs("x", 4, 8) == ["1e-2", "3e-3"]
    store(long, "3e-3", 0, [0.5] * 6)
    store(long, "3e-3", 1, [0.5] * 6)
    assert stored.heads_long_points(("x",), (8,), longer) == []  # not complete at its last rate
    store(long, "3e-3", 2, moving)
    assert stored.heads_long_points(("x",), (8,), longer) == []  # moving, but its sweep has not chosen
    store(long, "1e-3", 0, [0.4] * 6)  # the sweep around 3e-3 (1e-2 diverged): 3e-3 is chosen
    assert stored.heads_long_chosen_lr("x", 4, 8) == "3e-3"
    assert stored.heads_long_points(("x",), (8,), longer) == [("x", 4, 8)]  # moving there: run on
    assert stored.heads_long_lrs("x", 4, 8, longer) == ["3e-3"]  # from the rate the budget before chose
    store(long, "3e-3", 2, [0.5] * 6)
    assert stored.heads_long_points(("x",), (8,), longer) == []  # flat where it is read: read it there
    store(long, "1e-3", 0, [0.6] * 6)  # a better rate, at the sweep's low edge: one further down first
    assert stored.heads_long_points(("x",), (8,), longer) == []
    store(long, "3e-4", 0, [0.2] * 6)
    assert stored.heads_long_chosen_lr("x", 4, 8) == "1e-3"
    assert stored.heads_long_points(("x",), (8,), longer) == []  # its seeds not stored there yet
    store(long, "1e-3", 1, [0.6] * 6)
    store(long, "1e-3", 2, moving)
    assert stored.heads_long_points(("x",), (8,), longer) == [("x", 4, 8)]  # moving at the chosen rate
    assert stored.heads_long_lrs("x", 4, 8, longer) == ["1e-3"]
    store(longer, "1e-3", 1, [0.7] * 6)
    assert sorted(stored.heads_long_runs("x", 4, 8, steps=longer)) == [1]
    assert stored.heads_long_name("x", 4, 8, "1e-3", 1, longer) == "mqar-longer-x-h4-p8-lr1e-3-seed1.json"
    for lr in ("3e-4", "1e-3", "3e-3"):  # every rate of the sweep diverged: nothing to run on from
        store(long, lr, 0, [])
    assert stored.heads_long_points(("x",), (8,), longer) == []
    for bad in (3000, 9001, 36000):
        with pytest.raises(ValueError, match="one of the longer budgets"):
            stored.heads_long_name("x", 4, 8, "3e-3", 1, bad)


def test_the_longer_budget_sweeps_its_rate_on_both_sides_and_reads_a_better_one(monkeypatch, tmp_path):
    def store(lr, seed, accuracy, loss=1.0):
        run = _curve([accuracy or 0.0] * 6) | {"final_accuracy": accuracy, "final_loss": loss}
        (tmp_path / stored.heads_long_name("x", 4, 8, lr, seed)).write_text(json.dumps({"runs": [run]}))

    monkeypatch.setattr(stored, "directory", lambda: tmp_path)
    monkeypatch.setattr(stored, "heads_chosen_lr", lambda kind, heads, pairs: "1e-2")
    seeds = [("1e-2", s) for s in stored.RECALL_SEEDS]
    assert stored.heads_long_plan("x", 4, 8) == seeds  # the point's own seeds first
    with pytest.raises(stored.SweepIncomplete) as missing:
        stored.heads_long_chosen_lr("x", 4, 8)
    assert missing.value.rates == ("3e-3", "1e-2", "3e-2")  # its rate, one step down the ladder, one up
    for seed, accuracy in zip(stored.RECALL_SEEDS, (0.6, 0.5, 0.4), strict=True):
        store("1e-2", seed, accuracy)
    assert stored.heads_long_plan("x", 4, 8) == seeds + [("3e-3", 0), ("3e-2", 0)]
    store("3e-3", 0, 0.6, loss=0.9)  # as accurate, lower loss: the better rate
    store("3e-2", 0, None)  # diverged: never chosen
    with pytest.raises(stored.SweepIncomplete) as edge:
        stored.heads_long_chosen_lr("x", 4, 8)
    assert edge.value.rates == ("1e-3",)  # the best at the sweep's low edge: one further down
    store("1e-3", 0, 0.2)
    assert stored.heads_long_chosen_lr("x", 4, 8) == "3e-3"
    plan = stored.heads_long_plan("x", 4, 8)  # every seed at the rate the longer sweep chose
    assert plan == seeds + [("1e-3", 0), ("3e-3", 0), ("3e-2", 0), ("3e-3", 1), ("3e-3", 2)]
    store("3e-3", 0, 0.5)  # now the rate read at wins: inside its range, nothing more to run
    assert stored.heads_long_chosen_lr("x", 4, 8) == "1e-2"
    assert stored.heads_long_plan("x", 4, 8) == seeds + [("1e-3", 0), ("3e-3", 0), ("3e-2", 0)]
    for lr in ("1e-3", "3e-3", "1e-2"):
        store(lr, 0, None)
    with pytest.raises(ValueError, match="every rate of the sweep"):
        stored.heads_long_chosen_lr("x", 4, 8)


def _sweep_of(monkeypatch, losses):
    runs = {lr: {"final_val_loss": v, "diverged_at": None if v is not None else 5}
            for lr, v in losses.items()}
    monkeypatch.setattr(stored, "epoch_sweep", lambda name: runs)


def test_the_epoch_sweep_chooses_inside_its_range(monkeypatch):
    _sweep_of(monkeypatch, {"1e-3": 2.0, "3e-3": 1.8, "1e-2": 1.9, "3e-2": None})
    assert stored.epoch_chosen_lr("x") == "3e-3"
    _sweep_of(monkeypatch, {"1e-3": 2.0, "3e-3": 1.8})  # a rate of the sweep not stored yet
    with pytest.raises(stored.SweepIncomplete) as missing:
        stored.epoch_chosen_lr("x")
    assert missing.value.rates == ("1e-2", "3e-2")
    _sweep_of(monkeypatch, {"1e-3": 1.7, "3e-3": 1.8, "1e-2": 1.9, "3e-2": 2.0})  # best at the low edge
    with pytest.raises(stored.SweepIncomplete) as edge:
        stored.epoch_chosen_lr("x")
    assert edge.value.rates == ("3e-4",)
    _sweep_of(monkeypatch, {"3e-4": 1.75, "1e-3": 1.7, "3e-3": 1.8, "1e-2": 1.9, "3e-2": 2.0})
    assert stored.epoch_chosen_lr("x") == "1e-3"  # now inside
    _sweep_of(monkeypatch, {"1e-3": None, "3e-3": None, "1e-2": None, "3e-2": None})
    with pytest.raises(ValueError, match=r"every rate of the sweep of .x. \(one epoch\) diverged"):
        stored.epoch_chosen_lr("x")


def test_a_recall_rate_that_diverged_is_never_chosen(monkeypatch):
    recall = {"1e-3": {"final_accuracy": 0.5, "final_loss": 1.0}, "1e-2": {"final_accuracy": None}}
    monkeypatch.setattr(stored, "recall_sweep", lambda kind: recall)
    assert stored.chosen_recall_lr("x") == "1e-3"


def _expected(name: str, run: dict) -> dict:
    """The configuration the file's name says it ran: the epoch preset, the layer, the rate, the seed."""
    m = EPOCH_NAME.fullmatch(name)
    assert m, name
    kind, conv = LM_RUNS[m.group(1)]
    return asdict(replace(T.PRESETS["epoch"], attention=kind, conv=conv, lr=float(m.group(2)),
                          seed=int(m.group(3))))


@pytest.mark.parametrize("name", LM_FILES)
def test_stored_lm_run_is_the_recorded_command_run_to_its_end(name):
    run = stored.load(name)
    assert run["config"] == _expected(name, run), "the preset changed: rerun it"
    kind, conv, lr, seed = (run["config"][k] for k in ("attention", "conv", "lr", "seed"))
    m = EPOCH_NAME.fullmatch(name)
    assert run["command"] == (f"python -m linattn_core.train --attention {kind}"
                              + ("" if conv is None else f" --conv {conv}")
                              + f" --preset epoch --lr {m.group(2)} --seed {seed} --threads 1 --no-progress"
                              f" --out linattn_core/lm/results/{name}")
    assert run["preset"] == "epoch" and float(m.group(2)) == lr
    assert run["hardware"]["threads"] == 1 and len(run["git_commit"] or "") == 40
    curves = run["curves"]
    assert curves["step"][: T.FIRST_LOSSES] == list(range(T.FIRST_LOSSES))
    assert len(curves["val_train_s"]) == len(curves["val_step"])
    if run.get("diverged_at") is not None:  # a rate too high: a sweep's result (seed 0), never a seed's
        assert seed == 0
        assert run["steps_done"] == run["diverged_at"] < run["config"]["max_steps"]
        assert run["final_val_loss"] is None and curves["val_step"][-1] <= run["diverged_at"]
        return
    assert run["steps_done"] == run["config"]["max_steps"]
    assert curves["val_step"][-1] == run["steps_done"] and run["final_val_loss"] == curves["val_loss"][-1]


@pytest.mark.parametrize("name", [n for n in LM_FILES if not n.endswith("-seed0.json")])
def test_more_seeds_ran_at_a_rate_a_sweep_chose(name):
    """A seed past 0 runs at its layer's chosen rate, or at the rate the other side of one of its
    contrasts chose (the contrast read at one shared rate)."""
    layer, lr, _ = EPOCH_NAME.fullmatch(name).groups()
    rates = {stored.epoch_chosen_lr(layer)}
    for a in {a for _, a, b in stored.EPOCH_CONTRASTS if b == layer}:
        try:
            rates.add(stored.epoch_chosen_lr(a))
        except stored.SweepIncomplete:  # a partner whose sweep is not stored has asked for nothing yet
            pass
    assert lr in rates


@pytest.fixture(scope="module")
def corpus():
    if not data.tarball_path().is_file():
        pytest.skip("real text not fetched (make data)")
    return data.load_corpus()


def assert_replays(again, stored_losses, what):
    """The recomputed first losses equal the stored ones to float32 rounding, on any CPU.

    A replay on another machine sums in another order. Measured: MKL and torch on AVX2 or SSE4.2 instead
    of AVX-512, the compiled kernel switched off, two threads instead of one each move the first three
    losses by at most 2e-7 of the loss (one or two float32 roundings of a loss near 4.5). The float32
    tolerance of ``_tolerances`` (2e-5, relative and absolute) allows 100 times that, while a change to
    the model, its initialisation, the data or the schedule moves them by 1e-4 or more.
    """
    assert_close(np.array(again), np.array(stored_losses), dtype="float32", what=what)


@pytest.fixture()
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the stored runs were trained on one thread: the same summation order
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.parametrize("name", LM_FILES)
def test_stored_lm_run_reproduces_its_first_losses(name, corpus, one_thread):
    run = stored.load(name)
    again = T.replay_losses(run, corpus, REPLAY)
    assert_replays(again, run["curves"]["train_loss"][:REPLAY], f"first losses of {name}")


@pytest.mark.parametrize("name", MQAR_FILES)
def test_stored_recall_run_is_the_preset_run(name):
    part = stored.load(name)
    # a point of the heads plan run again for longer, and again for longer still where it kept moving
    budgets = ((stored.HEADS_LONG_STEPS, "mqar-long-"), (stored.HEADS_LONGER_STEPS, "mqar-longer-"))
    steps = next((n for n, prefix in budgets if name.startswith(prefix)), None)
    longer = steps is not None
    preset_name = "heads" if longer else next(
        (p for p in ("capacity", "heads") if name.startswith(f"mqar-{p}-")), "state")
    preset = mqar.PRESETS[preset_name]
    (run,) = part["runs"]
    c = run["config"]
    want = {**preset.options, "steps": steps if longer else preset.steps}
    varied = {"lr", "n_head"} if preset_name == "heads" else {"lr"}
    assert {k: c[k] for k in want if k not in varied} == {k: v for k, v in want.items() if k not in varied}
    assert len(part["git_commit"] or "") == 40 and part["hardware"]["threads"] == 1
    if preset_name == "heads":  # a point of the plan at fixed parameters: its sweep, or a seed at its rate
        lr = name.split("-lr")[1].split("-seed")[0]
        point = (c["attention"], c["n_head"], c["n_pairs"])
        if longer:
            assert name == stored.heads_long_name(*point, lr, c["seed"], steps)
        else:
            assert name == stored.heads_name(*point, lr, c["seed"])
        assert c["n_head"] in stored.RECALL_HEADS and c["seed"] in stored.RECALL_SEEDS
        assert c["n_embd"] in preset.widths and c["lr"] == float(lr)
        if longer and name not in stored.HEADS_LONG_EXTRA:  # only a point of the plan for that budget,
            # a run its plan lists (its rate or sweep); the stated extras are checked on their own
            assert point in stored.heads_long_points((c["attention"],), (c["n_pairs"],), steps)
            assert (lr, c["seed"]) in stored.heads_long_plan(*point, steps)
        elif c["seed"]:  # more seeds run at the best rate of the point's sweep (chosen, once it is complete)
            assert lr == stored.heads_best_lr(*point)
        assert part["command"].startswith("python -m linattn_core.mqar --preset heads ")
        if run["diverged_at"] is None:  # a diverged rate is stored too, with its step and no accuracy
            assert 0.0 <= run["final_accuracy"] <= 1.0 and run["curves"]["val_step"][-1] == c["steps"]
        return
    assert c["attention"] in preset.kinds and c["n_pairs"] in preset.pairs
    assert part["command"].startswith(f"python -m linattn_core.mqar --preset {preset_name} ")
    if name.startswith("mqar-sweep-"):
        assert c["n_embd"] == RECALL_SWEEP_WIDTH and c["seed"] == 0
        assert c["lr"] == float(name[: -len(".json")].split("-lr")[1])
    else:
        assert c["n_embd"] in preset.widths and c["seed"] in preset.seeds
        assert c["lr"] == float(stored.chosen_recall_lr(c["attention"]))
    if not name.startswith("mqar-sweep-"):
        assert name == stored.recall_name(preset_name, c["attention"], c["n_embd"], c["n_pairs"], c["seed"])
    assert 0.0 <= run["final_accuracy"] <= 1.0 and run["curves"]["val_step"][-1] == c["steps"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MQAR_FILES)
def test_stored_recall_run_reproduces_its_first_losses(name, one_thread):
    (run,) = stored.load(name)["runs"]
    first = run["curves"]["train_loss"][:REPLAY]
    assert_replays(mqar.replay_losses(run, REPLAY), first, f"first losses of {name}")
