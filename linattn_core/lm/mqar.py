"""Multi-query associative recall (MQAR, Arora et al. 2023), trained: ``python -m linattn_core.mqar``.

::

    python -m linattn_core.mqar --preset book                                 # the chapter's small run
    python -m linattn_core.mqar --preset state --kinds gla --widths 32 --seeds 0   # one stored run
    python -m linattn_core.mqar --preset capacity --kinds gla --pairs 16 --seeds 0   # a capacity run
    python -m linattn_core.mqar --kinds softmax deltanet --widths 32 64 --pairs 8 32 --conv 4 \\
        --lr 1e-3 --seeds 0 1 2 --n-keys 64 --n-values 64 --steps 3000 --json sweep.json

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
model has to look the key up in its context (attention) or in its state (the linear layers).

A model that does not read the context can do no better than :func:`chance` = ``1 / n_values``:
the value under a key is uniform and independent of everything outside the sequence. A model that
reads the context but not the keys, and answers with one of the stored values at random, gets
:func:`bag_chance`; one that answers with the most frequent stored value gets :func:`mode_chance`,
the best that never reads a key. Above that, a model has looked keys up.

Training reuses the language model of :mod:`linattn_core.lm.model` (the attention layer chosen by
name) and the training loop of :mod:`linattn_core.lm.train` (:func:`~linattn_core.lm.train.fit`):
AdamW, linear warm-up, cosine decay, gradient clipping. The batch of step ``i`` is drawn from
``numpy.random.default_rng([seed, i])``, the accuracy is measured on fixed held-out batches, so a
run is deterministic on a given machine. Each run of a sweep is seeded on its own, so a sweep split
over several processes (``--kinds``) and merged (``--merge``) holds the numbers of one process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._provenance import environment, git_commit, pick_device
from .model import CONV_INITS, KINDS, LanguageModel, ModelConfig
from .train import DIVERGED, FIRST_LOSSES, TrainConfig, fit, thin_curves

__all__ = ["FIRST_LOSSES", "IGNORE", "PRESETS", "Preset", "RecallConfig", "accuracy",
           "bag_chance", "chance", "make_batch", "merge", "mode_chance", "recall_loss", "replay_losses",
           "run_sweep", "train_recall"]

IGNORE = -100  # target of every position that is not a query (F.cross_entropy's ignore_index)


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
    """Accuracy of answering with the most frequent stored value, estimated on ``samples`` sequences:
    the best a model can do that reads the values but never a key.

    Ties are split: when ``m`` values share the top count, the answer is one of them picked at random,
    right with probability ``1 / m`` if the stored answer is among them. Values repeat within a
    sequence when ``n_pairs`` is not small against ``n_values``, so this is above :func:`bag_chance`;
    a model above it must have looked keys up.
    """
    x, y = make_batch(samples, n_pairs, n_keys=n_pairs, n_values=n_values, n_queries=1, seed=seed)
    values = x[:, 1 : 2 * n_pairs : 2].numpy()  # (S, n)
    answer = y[:, 2 * n_pairs].numpy()  # (S,)
    rows = max(1, 10_000_000 // (n_pairs * n_pairs))  # (rows, n, n) comparisons at a time
    hits = 0.0
    for s in range(0, samples, rows):
        vals, ans = values[s : s + rows], answer[s : s + rows]
        count = (vals[:, :, None] == vals[:, None, :]).sum(-1)  # (r, n): occurrences of each stored value
        top = count.max(1)  # (r,)
        n_modes = (count == top[:, None]).sum(1) / top  # distinct values with the top count
        answer_count = (vals == ans[:, None]).sum(1)
        hits += float(np.sum((answer_count == top) / n_modes))
    return hits / samples


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
    """One MQAR run: the task, the model and the optimisation. The defaults are the recall chapter's
    recipe (64 key and 64 value tokens, 2 layers of 2 heads, a short conv of 4 tokens in front of every
    mixer, batches of 64 fresh sequences, AdamW without weight decay, warm-up 100, a cosine to a tenth);
    the rate is swept per layer, so pass the one the layer's sweep chose (a number)."""

    attention: str = "softmax"
    n_embd: int = 32  # the model width
    n_pairs: int = 8
    steps: int = 1000
    n_keys: int = 64
    n_values: int = 64
    n_queries: int | None = None  # default n_pairs
    n_layer: int = 2
    n_head: int = 2
    conv: int | None = 4  # short conv kernel (None: each layer's own default, 0: none)
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.0
    eval_interval: int = 250
    eval_batch: int = 512  # held-out sequences for the accuracy
    seed: int = 0
    # the conv's filters start as torch draws them (uniform, std 0.29), not as fla does (normal, std
    # 0.02, the language model's choice): the stored recall runs were trained so, and with fla's start
    # softmax learns the book preset's lookup more slowly (see the recall chapter)
    conv_init: str = "uniform"

    def __post_init__(self) -> None:
        # a bad option is refused here, by name, before anything is built or trained
        if self.attention not in KINDS:
            raise ValueError(f"attention must be one of {KINDS}, got {self.attention!r}")
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ValueError(f"{name} must be a number, got {value!r}"
                                 + (" (a string: pass float(rate))" if isinstance(value, str) else ""))
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError(f"lr must be > 0 and weight_decay >= 0, got {self.lr!r} and"
                             f" {self.weight_decay!r}")
        for name in ("n_embd", "steps", "n_layer", "n_head", "batch_size", "eval_interval", "eval_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        warmup = self.warmup_steps
        if isinstance(warmup, bool) or not isinstance(warmup, (int, np.integer)) or warmup < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    @property
    def seq_len(self) -> int:
        return 2 * self.n_pairs + 2 * (self.n_pairs if self.n_queries is None else self.n_queries)

    def model_config(self) -> ModelConfig:
        return ModelConfig(vocab_size=self.n_keys + self.n_values, attention=self.attention,
                           block_size=self.seq_len, n_layer=self.n_layer, n_head=self.n_head,
                           n_embd=self.n_embd, chunk_size=max(16, self.seq_len), conv=self.conv,
                           conv_init=self.conv_init, seed=self.seed)

    def train_config(self) -> TrainConfig:
        """The training loop's settings: this run's rate, warm-up, length and evaluation interval."""
        return TrainConfig(attention=self.attention, lr=self.lr, warmup_steps=self.warmup_steps,
                           max_steps=self.steps, weight_decay=self.weight_decay,
                           eval_interval=self.eval_interval, seed=self.seed)

    def batch(self, size: int, seed: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return make_batch(size, self.n_pairs, n_keys=self.n_keys, n_values=self.n_values,
                          n_queries=self.n_queries, seed=seed)


def train_recall(kind: str, width: int, n_pairs: int, steps: int, *, progress: bool = False,
                 stop_after: int | None = None, device: str = "cpu", validate: bool = True,
                 **options: Any) -> dict:
    """Train one model on MQAR with :func:`~linattn_core.lm.train.fit`; return its configuration, curves
    and final held-out accuracy.

    ``options`` are the other fields of :class:`RecallConfig` (``n_keys``, ``lr``, ``seed``, ``conv``, ...).
    ``stop_after`` ends the run after that many steps (the schedule is still that of ``steps``).
    The results hold ``model`` (the trained :class:`~linattn_core.lm.model.LanguageModel`); the curves
    are ``step``/``train_loss``/``lr`` (every step) and ``val_step``/``val_loss``/``val_accuracy``;
    ``state_size`` is the numbers one attention layer keeps per sequence at the end of a sequence.
    ``validate=False`` skips the held-out evaluations and returns the configuration and curves alone.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    for name, value in (("width", width), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    cfg = RecallConfig(attention=kind, n_embd=width, n_pairs=n_pairs, steps=steps, **options)
    cfg.batch(1, 0)  # the task's sizes are checked before any training
    device = pick_device(device).type
    torch.manual_seed(cfg.seed)
    model = LanguageModel(cfg.model_config()).to(device)
    x_val, y_val = (t.to(device) for t in cfg.batch(cfg.eval_batch, [2**31]))  # held out, same for every seed

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(t.to(device) for t in cfg.batch(cfg.batch_size, [cfg.seed, step]))  # (seed, step) only

    def evaluate() -> dict[str, float]:
        logits = model(x_val)
        return {"loss": float(recall_loss(logits, y_val)), "accuracy": accuracy(logits, y_val)}

    run = fit(model, cfg.train_config(), batch=batch, loss=recall_loss,
              evaluate=evaluate if validate else None, config=asdict(cfg), stop_after=stop_after,
              progress=progress, desc=f"{kind} n={n_pairs}")
    curves, diverged = run["curves"], run["diverged_at"] is not None  # diverged: no final evaluation
    if not validate:  # the training losses alone (a replay of a stored run's first steps)
        return {"config": asdict(cfg), "curves": curves, "model": model}
    return {"config": asdict(cfg), "parameters": model.num_parameters(),
            "state_size": model.blocks[0].attn.state_size(cfg.seq_len), "chance": chance(cfg.n_values),
            "bag_chance": bag_chance(cfg.n_pairs, cfg.n_values),
            "final_accuracy": None if diverged else curves["val_accuracy"][-1],
            "final_loss": None if diverged else curves["val_loss"][-1], "diverged_at": run["diverged_at"],
            "wall_s": run["wall_s"], "curves": curves, "model": model}


@dataclass(frozen=True)
class Preset:
    """A sweep: every layer, width, number of pairs and seed, with the same task and optimisation."""

    kinds: tuple[str, ...]
    widths: tuple[int, ...]
    pairs: tuple[int, ...]
    steps: int
    options: dict  # the other fields of RecallConfig
    seeds: tuple[int, ...] = (0,)

    def runs(self) -> list[tuple[str, int, int, int]]:
        """``(kind, width, n_pairs, seed)`` of every run, in the order they run."""
        return [(k, w, n, s) for w in self.widths for n in self.pairs for k in self.kinds for s in self.seeds]

    def to_dict(self) -> dict:
        """JSON-ready (tuples as lists)."""
        return json.loads(json.dumps(asdict(self)))


# The recall recipe (Zoology and Based put a short convolution in front of every mixer; here each
# layer's own, kernel 4, on q, k and v): 64 key and 64 value tokens, 2 layers, 2 heads, batch 64 of
# fresh sequences, AdamW without weight decay, warm-up 100, a cosine to a tenth. The learning rate is
# swept per layer (scripts/stored_runs.py mqar-sweep); 3e-3 is the rate the pilots started from.
_TASK = {"n_keys": 64, "n_values": 64, "n_head": 2, "conv": 4, "batch_size": 64, "lr": 3e-3,
         "warmup_steps": 100, "weight_decay": 0.0, "eval_batch": 512}
PRESETS: dict[str, Preset] = {
    # inside the book build: softmax and elu+1 on 8 pairs (32-token sequences) at width 32, where a
    # KV cache of 2 x 32 x 32 numbers per layer recalls and a 2 x 16 x 17 state does not (half a
    # minute each on one core). Softmax leaves the plateau near step 400 and is at 0.98 by 1,000; with
    # 600 steps (a faster cosine) it had reached only 0.57, and at lr 1e-3 it had not left it at all.
    "book": Preset(("softmax", "elu+1"), (32,), (8,), 1000, {**_TASK, "eval_interval": 250}),
    # the stored sweep (recall against state size): 8 pairs (32-token sequences) at widths 32, 48 and
    # 64 (head sizes 16, 24, 32), three seeds, every layer at every width (softmax, the known-good model,
    # included: at width 16, or with 16 pairs, it had not left chance after 1,000 steps in the pilots)
    "state": Preset(("softmax", "elu+1", "gla", "deltanet"), (32, 48, 64), (8,), 1000,
                    {**_TASK, "eval_interval": 200}, seeds=(0, 1, 2)),
    # the stored capacity sweep: the number of pairs taken past what a width-32 state holds (4, 8
    # and 16 pairs; 16-token to 64-token sequences), three seeds, 3,000 steps. Softmax, which had not
    # left chance at 16 pairs in 1,000 steps, recalls by step 1,250 of a 3,000-step run (its cosine
    # still near the peak); with 32 pairs it reached 0.83 at best in 3,000 steps, so the sweep stops
    # at 16, where the known-good model still solves the task.
    "capacity": Preset(("softmax", "elu+1", "gla", "deltanet"), (32,), (4, 8, 16), 3000,
                       {**_TASK, "eval_interval": 250}, seeds=(0, 1, 2)),
    # recall against state size at fixed parameters (linattn_core.lm.stored.RECALL_HEADS): width 32, the
    # heads varied with --n-head (1, 2, 4: a linear state of D^2 / H numbers, the parameters unchanged),
    # 4, 8 and 16 pairs, 3,000 steps, each point's rate swept (scripts/stored_runs.py mqar-heads)
    "heads": Preset(("softmax", "deltanet", "elu+1", "gla"), (32,), (4, 8, 16), 3000,
                    {**_TASK, "eval_interval": 250}, seeds=(0, 1, 2)),
}


def _stored(result: dict) -> dict:
    """A run's results as stored: no model, the per-step curves thinned after their first steps."""
    return {**{k: v for k, v in result.items() if k not in ("model", "curves")},
            "curves": thin_curves(result["curves"])}


def run_sweep(preset: Preset, *, name: str = "custom", progress: bool = True, threads: int | None = None,
              device: str = "cpu") -> dict:
    """Run every configuration of ``preset``; return the runs with the commit, hardware and wall time.

    Every run is seeded on its own (its ``seed`` and step), so a sweep split by kind over several
    processes and merged (:func:`merge`) holds the same numbers as one process running them all.
    """
    unknown = [k for k in preset.kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"kinds must be among {KINDS}, got {unknown!r}")
    if threads is not None:
        torch.set_num_threads(threads)
    device = pick_device(device).type
    t0, runs = time.perf_counter(), []
    commit = git_commit()  # the code that runs is the code at the start (HEAD may move meanwhile)
    for kind, width, n_pairs, seed in preset.runs():
        options = {**preset.options, "seed": seed}
        result = train_recall(kind, width, n_pairs, preset.steps, progress=progress, device=device, **options)
        runs.append(_stored(result))
        what = (f"diverged at step {result['diverged_at']} (lower --lr)" if result["diverged_at"] is not None
                else f"accuracy {result['final_accuracy']:.3f} (chance {result['chance']:.3f})")
        print(f"{kind:18s} width {width:3d}  {n_pairs:3d} pairs  seed {seed}: {what},"
              f" {result['wall_s']:.1f} s", flush=True)
    return {"preset": name, "command": None, "sweep": preset.to_dict(), "git_commit": commit,
            "hardware": environment(device), "wall_s": time.perf_counter() - t0, "runs": runs}


def merge(parts: list[dict]) -> dict:
    """One sweep from several processes' parts of it (the same sweep but for its kinds): the runs in the
    sweep's order, the kinds in the registry's order.

    Each part keeps the commit it started from in ``git_commits`` (kind -> commit): parts started
    seconds apart can see different commits of a tree others are committing to.
    """
    sweeps = [{k: v for k, v in p["sweep"].items() if k != "kinds"} for p in parts]
    if any(s != sweeps[0] for s in sweeps) or len({p["preset"] for p in parts}) != 1:
        raise ValueError("the parts come from different presets or sweeps (only their kinds may differ)")
    kinds = sorted({k for p in parts for k in p["sweep"]["kinds"]}, key=KINDS.index)
    sweep = {**parts[0]["sweep"], "kinds": kinds}
    order = {run: i for i, run in enumerate(Preset(**{**sweep, "kinds": tuple(kinds)}).runs())}

    def where(run: dict) -> int:
        c = run["config"]
        return order[(c["attention"], c["n_embd"], c["n_pairs"], c["seed"])]

    runs = sorted((r for p in parts for r in p["runs"]), key=where)
    commits = {r["config"]["attention"]: p["git_commit"] for p in parts for r in p["runs"]}
    same = len(set(commits.values())) == 1
    return {**parts[0], "sweep": sweep, "runs": runs, "git_commit": parts[0]["git_commit"] if same else None,
            "git_commits": commits, "wall_s": max(p["wall_s"] for p in parts), "processes": len(parts),
            "wall_s_per_process": [p["wall_s"] for p in parts]}


def replay_losses(run: dict, steps: int) -> list[float]:
    """The first ``steps`` training losses of a stored run, recomputed from its configuration (on CPU).

    The schedule depends on the run's length, so this trains the first steps of a run as long as
    the stored one and stops there.
    """
    cfg = dict(run["config"])
    kind, width, n_pairs, length = (cfg.pop(k) for k in ("attention", "n_embd", "n_pairs", "steps"))
    return train_recall(kind, width, n_pairs, length, stop_after=steps, validate=False,
                        **cfg)["curves"]["train_loss"]


def _sweep_from_args(args: argparse.Namespace) -> Preset:
    """The preset named by ``--preset``, with every option given on the command line in its place."""
    preset = PRESETS[args.preset]
    changes = {name: tuple(value) for name in ("kinds", "widths", "pairs", "seeds")
               if (value := getattr(args, name)) is not None}
    if args.steps is not None:
        changes["steps"] = args.steps
    given = {"lr": args.lr, "conv": args.conv, "n_keys": args.n_keys, "n_values": args.n_values,
             "n_head": args.n_head, "conv_init": args.conv_init}
    options = {**preset.options, **{k: v for k, v in given.items() if v is not None}}
    return replace(preset, options=options, **changes)


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description="Train attention layers on associative recall (MQAR).")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="book",
                        help="the sweep to start from; the options below replace its values")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=None, help="attention layers")
    parser.add_argument("--widths", nargs="+", type=int, default=None, help="model widths C")
    parser.add_argument("--pairs", nargs="+", type=int, default=None, help="key-value pairs per sequence")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="one run per seed")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate")
    parser.add_argument("--conv", type=int, default=None,
                        help="short conv kernel on every layer (0: none; default: each layer's own)")
    parser.add_argument("--conv-init", choices=CONV_INITS, default=None,
                        help="the conv's starting filters (default uniform, torch's; normal: fla's)")
    parser.add_argument("--n-keys", type=int, default=None, help="key tokens")
    parser.add_argument("--n-values", type=int, default=None, help="value tokens")
    parser.add_argument("--n-head", type=int, default=None, help="attention heads")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    parser.add_argument("--merge", nargs="+", default=None, help="merge these parts' JSON into --json")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be a positive int, got {args.threads}")
    if args.merge:
        results = merge([json.loads(Path(p).read_text()) for p in args.merge])
        results["commands"] = sorted({json.loads(Path(p).read_text())["command"] for p in args.merge})
        results["command"] = "python -m linattn_core.mqar " + " ".join(argv)
    else:
        sweep = _sweep_from_args(args)
        try:
            RecallConfig(**sweep.options)  # unknown or ill-typed options fail before any training
        except (TypeError, ValueError) as err:
            parser.error(str(err))
        results = run_sweep(sweep, name=args.preset, progress=not args.no_progress, threads=args.threads,
                            device=args.device)
        results["command"] = "python -m linattn_core.mqar " + " ".join(argv)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    print(f"{len(results['runs'])} runs in {results['wall_s']:.0f} s", f"-> {args.json}" if args.json else "")
    if any(run.get("diverged_at") is not None for run in results["runs"]):
        raise SystemExit(DIVERGED)  # written and reported above; the status tells a script
    return results


if __name__ == "__main__":
    main()
