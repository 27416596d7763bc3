"""The capstone lab: train two attention layers over seeds and say what the comparison can show.

An open exercise, graded by hand against :data:`LAB`'s rubric, with a mechanical part that
:func:`check_report` checks the way ``check()`` checks a function: the learner picks two layers of
:data:`linattn_core.lm.model.KINDS`, trains each with the same three seeds or more at the small
preset :func:`config` gives (the book's model and preset, :data:`STEPS` steps: a minute or two a run
on one core, so six runs, two at a time, fit in :data:`BUDGET_S` seconds on a 2-core CPU), computes the paired
difference of the final validation losses and its interval with :func:`linattn_core.lm.compare.contrast`,
and writes the verdict and what the runs cannot show. ``check_report(report)`` replays the first
steps of one run per layer (a made-up loss does not pass), and holds the numbers, the verdict and
the fairness of the runs (one budget, one learning-rate rule, the same seeds) to the library.

Nothing here imports torch until a report is checked: the exercises load without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .feedback import CheckResult, wrap
from .open import OPEN, OpenExercise

__all__ = ["BRIEF", "BUDGET_S", "LAB", "MIN_SEEDS", "STEPS", "check_report", "config"]

STEPS = 300  # the book preset's: measured at 0.36 to 0.95 s a step on one core of a loaded 2-core CPU
MIN_SEEDS = 3
BUDGET_S = 600  # six runs (two layers, three seeds) on a 2-core CPU, one run per core
REPLAY_STEPS = 3  # the first training losses recomputed from a run's configuration
TOLERANCE = 1e-9  # the learner's numbers against compare's, from the same runs

BRIEF = """\
Pick two attention layers of `linattn_core.lm.model.KINDS` whose difference you can name in one
sentence (for example `gla` against `simple_gla`: a gate per key channel against one per head; or
`retnet` against `retnet_no_decay`). Train each with the same seeds, at least three (0, 1, 2), at
the capstone's preset, `exercises.capstone.config(kind, seed)`: the book's model for 300 steps, a
minute or two a run on one core, so the six runs fit in ten minutes on a 2-core CPU (two runs at a
time, one per core: `torch.set_num_threads(1)` in each of two processes). Then compute, with
`linattn_core.lm.compare`, the paired difference of the final validation losses
(`contrast(seeds_of(a, runs_a), seeds_of(b, runs_b))`: its `gap`, its 95% `interval` and its
`verdict`), and write your report: the verdict in one sentence, the numbers behind it, and what
these runs cannot show (one learning rate for both layers, a short budget, a small model, one data
set, the seeds you ran). `exercises.capstone.check_report(report)` checks the mechanics; the rubric
grades the reading.
"""

LAB = OpenExercise(
    label="ex-training-capstone", chapter="training_compare",
    title="Capstone: a trained comparison that earns its verdict",
    difficulty=3, minutes=120,
    rubric=(
        (2, "names the pair and the one difference between the layers the comparison is about, and "
            "a prediction written down before training, with a reason"),
        (2, "trains both layers with the same seeds, at least three, at the capstone preset, and "
            "check_report passes (the runs replay, the budget and the rule for the rate are one)"),
        (2, "reports the per-seed differences, their mean and the 95% interval computed with "
            "linattn_core.lm.compare, and the verdict the interval gives (a tie when it holds 0)"),
        (2, "reads the verdict honestly: a tie is no evidence that the layers are equal, a "
            "separation holds at this budget and rate only, and the spread of the seeds is as "
            "large as it is"),
        (2, "says what the runs cannot show, with at least two reasons: one learning rate for both "
            "layers (one may be mistuned), 300 steps of a small model (an early snapshot), one "
            "corpus, few seeds (a wide interval); and names the next run that would tell more"),
    ),
)


OPEN[LAB.label] = LAB  # an open exercise of training_compare.md like the others (its own assignment)


def config(kind: str, seed: int = 0) -> Any:
    """The capstone's run of layer ``kind`` with ``seed``: the book's preset (:data:`STEPS` steps)."""
    from linattn_core.lm.model import KINDS
    from linattn_core.lm.train import PRESETS

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    return replace(PRESETS["book"], attention=kind, seed=int(seed), max_steps=STEPS)


def _fairness(kind: str, runs: Sequence[Mapping]) -> str | None:
    """Why the runs of one layer are not a capstone's runs, or None."""
    for run in runs:
        cfg = dict(run.get("config") or {})
        if cfg.get("attention") != kind:
            return f"a run listed under {kind!r} trained {cfg.get('attention')!r}"
        wanted = {**vars(config(kind, cfg.get("seed", 0)))}
        for key in ("max_steps", "n_layer", "n_head", "n_embd", "block_size", "batch_size", "lr",
                    "warmup_steps", "eval_batches"):
            if cfg.get(key) != wanted[key]:
                return (f"{kind}, seed {cfg.get('seed')}: {key} = {cfg.get(key)!r}, the capstone "
                        f"preset has {wanted[key]!r}. Train with exercises.capstone.config(kind, seed) "
                        "so that both layers get the same budget and rate")
        if run.get("final_val_loss") is None or run.get("diverged_at") is not None:
            return f"{kind}, seed {cfg.get('seed')}: the run diverged or has no final validation loss"
    return None


