"""Multi-query associative recall (MQAR, Arora et al. 2023), trained: ``python -m linattn_core.mqar``.

::

    python -m linattn_core.mqar --preset book                                 # the chapter's small run
    python -m linattn_core.mqar --preset full --json results/mqar_full.json   # the stored full run

The task. A sequence holds ``n_pairs`` key-value pairs, then ``n_queries`` queries, each a key that
appeared among the pairs followed by its value::

    k_1 v_1 k_2 v_2 ... k_n v_n   q_1 a_1 q_2 a_2 ... q_m a_m      a_i = the value stored under q_i

Keys are the tokens ``0 .. n_keys - 1``, values ``n_keys .. n_keys + n_values - 1``. The keys of one
sequence are distinct, the values are drawn independently and uniformly, each query is one of the
stored keys drawn uniformly (so some keys are asked twice, others never). Drawing the queries
independently matters: if they asked every key once, a model could answer the last ones by
elimination (the stored value not yet given as an answer) without looking any key up. The model
reads the sequence left to right (causal) and is scored only where the next token is an answer:
at the position of each query key ``q_i`` it must output ``a_i``. Every other target is
:data:`IGNORE`, so the loss and the accuracy count the query positions only.
No fixed input-output map solves it: the answer depends on the pairs of that one sequence, so the
model has to look the key up in its context (attention) or in its state (the linear kinds).

A model that does not read the context can do no better than :func:`chance` = ``1 / n_values``:
the value under a key is uniform and independent of everything outside the sequence. A model that
reads the context but not the keys, and answers with one of the stored values at random, gets
:func:`bag_chance`; one that answers with the most frequent stored value gets :func:`mode_chance`,
the best that never reads a key. Above that, a model has looked keys up.

Training reuses the language model of :mod:`linattn_core.lm.model` (the attention chosen by name) and
the optimiser and schedule of :mod:`linattn_core.lm.train`: AdamW, linear warm-up, cosine decay,
gradient clipping. The batch of step ``i`` is drawn from ``numpy.random.default_rng([seed, i])``,
the accuracy is measured on fixed held-out batches, so a run is deterministic on a given machine.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._provenance import environment, git_commit
from .model import KINDS, LanguageModel, ModelConfig
from .train import TrainConfig, lr_at, make_optimizer, optimizer_step

__all__ = ["IGNORE", "PRESETS", "RECALL_KINDS", "RecallConfig", "accuracy", "bag_chance", "chance",
           "make_batch", "merge", "mode_chance", "recall_loss", "replay_losses", "run_preset", "train_recall"]

IGNORE = -100  # target of every position that is not a query (F.cross_entropy's ignore_index)
RECALL_KINDS = ("softmax", "elu+1", "decay", "delta")


def _check_sizes(batch: int, n_pairs: int, n_keys: int, n_values: int, n_queries: int) -> None:
    for name, value in (("batch", batch), ("n_pairs", n_pairs), ("n_keys", n_keys),
                        ("n_values", n_values), ("n_queries", n_queries)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if n_pairs > n_keys:
        raise ValueError(f"n_pairs ({n_pairs}) needs as many distinct keys, but n_keys is {n_keys}")


def make_batch(batch: int, n_pairs: int, *, n_keys: int = 16, n_values: int = 16,
               n_queries: int | None = None, seed: int | list[int] = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch of MQAR sequences: ``inputs, targets``, both ``(batch, 2 n_pairs + 2 n_queries)`` int64.

    ``targets[b, t]`` is the answer where ``inputs[b, t]`` is a query key and :data:`IGNORE`
    everywhere else. ``n_queries`` defaults to ``n_pairs``.
    The same ``seed`` gives the same batch on every machine (numpy's PCG64).
    """
    n_queries = n_pairs if n_queries is None else n_queries
    _check_sizes(batch, n_pairs, n_keys, n_values, n_queries)
    rng = np.random.default_rng(seed)
    keys = np.argsort(rng.random((batch, n_keys)), axis=1)[:, :n_pairs]  # (B, n) distinct keys
    values = n_keys + rng.integers(0, n_values, size=(batch, n_pairs))  # (B, n)
    asked = rng.integers(0, n_pairs, size=(batch, n_queries))  # (B, m) which pairs, independently
    q, a = np.take_along_axis(keys, asked, 1), np.take_along_axis(values, asked, 1)  # (B, m)
    pairs = np.stack([keys, values], 2).reshape(batch, 2 * n_pairs)
    queries = np.stack([q, a], 2).reshape(batch, 2 * n_queries)
    inputs = np.concatenate([pairs, queries], 1)
    targets = np.full_like(inputs, IGNORE)
    targets[:, 2 * n_pairs :: 2] = a  # at a query key, the next token is its answer
    return torch.from_numpy(inputs).long(), torch.from_numpy(targets).long()


