"""The stored runs: the results of the book's long trainings, installed with the package.

The training chapter shows runs that take too long to repeat while a page is built (the ``full``
presets of ``python -m linattn_core.train`` and ``python -m linattn_core.mqar``). Their JSON results
live in ``linattn_core/lm/results/`` and travel with the package as package data, so a chapter reads
them the same way in a checkout, after ``pip install``, on Colab and on Binder::

    from linattn_core.lm import stored

    stored.names("epoch-softmax-*.json")   # ['epoch-softmax-lr1e-2-seed0.json', ...]
    run = stored.load("epoch-softmax-lr1e-2-seed0.json")
    run["final_val_loss"]
    stored.epoch_chosen_lr("softmax")      # the rate its one-epoch sweep chose, as written: '1e-2'
    stored.epoch_runs("softmax")           # {seed: run} at that rate
"""

from __future__ import annotations

import fnmatch
import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["EPOCH_BEYOND", "EPOCH_CLOSE", "EPOCH_CONTRASTS", "EPOCH_CORE", "EPOCH_LRS", "EPOCH_MORE_SEEDS",
           "EPOCH_OTHERS", "EPOCH_SEEDS", "HEADS_FLAT", "HEADS_LONGER_STEPS", "HEADS_LONG_EXTRA",
           "HEADS_LONG_STEPS", "HEADS_SETTLED", "RATE_LADDER", "RECALL_HEADS", "RECALL_LRS", "RECALL_SEEDS",
           "RECALL_SWEEP_LRS", "RECALL_SWEEP_WIDTH", "SweepIncomplete", "chosen_recall_lr", "directory",
           "epoch_chosen_lr", "epoch_name", "epoch_runs", "epoch_sweep", "heads_best_lr", "heads_chosen_lr",
           "heads_long_chosen_lr", "heads_long_lrs", "heads_long_name", "heads_long_plan",
           "heads_long_points", "heads_long_runs", "heads_long_sweep", "heads_moved", "heads_moving",
           "heads_name", "heads_points", "heads_runs", "heads_sweep", "heads_unsettled", "lm_runs", "load",
           "names", "path", "recall_name", "recall_sweep"]

# The plan the stored files follow, read by scripts/stored_runs.py (which makes them), by
# tests/lm/test_stored_runs.py (which checks them) and by the training chapter (which shows them).
RECALL_SWEEP_LRS = ("1e-3", "3e-3", "1e-2")  # the recall sweep's rates
RECALL_SWEEP_WIDTH = 48  # the recall sweep tries the rates at the middle width, seed 0


# One epoch of the language model (the ``epoch`` preset, 3,000 steps): every layer's rate swept at that
# budget with seed 0 (EPOCH_LRS, 30x; a rate beyond is added where the best sits at an edge), then more
# seeds at the chosen rate. The layers the conclusions rest on come first.
EPOCH_LRS = ("1e-3", "3e-3", "1e-2", "3e-2")
# Past an edge of EPOCH_LRS the next rate out is run, and the next after it, a factor of about 3 each,
# until the best rate lies inside or a run diverges.
EPOCH_BEYOND = {"1e-3": "3e-4", "3e-4": "1e-4", "1e-4": "3e-5", "3e-5": "1e-5",
                "3e-2": "1e-1", "1e-1": "3e-1", "3e-1": "1e0", "1e0": "3e0"}
EPOCH_CORE = ("softmax", "elu+1", "retnet", "simple_gla_const", "simple_gla", "softmax-conv4", "deltanet",
              "gla")
