"""Run the training chapter's stored experiments: every command is the CLI a reader would type.

    python scripts/stored_runs.py lm-epoch  [--workers 2] [--dry-run]   # one epoch: rates, seeds, contrasts
    python scripts/stored_runs.py mqar-sweep / mqar-seeds [--workers 2]  # recall against state size
    python scripts/stored_runs.py mqar-capacity [--workers 2]  # recall of 4, 8, 16 pairs at width 32
    python scripts/stored_runs.py mqar-heads [--workers 2]  # recall against heads at fixed parameters
    python scripts/stored_runs.py mqar-heads-long  # its points not settled at 3,000 steps, run longer
    python scripts/stored_runs.py lm-epoch mqar-sweep mqar-seeds mqar-capacity  # all, sweeps first

Each job is one ``python -m linattn_core.train`` (or ``.mqar``) process on one thread, niced, writing
one JSON into ``linattn_core/lm/results/`` (package data: the chapter reads it through
``linattn_core.lm.stored``); a job whose file exists is skipped, so an interrupted plan resumes where
it stopped. The JSON records its own command, the commit at its start and the hardware, and
``tests/lm/test_stored_runs.py`` replays the first steps of every one. ``--workers`` processes run at
a time (one per core); the longest jobs start first (``lm-epoch``: in its own order, the core layers
first), and the list is made again after every job, so runs that wait on a sweep start as soon as it is
stored. Logs go to ``.cache/runs/``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from linattn_core.lm import mqar, stored  # noqa: E402  (the repository's package)
from linattn_core.lm.layers import LAYERS  # noqa: E402
from linattn_core.lm.stored import RECALL_SWEEP_LRS, RECALL_SWEEP_WIDTH  # noqa: E402
from linattn_core.lm.train import DIVERGED  # noqa: E402

RESULTS = stored.directory()
LOGS = ROOT / ".cache" / "runs"
# Relative cost of a training step, to start the longest jobs first (measured: tools/bench/layers.py).
COST = {"gla": 2.4, "deltanet": 1.8, "deltanet_additive": 1.6}
# The language-model runs as command-line arguments (the plan: linattn_core.lm.stored.lm_runs).
LM_RUNS = {name: [kind] + ([] if conv is None else ["--conv", str(conv)])
           for name, (kind, conv) in stored.lm_runs().items()}


def _epoch_job(name: str, lr: str, seed: int) -> tuple[list[str], Path]:
    kind, *extra = LM_RUNS[name]
    return (["-m", "linattn_core.train", "--attention", kind, *extra, "--preset", "epoch", "--lr", lr,
             "--seed", str(seed)], RESULTS / stored.epoch_name(name, lr, seed))


def _epoch_stage(names: tuple[str, ...]) -> list[tuple[list[str], Path]]:
    """The one-epoch jobs of ``names`` that can be listed now: first what the contrasts whose two sides
    are stored need (the second side at the first's rate, seeds 1 and 2, seed 0 being in the sweep; two
    more seeds of both sides of a close contrast), then layer by layer its sweep or its seeds at the
    chosen rate."""
    layers, extra, chosen = [], [], {}
    for name in names:  # a layer's sweep, then its seeds, so that whole layers land first
        try:
            chosen[name] = stored.epoch_chosen_lr(name)
        except stored.SweepIncomplete as incomplete:
            layers += [_epoch_job(name, lr, 0) for lr in incomplete.rates]
            continue
        layers += [_epoch_job(name, chosen[name], seed) for seed in stored.EPOCH_SEEDS if seed]
    for _, a, b in stored.EPOCH_CONTRASTS:
        if a not in chosen or b not in chosen:
            continue
        if chosen[a] != chosen[b]:
            extra += [_epoch_job(b, chosen[a], seed) for seed in stored.EPOCH_SEEDS if seed]
        runs_a, runs_b = stored.epoch_runs(a, chosen[a]), stored.epoch_runs(b, chosen[b])
        if all(s in runs_a and s in runs_b for s in stored.EPOCH_SEEDS):
            gap = np.mean([runs_a[s]["final_val_loss"] - runs_b[s]["final_val_loss"]
                           for s in stored.EPOCH_SEEDS])
            if abs(gap) < stored.EPOCH_CLOSE:
                extra += [_epoch_job(n, chosen[n], s) for s in stored.EPOCH_MORE_SEEDS for n in (a, b)]
    return extra + layers  # a contrast whose sides are stored is finished before more layers start


def lm_epoch() -> list[tuple[list[str], Path]]:
    """The one-epoch runs that can be listed now, in the order to run them: every core layer's sweep
    (seed 0 at each rate of ``EPOCH_LRS``, then the rate past an edge where the best sits at one), its
    seeds, what its contrasts need; then the same for the other layers."""
    jobs = _epoch_stage(stored.EPOCH_CORE) + _epoch_stage(stored.EPOCH_CORE + stored.EPOCH_OTHERS)
    first: dict[Path, tuple[list[str], Path]] = {}
    for args, out in jobs:
        first.setdefault(out, (args, out))  # each job once, where it is first listed
    return list(first.values())


def mqar_sweep() -> list[tuple[list[str], Path]]:
    preset = mqar.PRESETS["state"]
    width = str(RECALL_SWEEP_WIDTH)
    return [(["-m", "linattn_core.mqar", "--preset", "state", "--kinds", kind, "--widths", width,
              "--seeds", "0", "--lr", lr], RESULTS / f"mqar-sweep-{kind}-lr{lr}.json")
            for kind in preset.kinds for lr in RECALL_SWEEP_LRS]


def _recall_runs(preset: str) -> list[tuple[list[str], Path]]:
    """Every run of a stored recall preset, each layer at its recall sweep's rate; the command names the
    axis the preset varies (the width for ``state``, the pairs for ``capacity``)."""
    p = mqar.PRESETS[preset]
    jobs = []
    for kind, width, pairs, seed in p.runs():
        axes = (["--widths", str(width)] if len(p.widths) > 1 else []) + (
            ["--pairs", str(pairs)] if len(p.pairs) > 1 else [])
        args = ["-m", "linattn_core.mqar", "--preset", preset, "--kinds", kind, *axes, "--seeds", str(seed),
                "--lr", stored.chosen_recall_lr(kind)]
        jobs.append((args, RESULTS / stored.recall_name(preset, kind, width, pairs, seed)))
    return jobs


def mqar_seeds() -> list[tuple[list[str], Path]]:
    return _recall_runs("state")


def mqar_capacity() -> list[tuple[list[str], Path]]:
    return _recall_runs("capacity")


def mqar_heads() -> list[tuple[list[str], Path]]:
    """The recall plan at fixed parameters, point by point: the most pairs first (where the states run
    out), each at every number of heads (``RECALL_HEADS`` order), every layer (GLA, the slowest, after
    the others); each point's sweep (seed 0), then its seeds at the chosen rate, so whole points land
    first."""
    p = mqar.PRESETS["heads"]
    jobs = []
    for group in ([k for k in p.kinds if k != "gla"], ["gla"]):
        for pairs in sorted(p.pairs, reverse=True):
            for heads in stored.RECALL_HEADS:
                for kind in group:
                    try:
                        rates, seeds = (stored.heads_chosen_lr(kind, heads, pairs),), stored.RECALL_SEEDS[1:]
                    except stored.SweepIncomplete as incomplete:
                        rates, seeds = incomplete.rates, (0,)
                    jobs += [(["-m", "linattn_core.mqar", "--preset", "heads", "--kinds", kind, "--n-head",
                               str(heads), "--pairs", str(pairs), "--lr", lr, "--seeds", str(seed)],
                              RESULTS / stored.heads_name(kind, heads, pairs, lr, seed))
                             for lr in rates for seed in seeds]
    return jobs


def mqar_heads_long() -> list[tuple[list[str], Path]]:
    """Every run of the recall plan's longer budgets (:func:`stored.heads_long_plan`), in order: first
    each point's seeds at the rate its budget starts at (the points still moving at
    ``stored.HEADS_LONG_STEPS`` where they are read, for ``stored.HEADS_LONGER_STEPS``, the longest jobs,
    then each point not settled at 3,000 steps for ``stored.HEADS_LONG_STEPS``: DeltaNet's first, then
    GLA's and elu+1's, the most pairs first); then the rate swept at each longer budget (seed 0 on both
    sides of that rate, and every seed at a rate that beats it: the rate the point is read at), the most
    pairs first and ``stored.HEADS_LONGER_STEPS`` last."""
    p = mqar.PRESETS["heads"]
    order = ("deltanet", "gla", "elu+1", "softmax")
    first, sweep = [], []
    for steps in (stored.HEADS_LONGER_STEPS, stored.HEADS_LONG_STEPS):
        points = sorted(stored.heads_long_points(p.kinds, p.pairs, steps),
                        key=lambda key: (order.index(key[0]), -key[2], stored.RECALL_HEADS.index(key[1])))
        for kind, heads, pairs in points:
            lrs = stored.heads_long_lrs(kind, heads, pairs, steps)
            for lr, seed in stored.heads_long_plan(kind, heads, pairs, steps):
                job = (["-m", "linattn_core.mqar", "--preset", "heads", "--kinds", kind, "--n-head",
                        str(heads), "--pairs", str(pairs), "--lr", lr, "--steps", str(steps), "--seeds",
                        str(seed)],
                       RESULTS / stored.heads_long_name(kind, heads, pairs, lr, seed, steps))
                if lr in lrs:
                    first.append(job)
                else:
                    # GLA first within a budget and pair count: the slowest runs start first
                    sweep.append(((steps == stored.HEADS_LONGER_STEPS, -pairs, kind != "gla"), job))
    return first + [job for _, job in sorted(sweep, key=lambda item: item[0])]


PLANS = {"lm-epoch": lm_epoch, "mqar-sweep": mqar_sweep, "mqar-seeds": mqar_seeds,
         "mqar-capacity": mqar_capacity, "mqar-heads": mqar_heads, "mqar-heads-long": mqar_heads_long}
# plans whose own order is the order to run (the others: longest jobs first)
ORDERED = {"lm-epoch", "mqar-heads", "mqar-heads-long"}


def _kind(args: list[str]) -> str:
    return args[args.index("--attention" if "--attention" in args else "--kinds") + 1]


def _cost(args: list[str]) -> float:
    """Relative time of a job: its layer's step cost, times the width and, for a recall run, the
    sequence length (4 tokens per pair)."""
    width = int(args[args.index("--widths") + 1]) if "--widths" in args else 32
    pairs = int(args[args.index("--pairs") + 1]) if "--pairs" in args else 8
    return COST.get(_kind(args), 1.0) * width * 4 * pairs


def command(args: list[str], out: Path) -> list[str]:
    flag = "--out" if "linattn_core.train" in args else "--json"
    return ["nice", "-n", "5", sys.executable, *args, "--threads", "1", "--no-progress", flag,
            str(out.relative_to(ROOT))]


def run(job: tuple[list[str], Path]) -> tuple[Path, int, float]:
    args, out = job
    LOGS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(LOGS / (out.stem + ".log"), "w") as log:
        code = subprocess.run(command(args, out), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    return out, code, time.perf_counter() - start


def _in_flight() -> set[str]:
    """The output files named by training processes running now (another runner's, say), read from
    /proc: a job is not started twice. Empty where /proc is not there."""
    found = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        for flag in (b"--out", b"--json"):
            if flag in args[:-1]:
                found.add(args[args.index(flag) + 1].decode(errors="replace"))
    return found


def ready(plans: list[str], kinds: list[str] | None) -> list[tuple[list[str], Path]]:
    """The jobs of ``plans`` that can start now, are not stored and are not running elsewhere, in the
    order to run them. A plan whose runs wait on a sweep (its rates read from stored files) lists them
    once the sweep is stored."""
    busy = _in_flight()
    jobs = []
    for plan in plans:
        try:
            listed = PLANS[plan]()
        except (FileNotFoundError, LookupError):  # its sweep is not stored yet
            continue
        if plan not in ORDERED:
            listed.sort(key=lambda j: -_cost(j[0]))
        jobs += [j for j in listed if not j[1].exists() and (not kinds or _kind(j[0]) in kinds)
                 and str(j[1].relative_to(ROOT)) not in busy]
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", nargs="+", choices=sorted(PLANS), help="one queue of their jobs")
    parser.add_argument("--workers", type=int, default=2, help="processes at a time (one per core)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands that can start now")
    parser.add_argument("--kinds", nargs="+", choices=sorted(LAYERS), help="only these layers")
    args = parser.parse_args()
    # sweeps before the runs that read their chosen rates; the list is made again after every job, so
    # a layer's seeds start as soon as its own sweep is stored
    plans = [p for p in args.plans if "sweep" in p] + [p for p in args.plans if "sweep" not in p]
    if args.dry_run:
        jobs = ready(plans, args.kinds)
        print(f"{' + '.join(plans)}: {len(jobs)} jobs can start now (more may follow once sweeps are stored)")
        for job in jobs:
            print(shlex.join(command(*job)))
        return 0
    failed: set[Path] = set()  # not tried again by this call
    running: dict = {}  # future -> the file it writes
    with ThreadPoolExecutor(args.workers) as pool:
        while True:
            for job in ready(plans, args.kinds):
                if len(running) >= args.workers:
                    break
                if job[1] not in running.values() and job[1] not in failed:
                    running[pool.submit(run, job)] = job[1]
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for done in finished:
                del running[done]
                out, code, seconds = done.result()
                # a run that diverged is a result (stored, with the step): its rate is never chosen
                diverged = code == DIVERGED and out.is_file()
                if code != 0 and not diverged:
                    failed.add(out)
                word = "ok  " if code == 0 else "diverged (stored)" if diverged else "FAIL"
                print(f"{time.strftime('%H:%M')} {word} {out.name} ({seconds / 60:.1f} min)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