def chance(n_values: int) -> float:
    """Accuracy of the best guess that ignores the context: the value is uniform over ``n_values``."""
    return 1.0 / n_values


def bag_chance(n_pairs: int, n_values: int) -> float:
    """Accuracy of answering with one of the ``n_pairs`` stored values picked uniformly at random.

    The stored value under the query is picked with probability ``1 / n``; each of the other
    ``n - 1`` values equals the answer with probability ``1 / n_values``, independently. So the
    exact expectation is ``(1 + (n - 1) / n_values) / n``.
    """
    return (1.0 + (n_pairs - 1) / n_values) / n_pairs


def mode_chance(n_pairs: int, n_values: int, *, samples: int = 100_000, seed: int = 0) -> float:
    """Accuracy of answering with the most frequent stored value (ties broken at random), estimated
    on ``samples`` sequences: the best a model can do that reads the values but never a key.

    Values repeat within a sequence when ``n_pairs`` is not small against ``n_values``, so this is
    above :func:`bag_chance`; a model above it must have looked keys up.
    """
    x, y = make_batch(samples, n_pairs, n_keys=n_pairs, n_values=n_values, n_queries=1, seed=seed)
    values = x[:, 1 : 2 * n_pairs : 2].numpy() - n_pairs  # (S, n) in 0 .. n_values - 1
    answer = y[:, 2 * n_pairs].numpy() - n_pairs  # (S,)
    counts = np.zeros((samples, n_values))
    np.add.at(counts, (np.arange(samples)[:, None], values), 1.0)
    top = counts == counts.max(1, keepdims=True)  # (S, V): the most frequent values
    return float(np.mean(top[np.arange(samples), answer] / top.sum(1)))


def recall_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the query positions only. logits: (B, T, vocab), targets: (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)


def accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of query positions whose most likely token is the answer (other positions ignored)."""
    mask = targets != IGNORE
    if not bool(mask.any()):
        raise ValueError("targets hold no query position (every entry is IGNORE)")
    return float((logits.argmax(-1)[mask] == targets[mask]).float().mean())


@dataclass(frozen=True)
class RecallConfig:
    """One MQAR run: the task, the model and the optimisation."""

    attention: str = "softmax"
    n_embd: int = 64  # the model width
    n_pairs: int = 4
    steps: int = 300
    n_keys: int = 16
    n_values: int = 16
    n_queries: int | None = None  # default n_pairs
    n_layer: int = 2
    n_head: int = 2
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.1
    eval_interval: int = 50
    eval_batch: int = 512  # held-out sequences for the accuracy
    seed: int = 0

    @property
    def seq_len(self) -> int:
        return 2 * self.n_pairs + 2 * (self.n_pairs if self.n_queries is None else self.n_queries)

    def model_config(self) -> ModelConfig:
        return ModelConfig(vocab_size=self.n_keys + self.n_values, attention=self.attention,
                           block_size=self.seq_len, n_layer=self.n_layer, n_head=self.n_head,
                           n_embd=self.n_embd, chunk_size=max(16, self.seq_len), seed=self.seed)

    def train_config(self) -> TrainConfig:
        """The language model's optimiser settings, with this run's rate, warm-up and length."""
        return TrainConfig(attention=self.attention, lr=self.lr, warmup_steps=self.warmup_steps,
                           max_steps=self.steps, weight_decay=self.weight_decay, seed=self.seed)

    def batch(self, size: int, seed: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return make_batch(size, self.n_pairs, n_keys=self.n_keys, n_values=self.n_values,
                          n_queries=self.n_queries, seed=seed)


@torch.no_grad()
def _evaluate(model: LanguageModel, cfg: RecallConfig) -> tuple[float, float]:
    """Loss and accuracy on the same held-out sequences every time (seed [seed, 2**31])."""
    model.eval()
    x, y = cfg.batch(cfg.eval_batch, [cfg.seed, 2**31])
    logits = model(x)
    model.train()
    return float(recall_loss(logits, y)), accuracy(logits, y)


def train_recall(kind: str, width: int, n_pairs: int, steps: int, *, progress: bool = False,
                 stop_after: int | None = None, **options: Any) -> dict:
    """Train one model on MQAR; return its configuration, curves and final held-out accuracy.

    ``options`` are the other fields of :class:`RecallConfig` (``n_keys``, ``lr``, ``seed``, ...).
    ``stop_after`` ends the run after that many steps (the schedule is still that of ``steps``).
    The results hold ``model`` (the trained :class:`~linattn_core.lm.model.LanguageModel`); the curves
    are ``step``/``loss`` (every step) and ``eval_step``/``eval_loss``/``eval_accuracy``.
    """
    from tqdm.auto import tqdm

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    for name, value in (("width", width), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    cfg = RecallConfig(attention=kind, n_embd=width, n_pairs=n_pairs, steps=steps, **options)
    cfg.batch(1, 0)  # the task's sizes are checked before any training
    tcfg = cfg.train_config()
    torch.manual_seed(cfg.seed)
    model = LanguageModel(cfg.model_config())
    opt = make_optimizer(model, tcfg)
    curves: dict[str, list] = {"step": [], "loss": [], "eval_step": [], "eval_loss": [], "eval_accuracy": []}
    t0 = time.perf_counter()
    end = steps if stop_after is None else min(steps, stop_after)
    for step in tqdm(range(end), desc=f"{kind} n={n_pairs}", disable=not progress, leave=False):
        if step % cfg.eval_interval == 0:
            _record_eval(model, cfg, step, curves)
        x, y = cfg.batch(cfg.batch_size, [cfg.seed, step])  # the batch depends only on (seed, step)
        loss = recall_loss(model(x), y)
        optimizer_step(opt, model, loss, lr_at(step, tcfg), tcfg.grad_clip)
        curves["step"].append(step)
        curves["loss"].append(loss.item())
    _record_eval(model, cfg, end, curves)
    wall = time.perf_counter() - t0
    return {"config": asdict(cfg), "parameters": model.num_parameters(), "chance": chance(cfg.n_values),
            "bag_chance": bag_chance(cfg.n_pairs, cfg.n_values),
            "final_accuracy": curves["eval_accuracy"][-1], "final_loss": curves["eval_loss"][-1],
            "wall_s": wall, "curves": curves, "model": model}


def _record_eval(model: LanguageModel, cfg: RecallConfig, step: int, curves: dict) -> None:
    loss, acc = _evaluate(model, cfg)
    curves["eval_step"].append(step)
    curves["eval_loss"].append(loss)
    curves["eval_accuracy"].append(acc)


@dataclass(frozen=True)
class Preset:
    """A sweep: every kind, width and number of pairs, with the same task and optimisation."""

    kinds: tuple[str, ...]
    widths: tuple[int, ...]
    pairs: tuple[int, ...]
    steps: int
    options: dict

    def runs(self) -> list[tuple[str, int, int]]:
        return [(k, w, n) for w in self.widths for n in self.pairs for k in self.kinds]


# The book's run: 8 keys + 8 values, width 32 with 2 heads, so each head's state is d_phi x d_v =
# 16 x 16 for elu+1 and decay (the delta rule's identity features: 16 too); a few seconds per kind.
_TASK = {"n_keys": 8, "n_values": 8, "batch_size": 32, "lr": 3e-3, "warmup_steps": 30,
         "eval_interval": 100, "eval_batch": 512}
# The stored run: a larger task and model (16 keys + 16 values, width 64 with 2 heads: states of
# 32 x 32 per head), up to 16 pairs, 3000 steps (about 5 minutes per model at 16 pairs on one core).
_FULL_TASK = {"n_keys": 16, "n_values": 16, "batch_size": 64, "lr": 3e-3, "warmup_steps": 100,
              "eval_interval": 250, "eval_batch": 512}
PRESETS: dict[str, Preset] = {
    # inside the book build: every kind once, a few seconds each on a 2-core CPU
    "book": Preset(RECALL_KINDS, (32,), (4,), 300, _TASK),
    # the stored run: accuracy against the number of pairs (one process per core, one thread each)
    "full": Preset(RECALL_KINDS, (64,), (2, 4, 8, 16), 3000, _FULL_TASK),
}

# How many per-step losses the stored JSON keeps in full (the reproduction test replays them);
# after that, one loss every LOSS_STRIDE steps keeps the file small.
FIRST_LOSSES = 10
LOSS_STRIDE = 10


def _stored(result: dict) -> dict:
    """A run's results as stored: no model, the loss curve thinned after its first steps."""
    curves = dict(result["curves"])
    step, loss = curves.pop("step"), curves.pop("loss")
    keep = [i for i in range(len(step)) if i < FIRST_LOSSES or i % LOSS_STRIDE == 0]
    curves["step"], curves["loss"] = [step[i] for i in keep], [loss[i] for i in keep]
    return {**{k: v for k, v in result.items() if k not in ("model", "curves")}, "curves": curves}