EPOCH_OTHERS = ("relu", "performer", "retnet_no_decay", "deltanet_additive")
EPOCH_SEEDS = (0, 1, 2)
EPOCH_MORE_SEEDS = (3, 4)  # both sides of a contrast whose three-seed mean difference is under EPOCH_CLOSE
EPOCH_CLOSE = 0.05  # nats per character
# The contrasts the chapter reads, ``(what changes, a, b)``: a paired difference a - b over the seeds. Where
# the two sides chose other rates, b is also trained at a's rate (the same seeds), so the contrast is
# also shown at one shared rate.
EPOCH_CONTRASTS = (
    ("linear attention (elu+1) instead of softmax", "elu+1", "softmax"),
    ("a fixed decay per head", "retnet", "retnet_no_decay"),
    ("the decay learned (a constant per head)", "simple_gla_const", "retnet"),
    ("the decay read from the input", "simple_gla", "simple_gla_const"),
    ("a gate per key channel, from fla's start", "gla", "simple_gla"),
    ("the delta rule's overwrite", "deltanet", "deltanet_additive"),
    ("ReLU features instead of elu+1", "relu", "elu+1"),
    ("Performer features instead of elu+1", "performer", "elu+1"),
    ("a short convolution in front of softmax", "softmax-conv4", "softmax"),
    ("DeltaNet against softmax, both with the convolution", "deltanet", "softmax-conv4"),
)


# Recall against state size at fixed parameters (the ``heads`` preset of ``python -m linattn_core.mqar``:
# width 32, 3,000 steps). The number of heads H varies, so a linear layer keeps D^2 / H numbers while the
# parameters stay the same, and the pairs go past each state's capacity. At every point (layer, H, pairs)
# the rate is swept with seed 0 (RECALL_LRS, 30x; a rate beyond where the best sits at an edge), then
# seeds 1 and 2 run at the chosen rate.
RECALL_HEADS = (4, 1, 2)  # the order the plan runs them: the two ends of the state axis first
RECALL_LRS = EPOCH_LRS
RECALL_SEEDS = (0, 1, 2)
# every rate the sweeps know, low to high (RECALL_LRS and the rates past its edges, about 3x apart): the
# longer budgets step along it, down where a seed diverged and to both sides when their rate is swept
RATE_LADDER = tuple(sorted({*RECALL_LRS, *EPOCH_BEYOND, *EPOCH_BEYOND.values()}, key=float))
# A point not settled at 3,000 steps (a seed below 0.99 moved more than HEADS_FLAT over its last 1,000
# steps, or a seed ended below HEADS_SETTLED: the longer runs showed that a seed far below the ceiling
# can sit on a plateau for more than 1,000 steps and then rise) runs again, every seed, for
# HEADS_LONG_STEPS at the rate its 3,000-step sweep chose (where a seed diverges there, every seed again
# at the next lower rate: heads_long_lrs): ``mqar-long-KIND-hH-pP-lrRATE-seedS.json``. Each longer budget
# then sweeps its own rate around that one (heads_long_chosen_lr), and the point is read there, every
# seed. A point still moving at HEADS_LONG_STEPS at the rate that budget chose runs once more, for
# HEADS_LONGER_STEPS (the cap), starting at that rate: ``mqar-longer-...``.
HEADS_FLAT = 0.02
HEADS_SETTLED = 0.95
HEADS_LONG_STEPS = 9000
HEADS_LONGER_STEPS = 18000
_LONG_PREFIX = {HEADS_LONG_STEPS: "mqar-long", HEADS_LONGER_STEPS: "mqar-longer"}
# Longer runs stored outside the plan, kept because the chapter shows them: elu+1 with four heads at 16
# pairs ran for HEADS_LONGER_STEPS at 3e-1 (the rate it started its 9,000 steps at, still moving there)
# before its sweep at 9,000 steps chose 1e-1, where every seed was flat; six times the 3,000 steps at the
# first rate ended below three times them at the rate the longer sweep chose.
HEADS_LONG_EXTRA = tuple(f"mqar-longer-elu+1-h4-p16-lr3e-1-seed{seed}.json" for seed in RECALL_SEEDS)


def epoch_name(name: str, lr: str, seed: int) -> str:
    """The file of one one-epoch language-model run: ``epoch-NAME-lrRATE-seedS.json``."""
    return f"epoch-{name}-lr{lr}-seed{seed}.json"


