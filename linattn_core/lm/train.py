"""Train the character-level language model with one attention layer: ``python -m linattn_core.train``.

::

    python -m linattn_core.train --attention elu+1 --preset book            # about 15 s on a CPU
    python -m linattn_core.train --attention deltanet --preset full --device cuda --out x.json
    python -m linattn_core.train --attention gla --preset full --lr 1e-3 --seed 2 --threads 1 --out x.json
    python -m linattn_core.train --attention softmax --preset full --checkpoint ckpt.pt --resume
    python -m linattn_core.train --attention retnet --preset full --conv 4   # a short conv on every layer

AdamW with a linear warm-up and cosine decay to a tenth of the peak rate, gradient clipping, the
validation loss on fixed batches at fixed steps. :func:`fit` is the one training loop of the
package: the language model here and the recall task of :mod:`linattn_core.lm.mqar` both run it.
Deterministic on a given machine: the batch of step ``i`` is drawn from a generator seeded with
``(seed, i)``, so a run resumed from a checkpoint sees exactly the batches the uninterrupted run would
have seen, and the checkpoint holds the weights, the optimiser's moments and the curves so far. The
results (configuration, git commit, hardware, curves, wall time) are one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .._provenance import environment, git_commit, pick_device
from .data import Corpus, load_corpus
from .model import KINDS, LanguageModel, ModelConfig

__all__ = ["DIVERGED", "PRESETS", "TrainConfig", "fit", "get_batch", "lm_loss", "lr_at", "make_optimizer",
           "optimizer_step", "replay_losses", "save_results", "thin_curves", "train"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on besides the data and the machine."""

    attention: str = "softmax"
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 64
    batch_size: int = 16
    max_steps: int = 300
    lr: float = 1e-2
    min_lr_ratio: float = 0.1  # the cosine decays to min_lr_ratio * lr
    warmup_steps: int = 30
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_interval: int = 50  # validation at steps 0, eval_interval, ..., max_steps
    eval_batches: int = 8
    chunk_size: int = 64
    conv: int | None = None  # short conv kernel (None: each layer's own default, 0: none)
    seed: int = 0

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(vocab_size=vocab_size, attention=self.attention, block_size=self.block_size,
                           n_layer=self.n_layer, n_head=self.n_head, n_embd=self.n_embd,
                           chunk_size=self.chunk_size, conv=self.conv, seed=self.seed)


PRESETS: dict[str, TrainConfig] = {
    # inside the book build: every layer in a few seconds each on a 2-core CPU
    "book": TrainConfig(),
    # the capstone's model for a fifth of an epoch (600 steps, 0.92 M characters): 4 layers, 4 heads of
    # 16, width 64, batch 12, context 128. nanoGPT's CPU example has the same layers, heads and batch at
    # width 128 and context 64, for 2,000 steps; this model is half as wide with twice the context
    "full": TrainConfig(n_layer=4, n_head=4, n_embd=64, block_size=128, batch_size=12, max_steps=600,
                        lr=3e-3, warmup_steps=100, eval_interval=200, eval_batches=40),
    # the same model trained for one epoch: 3,000 steps of 12 x 128 characters are 4.61 M, the training
    # split is 4.55 M; validation every 250 steps on 40 batches (480 windows, 61 k characters)
    "epoch": TrainConfig(n_layer=4, n_head=4, n_embd=64, block_size=128, batch_size=12, max_steps=3000,
                         lr=3e-3, warmup_steps=100, eval_interval=250, eval_batches=40),
}


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr``, then a cosine to ``min_lr_ratio * lr`` at ``max_steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    floor = cfg.min_lr_ratio * cfg.lr
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * min(progress, 1.0)))