def run_preset(name: str, *, kinds: list[str] | None = None, progress: bool = True,
               threads: int | None = None) -> dict:
    """Run every configuration of a preset (or of its ``kinds`` only); return the runs with the commit,
    hardware and wall time. Every run is seeded on its own, so a sweep split by kind over several
    processes and merged (:func:`merge`) holds the same numbers as one process running them all."""
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    if threads is not None:
        torch.set_num_threads(threads)
    preset, t0, runs = PRESETS[name], time.perf_counter(), []
    commit = git_commit()  # the code that runs is the code at the start (HEAD may move meanwhile)
    if kinds is not None and not set(kinds) <= set(preset.kinds):
        raise ValueError(f"kinds must be among the preset's {preset.kinds}, got {kinds!r}")
    for kind, width, n_pairs in preset.runs():
        if kinds is not None and kind not in kinds:
            continue
        result = train_recall(kind, width, n_pairs, preset.steps, progress=progress, **preset.options)
        runs.append(_stored(result))
        print(f"{kind:8s} width {width:3d}  {n_pairs:2d} pairs: accuracy {result['final_accuracy']:.3f}"
              f" (chance {result['chance']:.3f}), {result['wall_s']:.1f} s", flush=True)
    return {"preset": name, "command": f"python -m linattn_core.mqar --preset {name}",
            "sweep": {**asdict(preset), "kinds": list(preset.kinds)}, "git_commit": commit,
            "hardware": environment("cpu"), "wall_s": time.perf_counter() - t0, "runs": runs}


def merge(parts: list[dict]) -> dict:
    """One sweep from several processes' parts of it (same preset): runs in preset order.

    Each part keeps the commit it started from in ``git_commits`` (kind -> commit): parts started
    seconds apart can see different commits of a tree others are committing to.
    """
    if len({p["preset"] for p in parts}) != 1:
        raise ValueError("the parts come from different presets")
    preset = PRESETS[parts[0]["preset"]]
    order = {run: i for i, run in enumerate(preset.runs())}

    def where(run: dict) -> int:
        c = run["config"]
        return order[(c["attention"], c["n_embd"], c["n_pairs"])]

    runs = sorted((r for p in parts for r in p["runs"]), key=where)
    commits = {r["config"]["attention"]: p["git_commit"] for p in parts for r in p["runs"]}
    same = len(set(commits.values())) == 1
    return {**parts[0], "runs": runs, "git_commit": parts[0]["git_commit"] if same else None,
            "git_commits": commits, "wall_s": max(p["wall_s"] for p in parts), "processes": len(parts),
            "wall_s_per_process": [p["wall_s"] for p in parts]}


def replay_losses(run: dict, steps: int) -> list[float]:
    """The first ``steps`` training losses of a stored run, recomputed from its configuration.

    The schedule depends on the run's length, so this trains the first steps of a run as long as
    the stored one and stops there.
    """
    cfg = dict(run["config"])
    kind, width, n_pairs, length = (cfg.pop(k) for k in ("attention", "n_embd", "n_pairs", "steps"))
    return train_recall(kind, width, n_pairs, length, stop_after=steps, **cfg)["curves"]["loss"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Train each attention kind on associative recall (MQAR).")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="book")
    parser.add_argument("--kinds", nargs="+", default=None, help="only these kinds of the preset")
    parser.add_argument("--merge", nargs="+", default=None, help="merge these parts' JSON into --json")
    parser.add_argument("--json", default=None, help="write the results here (e.g. results/mqar_full.json)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.merge:
        results = merge([json.loads(Path(p).read_text()) for p in args.merge])
        results["command"] = ("python -m linattn_core.mqar --preset full --kinds KIND --threads 1 --json PART"
                              " (one process per kind), then python -m linattn_core.mqar --merge PARTS"
                              f" --json {args.json}")
    else:
        results = run_preset(args.preset, kinds=args.kinds, progress=not args.no_progress,
                             threads=args.threads)
        results["command"] += f" --json {args.json}" if args.json else ""
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(f"{len(results['runs'])} runs in {results['wall_s']:.0f} s", f"-> {args.json}" if args.json else "")
    return results


if __name__ == "__main__":
    main()