def epoch_sweep(name: str) -> dict[str, dict[str, Any]]:
    """The stored one-epoch runs of seed 0 of a layer (``name`` as in :func:`lm_runs`), by rate as
    written; FileNotFoundError if none is stored."""
    prefix, suffix = f"epoch-{name}-lr", "-seed0.json"
    runs = {n[len(prefix):-len(suffix)]: load(n) for n in names(f"{prefix}*{suffix}")}
    if not runs:
        raise FileNotFoundError(f"no stored one-epoch sweep for {name!r} (files {prefix}*{suffix})")
    return runs


class SweepIncomplete(LookupError):
    """A sweep that cannot choose a rate yet; ``rates`` are the ones to run next (seed 0)."""

    def __init__(self, message: str, rates: tuple[str, ...]) -> None:
        super().__init__(message)
        self.rates = rates


def _best(runs: dict[str, dict[str, Any]], score: Any) -> str | None:
    # the rate whose run scores lowest; None where every run diverged (score None)
    finite = {lr: score(r) for lr, r in runs.items() if score(r) is not None}
    return min(finite, key=finite.__getitem__) if finite else None


def _choose(runs: dict[str, dict[str, Any]], rates: tuple[str, ...], score: Any, what: str) -> str:
    """The rate of ``runs`` (``{rate as written: run}``, seed 0) with the best ``score(run)`` (lowest
    first), once every rate of ``rates`` is stored and the best is not at an edge with the rate past it
    unstored (:class:`SweepIncomplete` names the rates to run). A diverged run (score None) is never
    chosen."""
    missing = tuple(lr for lr in rates if lr not in runs)
    if missing:
        raise SweepIncomplete(f"the sweep of {what} lacks the rates {list(missing)}", missing)
    best = _best(runs, score)
    if best is None:
        raise ValueError(f"every rate of the sweep of {what} diverged: sweep lower rates")
    ordered = sorted(runs, key=float)
    beyond = EPOCH_BEYOND.get(best)
    if best in (ordered[0], ordered[-1]) and beyond is not None and beyond not in runs:
        raise SweepIncomplete(f"the best rate of {what}, {best}, is at an edge of its sweep", (beyond,))
    return best


def epoch_chosen_lr(name: str) -> str:
    """The rate of the layer's one-epoch sweep with the lowest final validation loss, as written.

    Raises :class:`SweepIncomplete` while a rate of :data:`EPOCH_LRS` is not stored, or while the best
    stored rate sits at an edge of the stored rates and the rate past it (:data:`EPOCH_BEYOND`) is not
    stored: a chosen rate lies inside the swept range. A diverged run is never chosen.
    """
    try:
        runs = epoch_sweep(name)
    except FileNotFoundError:
        runs = {}
    return _choose(runs, EPOCH_LRS, lambda r: r["final_val_loss"], f"{name!r} (one epoch)")


def epoch_runs(name: str, lr: str | None = None) -> dict[int, dict[str, Any]]:
    """The stored one-epoch runs of a layer at rate ``lr`` (default: the rate its sweep chose), by seed."""
    lr = epoch_chosen_lr(name) if lr is None else lr
    prefix = f"epoch-{name}-lr{lr}-seed"
    return {int(n[len(prefix):-len(".json")]): load(n) for n in names(f"{prefix}*.json")}


def recall_name(preset: str, kind: str, width: int, pairs: int, seed: int) -> str:
    """The file of one stored recall run of the ``state`` preset (``mqar-KIND-wWIDTH-seedS.json``: the
    width varies) or of the ``capacity`` preset (``mqar-capacity-KIND-pPAIRS-seedS.json``: the pairs do)."""
    if preset == "state":
        return f"mqar-{kind}-w{width}-seed{seed}.json"
    if preset == "capacity":
        return f"mqar-capacity-{kind}-p{pairs}-seed{seed}.json"
    raise ValueError(f"preset must be 'state' or 'capacity' (the stored recall runs), got {preset!r}")