def get_batch(tokens: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator,
              device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the token stream: inputs ``x`` and next-token targets ``y``, both (B, T)."""
    if len(tokens) <= block_size:
        raise ValueError(f"{len(tokens)} tokens cannot fill a window of block_size + 1 = {block_size + 1}")
    starts = rng.integers(0, len(tokens) - block_size, size=batch_size)
    windows = np.stack([tokens[s : s + block_size + 1] for s in starts]).astype(np.int64)
    xy = torch.from_numpy(windows).to(device)
    return xy[:, :-1], xy[:, 1:]


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy in nats per token. logits: (B, T, vocab), targets: (B, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW that decays the matrices (weights, embeddings, conv filters) and never the biases or the
    norms' gains (tensors of fewer than 2 dims), as nanoGPT does."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.99))


@torch.no_grad()
def optimizer_step(opt: torch.optim.Optimizer, model: torch.nn.Module, loss: Any, lr: float,
                   grad_clip: float) -> bool:
    """One step on ``loss`` at learning rate ``lr``, the gradients clipped to norm ``grad_clip``.

    Returns False, and leaves the weights as they were, when the loss or a gradient is not finite
    (a diverged run: clipping cannot repair an infinite norm, it would write NaN into every weight).
    """
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if not (torch.isfinite(loss.detach()) and torch.isfinite(norm)):
        return False
    opt.step()
    return True


def _new_curves() -> dict[str, list]:
    return {"step": [], "train_loss": [], "lr": [], "val_step": [], "val_train_s": []}


@torch.no_grad()
def _evaluate(model: torch.nn.Module, evaluate: Callable[[], dict[str, float]]) -> tuple[dict, float]:
    """``evaluate()`` in eval mode; its numbers and the seconds it took."""
    t0 = time.perf_counter()
    model.eval()
    metrics = {name: float(value) for name, value in evaluate().items()}
    model.train()
    return metrics, time.perf_counter() - t0


def _record(curves: dict[str, list], step: int, metrics: dict[str, float], train_s: float) -> None:
    curves["val_step"].append(step)
    curves.setdefault("val_train_s", []).append(round(train_s, 3))
    for name, value in metrics.items():
        curves.setdefault(f"val_{name}", []).append(value)


Batch = Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # step -> inputs, targets
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # logits, targets -> a scalar


def fit(model: torch.nn.Module, cfg: TrainConfig, *, batch: Batch, loss: Loss,
        evaluate: Callable[[], dict[str, float]] | None, config: dict, checkpoint: str | Path | None = None,
        resume: bool = False, stop_after: int | None = None, progress: bool = True, desc: str = "") -> dict:
    """The training loop: ``cfg.max_steps`` steps of AdamW on ``loss(model(x), y)``, ``(x, y) = batch(step)``.

    The learning rate follows :func:`lr_at`, the gradients are clipped to ``cfg.grad_clip``, and
    ``evaluate()`` (run in eval mode without gradients; it returns named numbers such as
    ``{"loss": ...}``) is recorded at every ``cfg.eval_interval``-th step and once more at the end
    (``evaluate=None``: never; evaluating changes nothing that training reads, so the training losses
    are the same either way, which is how a stored run's first steps are replayed quickly).
    ``stop_after`` ends the run after that many steps (as an interruption would; the schedule is still
    that of ``cfg.max_steps``), evaluated on the weights it stops with. With ``checkpoint`` the weights,
    the optimiser's moments and the curves are saved at the end; ``resume=True`` continues from there,
    refusing a checkpoint written with another ``config`` (the caller's whole configuration, as a dict).

    A step whose loss or gradient is not finite ends the run there, unapplied (the learning rate is
    too high for this model): ``diverged_at`` is that step, and no evaluation follows (None otherwise).

    Returns ``curves`` (``step``, ``train_loss``, ``lr`` per step; ``val_step``, ``val_train_s`` (the
    seconds spent training before it, evaluations excluded) and ``val_<name>`` per evaluation),
    ``steps_done``, ``start`` (the first step of this call), ``wall_s`` (all calls, evaluations
    included), ``train_s`` (all calls, evaluations excluded), ``diverged_at`` and ``stopped_eval`` (the
    evaluation of the weights a ``stop_after`` left before the schedule's end, else None).
    """
    from tqdm.auto import tqdm

    opt = make_optimizer(model, cfg)
    curves, start, wall, trained_before = _new_curves(), 0, 0.0, 0.0
    if resume:
        if checkpoint is None or not Path(checkpoint).is_file():
            raise FileNotFoundError(f"--resume needs an existing checkpoint, got {checkpoint!r}")
        device = next(model.parameters()).device
        state = torch.load(checkpoint, map_location=device, weights_only=False)
        if state["config"] != config:
            raise ValueError("the checkpoint was written with another configuration: "
                             f"{state['config']} != {config}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start, wall, curves = state["step"], state["wall_s"], state["curves"]
        trained_before = state.get("train_s", 0.0)
    end = cfg.max_steps if stop_after is None else min(cfg.max_steps, start + stop_after)
    t0, eval_s = time.perf_counter(), 0.0

    def train_s() -> float:
        return trained_before + time.perf_counter() - t0 - eval_s

    bar = tqdm(range(start, end), desc=desc, disable=not progress, leave=False)
    diverged = None
    for step in bar:
        if evaluate is not None and step % cfg.eval_interval == 0:
            metrics, seconds = _evaluate(model, evaluate)
            _record(curves, step, metrics, train_s())
            eval_s += seconds
        lr = lr_at(step, cfg)
        x, y = batch(step)
        value = loss(model(x), y)
        finite = optimizer_step(opt, model, value, lr, cfg.grad_clip)
        curves["step"].append(step)
        curves["train_loss"].append(value.item())
        curves["lr"].append(lr)
        bar.set_postfix(loss=f"{curves['train_loss'][-1]:.3f}")
        if not finite:
            diverged, end = step, step
            break
    # the weights it ends with are evaluated: at the schedule's end into the curves; where stop_after
    # stopped it, apart (``stopped_eval``), so that a resumed run's curves are the uninterrupted run's
    stopped_eval = None
    unevaluated = not curves["val_step"] or curves["val_step"][-1] != end
    if evaluate is not None and diverged is None and unevaluated:
        metrics, seconds = _evaluate(model, evaluate)
        if end == cfg.max_steps:
            _record(curves, end, metrics, train_s())
        else:
            stopped_eval = metrics
        eval_s += seconds
    trained = train_s()
    wall += time.perf_counter() - t0
    if checkpoint is not None:
        torch.save({"config": config, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": end, "wall_s": wall, "train_s": trained, "curves": curves}, checkpoint)
    return {"curves": curves, "steps_done": end, "start": start, "wall_s": wall, "train_s": trained,
            "diverged_at": diverged, "stopped_eval": stopped_eval}


def _final_val_loss(run: dict) -> float | None:
    """The validation loss of the weights a run ended with (None: diverged, or never evaluated)."""
    if run["diverged_at"] is not None:
        return None
    if run["stopped_eval"] is not None:
        return run["stopped_eval"]["loss"]
    return run["curves"]["val_loss"][-1] if run["curves"].get("val_loss") else None


def train(cfg: TrainConfig, corpus: Corpus, *, device: str = "auto", checkpoint: str | Path | None = None,
          resume: bool = False, stop_after: int | None = None, progress: bool = True,
          validate: bool = True) -> dict:
    """Train one language model with :func:`fit`; return the results.

    The results hold ``model`` (the trained :class:`LanguageModel`), which :func:`save_results` leaves
    out of the JSON. ``stop_after``, ``checkpoint`` and ``resume`` as in :func:`fit`;
    ``validate=False`` skips the validation loss (the training losses are the same).
    """
    if cfg.attention not in KINDS:
        raise ValueError(f"attention must be one of {KINDS}, got {cfg.attention!r}")
    device = pick_device(device).type
    commit = git_commit()  # the code that runs is the code at the start (HEAD may move meanwhile)
    torch.manual_seed(cfg.seed)
    model = LanguageModel(cfg.model_config(corpus.vocab_size)).to(device)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([cfg.seed, step])  # the batch depends only on (seed, step)
        return get_batch(corpus.train, cfg.batch_size, cfg.block_size, rng, device)

    def evaluate() -> dict[str, float]:
        rng = np.random.default_rng([2**31])  # the same validation windows every time, for every seed
        losses = [lm_loss(model(x), y).item()
                  for x, y in (get_batch(corpus.val, cfg.batch_size, cfg.block_size, rng, device)
                               for _ in range(cfg.eval_batches))]
        return {"loss": float(np.mean(losses))}

    run = fit(model, cfg, batch=batch, loss=lm_loss, evaluate=evaluate if validate else None,
              config=asdict(cfg), checkpoint=checkpoint, resume=resume, stop_after=stop_after,
              progress=progress, desc=cfg.attention)
    curves, end, wall = run["curves"], run["steps_done"], run["wall_s"]
    return {"config": asdict(cfg), "model_config": model.cfg.to_dict(), "parameters": model.num_parameters(),
            "steps_done": end, "git_commit": commit, "hardware": environment(device), "wall_s": wall,
            "tokens_per_s": (end - run["start"]) * cfg.batch_size * cfg.block_size / max(wall, 1e-9),
            "train_s": run["train_s"], "s_per_step": run["train_s"] / max(end, 1),
            "final_val_loss": _final_val_loss(run), "diverged_at": run["diverged_at"],
            "unigram_entropy": corpus.unigram_entropy(), "curves": curves, "model": model}


# The per-step curves a results JSON keeps in full (the reproduction test replays them); after that,
# one step in LOSS_STRIDE keeps the file small.
FIRST_LOSSES = 10
LOSS_STRIDE = 10
PER_STEP = ("step", "train_loss", "lr")


def thin_curves(curves: dict[str, list]) -> dict[str, list]:
    """The curves as stored: the per-step ones (:data:`PER_STEP`) in full for the first
    :data:`FIRST_LOSSES` steps, then every :data:`LOSS_STRIDE`-th; the evaluations all kept."""
    keep = [i for i in range(len(curves["step"])) if i < FIRST_LOSSES or i % LOSS_STRIDE == 0]
    return {name: [values[i] for i in keep] if name in PER_STEP else list(values)
            for name, values in curves.items()}


def save_results(results: dict, path: str | Path) -> None:
    """Write the results as JSON: no model object, the per-step curves thinned after their first steps."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    plain = {k: v for k, v in results.items() if k != "model"}
    plain["curves"] = thin_curves(plain["curves"])
    Path(path).write_text(json.dumps(plain, indent=1) + "\n")


def replay_losses(results: dict, corpus: Corpus, steps: int) -> list[float]:
    """The first ``steps`` training losses of a stored run, recomputed from its configuration (on CPU,
    from the start: the schedule depends only on the configuration)."""
    cfg = TrainConfig(**results["config"])
    return train(cfg, corpus, device="cpu", stop_after=steps, progress=False,
                 validate=False)["curves"]["train_loss"]


#: The exit status of ``python -m linattn_core.train`` when the run diverged (its JSON is written).
DIVERGED = 3


def _positive(text: str, kind: type = int) -> Any:
    value = kind(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _kernel(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no conv) or a kernel size >= 1, got {text!r}")
    return value


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Train the char-level model of the training chapter.")
    parser.add_argument("--attention", choices=KINDS, default="softmax")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="book")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--lr", type=lambda t: _positive(t, float), default=None,
                        help="override the preset's peak learning rate")
    parser.add_argument("--steps", type=_positive, default=None, help="override the preset's max_steps")
    parser.add_argument("--seed", type=int, default=None, help="override the preset's seed")
    parser.add_argument("--conv", type=_kernel, default=None,
                        help="short conv kernel on every layer (0: none; default: each layer's own)")
    parser.add_argument("--checkpoint", default=None, help="where to save (and --resume from) the run")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --checkpoint")
    parser.add_argument("--stop-after", type=_positive, default=None, help="stop after this many steps")
    parser.add_argument("--out", default=None, help="results JSON (results/<preset>-<attention>.json)")
    parser.add_argument("--threads", type=_positive, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    overrides = {"lr": args.lr, "max_steps": args.steps, "seed": args.seed, "conv": args.conv}
    cfg = replace(PRESETS[args.preset], attention=args.attention,
                  **{k: v for k, v in overrides.items() if v is not None})
    results = train(cfg, load_corpus(), device=args.device, checkpoint=args.checkpoint, resume=args.resume,
                    stop_after=args.stop_after, progress=not args.no_progress)
    results["preset"] = args.preset
    results["command"] = "python -m linattn_core.train " + " ".join(sys.argv[1:] if argv is None else argv)
    out = args.out or f"results/{args.preset}-{args.attention}.json"
    save_results(results, out)
    if results["diverged_at"] is not None:
        print(f"{args.attention}: diverged at step {results['diverged_at']} (a loss or gradient that is not"
              f" finite) at peak lr {cfg.lr:g}; the run stopped there, unapplied -> {out}. A lower --lr"
              " trains this model.", file=sys.stderr)
        raise SystemExit(DIVERGED)
    print(f"{args.attention}: validation loss {results['final_val_loss']:.4f} nats/char after"
          f" {results['steps_done']} steps, {results['wall_s']:.1f} s on {results['hardware']['device']}"
          f" -> {out}")
    return results


if __name__ == "__main__":
    main()
