"""The stored experiments of the training chapter (linattn_core/lm/results/, made by scripts/stored_runs.py).

- the language model on Shakespeare: a learning-rate sweep of every layer (``sweep-KIND-lrRATE.json``,
  four rates spanning 30x, 300 steps (half the budget), seed 0), then three seeds at the chosen rate
  (``full-KIND-seedS.json``, the ``full`` preset's 600 steps);
- recall (MQAR): the sweep of the rate at width 48 (``mqar-sweep-KIND-lrRATE.json``), then every width
  and seed of the ``state`` preset at the chosen rate (``mqar-KIND-wWIDTH-seedS.json``), and every
  number of pairs and seed of the ``capacity`` preset (``mqar-capacity-KIND-pPAIRS-seedS.json``).

Each file must be the current preset's run (only the rate, the length and the seed overridden, as its
recorded command says), have run to its end on one thread with a recorded commit, and reproduce: its
first training losses, recomputed here from its configuration on the same data, equal the stored
ones to float32 rounding. The completeness tests say which files a plan still lacks.
"""

from __future__ import annotations

import re
from dataclasses import asdict, replace

import numpy as np
import pytest
from _tolerances import assert_close

torch = pytest.importorskip("torch")

from linattn_core.lm import data, mqar, stored  # noqa: E402 - after the importorskip
from linattn_core.lm import train as T  # noqa: E402
from linattn_core.lm.stored import RECALL_SWEEP_LRS, RECALL_SWEEP_WIDTH, SEEDS, SWEEP_LRS, SWEEP_STEPS  # noqa: E402

LM_RUNS = stored.lm_runs()  # every layer as the paper has it, and softmax-conv4, by file name
REPLAY = 3  # first training losses recomputed per stored run
LM_FILES = stored.names("sweep-*.json") + stored.names("full-*-seed*.json")
MQAR_FILES = stored.names("mqar-*.json")


def test_every_layer_has_its_sweep_and_seeds():
    want = [f"sweep-{k}-lr{lr}.json" for k in LM_RUNS for lr in SWEEP_LRS]
    want += [f"full-{k}-seed{s}.json" for k in LM_RUNS for s in SEEDS]
    missing = sorted(set(want) - set(stored.names()))
    assert not missing, f"not stored yet ({len(missing)}): {missing[:6]}...: python scripts/stored_runs.py"


def test_every_recall_run_is_stored():
    preset = mqar.PRESETS["state"]
    want = [f"mqar-sweep-{k}-lr{lr}.json" for k in preset.kinds for lr in RECALL_SWEEP_LRS]
    want += [stored.recall_name(p, *run) for p in ("state", "capacity") for run in mqar.PRESETS[p].runs()]
    missing = sorted(set(want) - set(stored.names()))
    assert not missing, f"not stored yet ({len(missing)}): {missing[:6]}...: python scripts/stored_runs.py"


def test_a_rate_that_diverged_is_never_chosen(monkeypatch):
    runs = {"1e-3": {"final_val_loss": 2.0}, "1e-2": {"final_val_loss": 1.9},
            "3e-2": {"final_val_loss": None}}
    monkeypatch.setattr(stored, "sweep", lambda kind: runs)
    assert stored.chosen_lr("x") == "1e-2"
    monkeypatch.setattr(stored, "sweep", lambda kind: {"3e-2": {"final_val_loss": None}})
    with pytest.raises(ValueError, match="every rate of the sweep of 'x' diverged"):
        stored.chosen_lr("x")
    recall = {"1e-3": {"final_accuracy": 0.5, "final_loss": 1.0}, "1e-2": {"final_accuracy": None}}
    monkeypatch.setattr(stored, "recall_sweep", lambda kind: recall)
    assert stored.chosen_recall_lr("x") == "1e-3"


def _lm_expected(name: str, run: dict) -> dict:
    """The configuration the file's name and recorded command say it ran."""
    m = re.fullmatch(r"sweep-(.+)-lr(.+)\.json", name) or re.fullmatch(r"full-(.+)-seed(\d+)\.json", name)
    assert m, name
    kind, conv = LM_RUNS[m.group(1)]
    preset = replace(T.PRESETS["full"], attention=kind, conv=conv)
    if name.startswith("sweep-"):
        return asdict(replace(preset, lr=float(m.group(2)), max_steps=SWEEP_STEPS))
    return asdict(replace(preset, seed=int(m.group(2)), lr=run["config"]["lr"]))


@pytest.mark.parametrize("name", LM_FILES)
def test_stored_lm_run_is_the_recorded_command_run_to_its_end(name):
    run = stored.load(name)
    assert run["config"] == _lm_expected(name, run), "the preset changed: rerun it"
    kind, conv = run["config"]["attention"], run["config"]["conv"]
    assert run["command"].startswith(f"python -m linattn_core.train --attention {kind} ")
    assert "--preset full" in run["command"] and "--lr " in run["command"] and run["preset"] == "full"
    assert (f"--conv {conv}" in run["command"]) == (conv is not None)
    assert run["hardware"]["threads"] == 1 and len(run["git_commit"] or "") == 40
    curves = run["curves"]
    assert curves["step"][: T.FIRST_LOSSES] == list(range(T.FIRST_LOSSES))
    if run.get("diverged_at") is not None:  # a rate too high: a sweep's result, never a seed's
        assert name.startswith("sweep-")
        assert run["steps_done"] == run["diverged_at"] < run["config"]["max_steps"]
        assert run["final_val_loss"] is None and curves["val_step"][-1] <= run["diverged_at"]
        return
    assert run["steps_done"] == run["config"]["max_steps"]
    assert curves["val_step"][-1] == run["steps_done"] and run["final_val_loss"] == curves["val_loss"][-1]


@pytest.mark.parametrize("name", stored.names("full-*-seed*.json"))
def test_seeds_ran_at_the_rate_their_sweep_chose(name):
    run = stored.load(name)
    assert run["config"]["lr"] == float(stored.chosen_lr(name.removeprefix("full-").rsplit("-seed", 1)[0]))
    # learned from context: far below the entropy of the characters' frequencies
    assert run["final_val_loss"] < run["unigram_entropy"] - 0.4


@pytest.fixture(scope="module")
def corpus():
    if not data.tarball_path().is_file():
        pytest.skip("real text not fetched (make data)")
    return data.load_corpus()


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
    assert_close(np.array(again), np.array(run["curves"]["train_loss"][:REPLAY]), dtype="float32",
                 what=f"first losses of {name}")


@pytest.mark.parametrize("name", MQAR_FILES)
def test_stored_recall_run_is_the_preset_run(name):
    part = stored.load(name)
    preset_name = "capacity" if name.startswith("mqar-capacity-") else "state"
    preset = mqar.PRESETS[preset_name]
    (run,) = part["runs"]
    c = run["config"]
    want = {**preset.options, "steps": preset.steps}
    assert {k: c[k] for k in want if k != "lr"} == {k: v for k, v in want.items() if k != "lr"}
    assert c["attention"] in preset.kinds and c["n_pairs"] in preset.pairs
    assert part["command"].startswith(f"python -m linattn_core.mqar --preset {preset_name} ")
    assert len(part["git_commit"] or "") == 40 and part["hardware"]["threads"] == 1
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
    assert_close(np.array(mqar.replay_losses(run, REPLAY)), np.array(first), dtype="float32",
                 what=f"first losses of {name}")