def heads_name(kind: str, heads: int, pairs: int, lr: str, seed: int) -> str:
    """The file of one run of the recall plan at fixed parameters:
    ``mqar-heads-KIND-hH-pP-lrRATE-seedS.json``."""
    return f"mqar-heads-{kind}-h{heads}-p{pairs}-lr{lr}-seed{seed}.json"


def heads_sweep(kind: str, heads: int, pairs: int) -> dict[str, dict[str, Any]]:
    """The stored seed-0 runs of one point of the recall plan, by rate as written (empty if none)."""
    prefix, suffix = f"mqar-heads-{kind}-h{heads}-p{pairs}-lr", "-seed0.json"
    return {n[len(prefix):-len(suffix)]: load(n)["runs"][0] for n in names(f"{prefix}*{suffix}")}


def _recall_score(run: dict[str, Any]) -> tuple[float, float] | None:
    # the highest held-out accuracy, then the lowest loss; None where the run diverged
    return None if run["final_accuracy"] is None else (-run["final_accuracy"], run["final_loss"])


def heads_best_lr(kind: str, heads: int, pairs: int) -> str | None:
    """The best stored rate of one point's sweep so far (highest final accuracy, then lowest loss), as
    written; None while nothing finite is stored. The rate its further seeds run at: the runner starts
    them once the sweep is complete (:func:`heads_chosen_lr`), and this is the rule it chose by."""
    return _best(heads_sweep(kind, heads, pairs), _recall_score)


def heads_chosen_lr(kind: str, heads: int, pairs: int) -> str:
    """The rate one point of the recall plan chose (highest final accuracy, then lowest loss), as written;
    :class:`SweepIncomplete` while its sweep (:data:`RECALL_LRS`, a rate past an edge) is not stored."""
    return _choose(heads_sweep(kind, heads, pairs), RECALL_LRS, _recall_score,
                   f"{kind!r} with {heads} heads and {pairs} pairs (recall)")


def heads_runs(kind: str, heads: int, pairs: int, lr: str | None = None) -> dict[int, dict[str, Any]]:
    """The stored runs of one point of the recall plan at rate ``lr`` (default: the chosen one), by seed."""
    lr = heads_chosen_lr(kind, heads, pairs) if lr is None else lr
    return _by_seed(f"mqar-heads-{kind}-h{heads}-p{pairs}-lr{lr}-seed")


def _by_seed(prefix: str) -> dict[int, dict[str, Any]]:
    # the one run of each stored file ``PREFIX<seed>.json``, by seed
    return {int(n[len(prefix):-len(".json")]): load(n)["runs"][0] for n in names(f"{prefix}*.json")}


def heads_points(kinds: tuple[str, ...], pairs: tuple[int, ...]
                 ) -> dict[tuple[str, int, int], dict[str, Any]]:
    """Every point ``(kind, heads, pairs)`` of the recall plan with what is stored of it: ``sweep``
    (``{rate: final accuracy or None where it diverged}``), ``lr`` (the chosen rate, None while the sweep
    is incomplete) and ``runs`` (``{seed: run}`` at that rate); ``complete`` once every seed of
    :data:`RECALL_SEEDS` is stored."""
    points = {}
    for heads in sorted(RECALL_HEADS):
        for n in pairs:
            for kind in kinds:
                sweep = {lr: run["final_accuracy"] for lr, run in heads_sweep(kind, heads, n).items()}
                try:
                    lr = heads_chosen_lr(kind, heads, n)
                except SweepIncomplete:
                    lr = None
                runs = {} if lr is None else heads_runs(kind, heads, n, lr)
                points[kind, heads, n] = {"sweep": sweep, "lr": lr, "runs": runs,
                                          "complete": all(s in runs for s in RECALL_SEEDS)}
    return points


def heads_moved(run: dict[str, Any], last: int = 1000) -> float:
    """How far a recall run's held-out accuracy moved over its last ``last`` steps; 0 for a run that ended
    at the ceiling (0.99 or more), which has nowhere left to go."""
    c = run["curves"]
    if c["val_accuracy"][-1] >= 0.99:
        return 0.0
    end = c["val_step"][-1]
    before = [a for t, a in zip(c["val_step"], c["val_accuracy"], strict=True) if t <= end - last]
    if not before:
        raise ValueError(f"the run has no evaluation {last} steps before its last (step {end})")
    return abs(c["val_accuracy"][-1] - before[-1])


