"""The capstone lab's machinery: a report of real runs passes, and each way a report can be wrong fails.

The runs here are tiny (the capstone's preset swapped for a model of a few hundred parameters and six
steps), so that the mechanics are tested in seconds; the preset itself is held to its time budget by
its size (a multiple of the book preset, which the book build trains for every layer).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from linattn_core.tools import course, exercises
from linattn_core.tools.exercises import capstone

torch = pytest.importorskip("torch")

from linattn_core.lm import compare  # noqa: E402
from linattn_core.lm.data import Corpus  # noqa: E402
from linattn_core.lm.train import PRESETS, TrainConfig, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = TrainConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_steps=6, lr=3e-3,
                   warmup_steps=2, eval_interval=2, eval_batches=2, chunk_size=8)
PAIR = ("gla", "simple_gla")


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "\n"]
    return Corpus.from_texts({"x_gut.txt": " ".join(rng.choice(words, 3000))})


@pytest.fixture(scope="module")
def runs(corpus):
    torch.set_num_threads(1)
    out = {}
    for kind in PAIR:
        out[kind] = []
        for seed in range(3):
            run = train(replace(TINY, attention=kind, seed=seed), corpus, device="cpu", progress=False)
            run.pop("model")
            out[kind].append(json.loads(json.dumps(run)))  # as a saved JSON comes back
    return out


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setattr(capstone, "config", lambda kind, seed=0: replace(TINY, attention=kind, seed=seed))


def _report(runs):
    found = compare.contrast(*(compare.seeds_of(k, runs[k]) for k in PAIR))
    return {"pair": PAIR, "runs": runs, "gap": found.gap, "interval": found.interval,
            "verdict": found.verdict,
            "cannot_show": "one learning rate for both layers, so one may be mistuned; six steps of a "
                           "tiny model are an early snapshot; one corpus; three seeds give a wide interval"}


def _check(report, corpus, capsys):
    ok = capstone.check_report(report, corpus)
    return bool(ok), " ".join(capsys.readouterr().out.split())


def test_an_honest_report_passes(runs, corpus, tiny_preset, capsys):
    ok, out = _check(_report(runs), corpus, capsys)
    assert ok and out.startswith("Correct!"), out


@pytest.mark.parametrize("change", ["two_seeds", "other_seeds", "other_rate", "made_up_loss", "gap",
                                    "interval",
                                    "verdict", "no_limits", "same_layer"])
def test_a_wrong_report_fails_with_its_reason(runs, corpus, tiny_preset, capsys, change):
    report = json.loads(json.dumps(_report(runs)))
    report["pair"] = tuple(report["pair"])
    a, b = PAIR
    if change == "two_seeds":
        report["runs"][a] = report["runs"][a][:2]
        why = "at least 3 seeds"
    elif change == "other_seeds":
        report["runs"][b][2]["config"]["seed"] = 7
        why = "other seeds"
    elif change == "other_rate":
        report["runs"][b][1]["config"]["lr"] = 1e-2
        why = "same budget and rate"
    elif change == "made_up_loss":
        report["runs"][a][0]["curves"]["train_loss"][0] += 0.5
        why = "do not come back"
    elif change == "gap":
        report["gap"] += 0.01
        why = "not the paired difference"
    elif change == "interval":
        report["interval"] = [x * 0.5 for x in report["interval"]]
        why = "not the paired difference"
    elif change == "verdict":
        report["verdict"] = f"{a} lower" if report["verdict"] == "tie" else "tie"
        why = "not what the interval says"
    elif change == "no_limits":
        report["cannot_show"] = "nothing"
        why = "cannot_show"
    else:
        report["pair"] = (a, a)
        why = "two different layers"
    ok, out = _check(report, corpus, capsys)
    assert not ok and why in out, out


def test_the_preset_fits_the_budget_and_the_brief_says_so():
    cfg = capstone.config("gla", 2)
    book = PRESETS["book"]
    assert (cfg.attention, cfg.seed, cfg.max_steps) == ("gla", 2, capstone.STEPS)
    assert replace(cfg, attention=book.attention, seed=book.seed) == book  # the book's model and preset
    # measured on one core of a 2-core CPU under load (two trainings beside it): 0.36 s a step
    # (softmax) to 0.95 s (simple_gla), so a run is 2 to 5 minutes there and six runs, two at a time,
    # fit the budget on a machine that runs nothing else (half those times or less)
    worst_s_per_step = 0.95
    assert 3 * capstone.STEPS * worst_s_per_step / 2 <= capstone.BUDGET_S == 600
    brief = " ".join(capstone.BRIEF.split())
    for words in ("at least three", "ten minutes on a 2-core CPU", "linattn_core.lm.compare", "interval",
                  "verdict", "cannot show", "check_report", "300 steps"):
        assert words in brief, words
    with pytest.raises(ValueError, match="kind"):
        capstone.config("nope")


def test_the_lab_is_rubric_graded_with_a_model_answer_for_the_teacher_only():
    lab = capstone.LAB
    assert lab.points == sum(p for p, _ in lab.rubric) == 10 and lab.difficulty == 3
    assert "tie" in course.model_answer(lab.label)  # from the teacher's file
    assert not hasattr(lab, "model_answer")
    assert exercises.OPEN[lab.label] is lab and lab.chapter == "training_compare"  # placed there