def _replays(run: Mapping, corpus: Any) -> str | None:
    """None if the first training losses of ``run`` come back from its configuration."""
    from linattn_core.lm.train import replay_losses

    stored = list(run["curves"]["train_loss"][:REPLAY_STEPS])
    again = replay_losses(dict(run), corpus, REPLAY_STEPS)
    if len(stored) < REPLAY_STEPS or not all(math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
                                             for a, b in zip(stored, again, strict=False)):
        return (f"{run['config']['attention']}, seed {run['config']['seed']}: its first training "
                f"losses {stored} do not come back when the run is replayed from its configuration "
                f"({[round(x, 6) for x in again]}): report the runs train() returned")
    return None


def check_report(report: Mapping, corpus: Any = None, *, replay: bool = True) -> CheckResult:
    """Check the mechanics of a capstone report; print feedback; truthy when all of it holds.

    ``report``: ``{"pair": (a, b), "runs": {a: [...], b: [...]}, "gap": float,
    "interval": (low, high), "verdict": str, "cannot_show": str}``, the runs as
    :func:`linattn_core.lm.train.train` returns them (or their saved JSON). ``corpus``: the text the
    runs trained on (``load_corpus()`` when None), for the replay; ``replay=False`` skips it.
    """
    problem = _problem(report, corpus, replay)
    text = ("Correct! The runs, the numbers and the verdict hold; the rubric grades your reading."
            if problem is None else "Not yet:\n" + wrap(problem))
    print(text)
    return CheckResult(problem is None, text, LAB.label)


def _problem(report: Mapping, corpus: Any, replay: bool) -> str | None:
    from linattn_core.lm import compare
    from linattn_core.lm.model import KINDS

    try:
        a, b = report["pair"]
        runs = report["runs"]
    except (KeyError, TypeError, ValueError):
        return "the report needs 'pair': (layer_a, layer_b) and 'runs': {layer_a: [...], layer_b: [...]}"
    if a == b or a not in KINDS or b not in KINDS:
        return f"the pair must be two different layers of {', '.join(KINDS)}; got {a!r} and {b!r}"
    for kind in (a, b):
        if len(runs.get(kind, ())) < MIN_SEEDS:
            return (f"{kind} has {len(runs.get(kind, ()))} run(s): train each layer with at least "
                    f"{MIN_SEEDS} seeds, the same for both")
        problem = _fairness(kind, runs[kind])
        if problem:
            return problem
    try:
        seeds = [compare.seeds_of(kind, runs[kind]) for kind in (a, b)]
        found = compare.contrast(*seeds)
    except ValueError as exc:
        return str(exc)
    gap, interval = report.get("gap"), report.get("interval")
    try:
        low, high = (float(x) for x in interval)
        numbers_right = (math.isclose(float(gap), found.gap, abs_tol=TOLERANCE)
                         and math.isclose(low, found.interval[0], abs_tol=TOLERANCE)
                         and math.isclose(high, found.interval[1], abs_tol=TOLERANCE))
    except (TypeError, ValueError):
        numbers_right = False
    if not numbers_right:
        return (f"the gap and the interval are not the paired difference of these runs: "
                f"linattn_core.lm.compare.contrast gives gap {found.gap:.6f} and interval "
                f"({found.interval[0]:.6f}, {found.interval[1]:.6f}) for {a} - {b}; you reported "
                f"{gap!r} and {interval!r}")
    if report.get("verdict") != found.verdict:
        return (f"the verdict {report.get('verdict')!r} is not what the interval says: "
                f"{found.verdict!r} (a tie whenever the interval holds 0)")
    if len(str(report.get("cannot_show", "")).split()) < 20:
        return "say in 'cannot_show' (20 words or more) what these runs cannot show"
    if replay:
        if corpus is None:
            from linattn_core.lm.data import load_corpus

            corpus = load_corpus()
        for kind in (a, b):
            problem = _replays(runs[kind][0], corpus)
            if problem:
                return problem
    return None