def heads_moving(point: dict[str, Any]) -> bool:
    """Whether a point of :func:`heads_points` was still moving when its runs stopped: a seed moved more
    than :data:`HEADS_FLAT` over its last 1,000 steps."""
    return any(heads_moved(run) > HEADS_FLAT for run in point["runs"].values())


def heads_unsettled(point: dict[str, Any]) -> bool:
    """Whether a complete point of :func:`heads_points` runs again for longer: a seed still moving
    (:func:`heads_moving`), diverged, or ended below :data:`HEADS_SETTLED`."""
    # a diverged run has no curve to the end, so it is read first
    low = any(run["final_accuracy"] is None or run["final_accuracy"] < HEADS_SETTLED
              for run in point["runs"].values())
    return low or heads_moving(point)


def _check_budget(steps: int) -> int:
    if steps not in _LONG_PREFIX:
        raise ValueError(f"steps must be one of the longer budgets {sorted(_LONG_PREFIX)}, got {steps!r}")
    return steps


def _budget_before(steps: int) -> int | None:
    # the longer budget before ``steps`` (None for the first)
    return max((b for b in _LONG_PREFIX if b < _check_budget(steps)), default=None)


def heads_long_name(kind: str, heads: int, pairs: int, lr: str, seed: int,
                    steps: int = HEADS_LONG_STEPS) -> str:
    """The file of one longer run of a point of the recall plan: ``mqar-long-KIND-hH-pP-lrRATE-seedS.json``
    (:data:`HEADS_LONG_STEPS`) or ``mqar-longer-...`` (:data:`HEADS_LONGER_STEPS`)."""
    return f"{_LONG_PREFIX[_check_budget(steps)]}-{kind}-h{heads}-p{pairs}-lr{lr}-seed{seed}.json"


def _long_start(kind: str, heads: int, pairs: int, steps: int) -> str:
    # the first rate of a budget: the rate the budget before chose (the 3,000-step sweep's for the first)
    before = _budget_before(steps)
    if before is None:
        return heads_chosen_lr(kind, heads, pairs)
    return heads_long_chosen_lr(kind, heads, pairs, before)


def heads_long_runs(kind: str, heads: int, pairs: int, lr: str | None = None,
                    steps: int = HEADS_LONG_STEPS) -> dict[int, dict[str, Any]]:
    """The stored longer runs (``steps``) of one point of the recall plan at rate ``lr`` (default: the
    first rate of that budget: :func:`heads_long_lrs`), by seed; empty if none."""
    lr = _long_start(kind, heads, pairs, steps) if lr is None else lr
    return _by_seed(heads_long_name(kind, heads, pairs, lr, 0, steps)[: -len("0.json")])


def heads_long_lrs(kind: str, heads: int, pairs: int, steps: int = HEADS_LONG_STEPS) -> list[str]:
    """The rates one point's longer runs of ``steps`` go at before their own sweep, in order. The first:
    for :data:`HEADS_LONG_STEPS` the rate its 3,000-step sweep chose, for :data:`HEADS_LONGER_STEPS` the
    rate its sweep at 9,000 steps chose (:func:`heads_long_chosen_lr`). Then, each time every seed is
    stored at the last rate and one of them diverged, the next lower rate of the sweeps' ladder
    (:data:`RECALL_LRS` and the rates past its edges). A seed lost to divergence leaves no reading of
    the point, and a lower rate is the usual cure; the budget's own sweep starts from the last rate."""
    rates = [_long_start(kind, heads, pairs, steps)]
    while True:
        runs = heads_long_runs(kind, heads, pairs, rates[-1], steps)
        complete = all(s in runs for s in RECALL_SEEDS)
        lost = complete and any(r["final_accuracy"] is None for r in runs.values())
        lower = [lr for lr in RATE_LADDER if float(lr) < float(rates[-1])]
        if not (lost and lower):
            return rates
        rates.append(lower[-1])


def heads_long_sweep(kind: str, heads: int, pairs: int,
                     steps: int = HEADS_LONG_STEPS) -> dict[str, dict[str, Any]]:
    """The stored seed-0 runs of one point at a longer budget, by rate of :data:`RATE_LADDER`, low to
    high (empty if none)."""
    return {lr: r[0] for lr in RATE_LADDER if 0 in (r := heads_long_runs(kind, heads, pairs, lr, steps))}


def heads_long_chosen_lr(kind: str, heads: int, pairs: int, steps: int = HEADS_LONG_STEPS) -> str:
    """The rate a point's longer runs choose at their own budget, the rate the point is read at there:
    seed 0 runs for ``steps`` at the last rate of :func:`heads_long_lrs` and at the ladder's rates on both
    sides of it, and past an edge where the best sits there; the best (highest accuracy, then lowest
    loss, a diverged run never) is chosen, and every seed runs there (:func:`heads_long_plan`).

    Raises :class:`SweepIncomplete` (with the rates to run next, seed 0) while a rate is missing; a
    rate chosen at 3,000 steps need not be the best at three times the steps.
    """
    ladder, read = RATE_LADDER, heads_long_lrs(kind, heads, pairs, steps)[-1]
    runs = heads_long_sweep(kind, heads, pairs, steps)
    i = ladder.index(read)
    what = f"{kind!r} with {heads} heads and {pairs} pairs at {steps:,} steps (recall)"
    missing = tuple(lr for lr in ladder[max(i - 1, 0): i + 2] if lr not in runs)
    if missing:
        raise SweepIncomplete(f"the sweep of {what} lacks the rates {list(missing)}", missing)
    best = _best(runs, _recall_score)
    if best is None:
        raise ValueError(f"every rate of the sweep of {what} diverged")
    tried, j = sorted(runs, key=float), ladder.index(best)
    for edge, k in ((tried[0], j - 1), (tried[-1], j + 1)):
        if best == edge and 0 <= k < len(ladder) and ladder[k] not in runs:
            raise SweepIncomplete(f"the best rate of {what}, {best}, is at an edge of its sweep",
                                  (ladder[k],))
    return best


def heads_long_plan(kind: str, heads: int, pairs: int,
                    steps: int = HEADS_LONG_STEPS) -> list[tuple[str, int]]:
    """The longer runs ``(rate, seed)`` of one point that the plan lists so far, in order: every seed at
    each rate of :func:`heads_long_lrs`; once those are stored, seed 0 at each rate its sweep at this
    budget has tried or asks for next (:func:`heads_long_chosen_lr`), and every seed at the rate it
    chooses."""
    lrs = heads_long_lrs(kind, heads, pairs, steps)
    jobs = [(lr, seed) for lr in lrs for seed in RECALL_SEEDS]
    if not all(seed in heads_long_runs(kind, heads, pairs, lrs[-1], steps) for seed in RECALL_SEEDS):
        return jobs
    tried = list(heads_long_sweep(kind, heads, pairs, steps))
    try:
        chosen, more = [heads_long_chosen_lr(kind, heads, pairs, steps)], ()
    except SweepIncomplete as incomplete:
        chosen, more = [], incomplete.rates
    except ValueError:  # every rate diverged: nothing to choose
        chosen, more = [], ()
    sweep = [(lr, 0) for lr in sorted({*tried, *more}, key=float)]
    seeds = [(lr, seed) for lr in chosen for seed in RECALL_SEEDS]
    return list(dict.fromkeys(jobs + sweep + seeds))  # each run once, where it is first listed


def heads_long_points(kinds: tuple[str, ...], pairs: tuple[int, ...], steps: int = HEADS_LONG_STEPS
                      ) -> list[tuple[str, int, int]]:
    """The points ``(kind, heads, pairs)`` that run for ``steps``: for :data:`HEADS_LONG_STEPS` every
    complete point not settled at 3,000 steps (:func:`heads_unsettled`); for :data:`HEADS_LONGER_STEPS`
    every one of those whose sweep at 9,000 steps has chosen a rate, with every seed stored there and
    still moving (a seed that diverged at the ladder's end is left out of that test)."""
    before = _budget_before(steps)
    if before is None:
        return [key for key, point in heads_points(kinds, pairs).items()
                if point["complete"] and heads_unsettled(point)]
    moving = []
    for key in heads_long_points(kinds, pairs, before):
        try:
            lr = heads_long_chosen_lr(*key, before)
        except (SweepIncomplete, ValueError):  # not chosen yet, or every rate diverged: nothing to read
            continue
        runs = heads_long_runs(*key, lr, before)
        finite = {s: r for s, r in runs.items() if r["final_accuracy"] is not None}
        if all(s in runs for s in RECALL_SEEDS) and heads_moving({"runs": finite}):
            moving.append(key)
    return moving


def lm_runs() -> dict[str, tuple[str, int | None]]:
    """The language-model runs by file name: ``{name: (attention, conv kernel or None for the layer's own)}``.

    Every layer as its paper has it, and ``softmax-conv4``: softmax with DeltaNet's short
    convolution (kernel 4), the contrast that says how much of DeltaNet's lead is the convolution.
    """
    from .layers import LAYERS  # torch, only for whoever asks for the plan

    return {kind: (kind, None) for kind in LAYERS} | {"softmax-conv4": ("softmax", 4)}


def directory() -> Path:
    """The folder of the stored results, inside the installed package."""
    # linattn_core is a regular package, so on a file system this is a plain Path
    return Path(str(resources.files("linattn_core") / "lm" / "results"))


def names(pattern: str = "*.json") -> list[str]:
    """The stored files whose names match ``pattern`` (a shell pattern), sorted."""
    folder = directory()
    found = folder.iterdir() if folder.is_dir() else ()
    return sorted(p.name for p in found if p.is_file() and fnmatch.fnmatchcase(p.name, pattern))


def path(name: str) -> Path:
    """The path of the stored file ``name`` (e.g. ``"epoch-softmax-lr1e-2-seed0.json"``); a clear error
    if there is none."""
    if not isinstance(name, str) or not name or Path(name).name != name:
        raise ValueError(f"name must be a file name such as 'epoch-softmax-lr1e-2-seed0.json', got {name!r}")
    found = directory() / name
    if not found.is_file():
        raise FileNotFoundError(f"no stored result {name!r} in {directory()}; the stored files are: "
                                f"{', '.join(names()) or 'none (the package was installed without them)'}")
    return found


def load(name: str) -> dict[str, Any]:
    """The stored result ``name``, read from its JSON file."""
    return json.loads(path(name).read_text(encoding="utf-8"))


def recall_sweep(kind: str) -> dict[str, dict[str, Any]]:
    """The stored learning-rate sweep of one layer on the recall task: ``{rate as written: the run}``
    from ``mqar-sweep-KIND-lrRATE.json`` (one run each, the same width and seed)."""
    prefix = f"mqar-sweep-{kind}-lr"
    runs = {name[len(prefix):-len(".json")]: load(name)["runs"][0] for name in names(f"{prefix}*.json")}
    if not runs:
        raise FileNotFoundError(f"no stored recall sweep for {kind!r} (files {prefix}*.json)")
    return runs


def chosen_recall_lr(kind: str) -> str:
    """The rate of the layer's recall sweep with the highest final accuracy (then the lowest loss); a run
    that diverged is never chosen."""
    runs = {lr: run for lr, run in recall_sweep(kind).items() if run["final_accuracy"] is not None}
    if not runs:
        raise ValueError(f"every rate of the recall sweep of {kind!r} diverged: sweep lower rates")
    return max(runs, key=lambda lr: (runs[lr]["final_accuracy"], -runs[lr]["final_loss"]))
