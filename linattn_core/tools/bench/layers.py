"""The layers part of the benchmark: one training step of the whole language model, per attention layer.

A step is what the training loop does (:func:`linattn_core.lm.train.fit`): the forward pass of the
model, the loss, the backward pass, clipping and one AdamW update. It is timed for every layer of
:data:`linattn_core.lm.layers.LAYERS` at the size of the ``full`` preset of ``python -m
linattn_core.train`` (4 layers, 4 heads, width 64, batch 12, context 128), in float32 on the CPU, on
one thread and on the machine's default number of threads. Reported: the median seconds per step,
tokens per second and the ratio to softmax's step; the target (every layer within 2x of softmax's
step time) is reported, never tested. Before anything is timed, each layer's parallel and step forms
are compared in float64 (a speed of a wrong layer is worth nothing).

On a machine shared with other programs the rate drifts: the layers are timed together by the one
interleaved timer (:func:`linattn_core.tools.timing.time_calls`, a block of steps of every layer in
turn, round after round; ``rounds`` scales how many) and each layer's time is the median of its blocks.

Standalone: ``python -m linattn_core.tools.bench.layers [--quick] [--kinds ...] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..._provenance import environment, num_threads
from .targets import NOISY, Target

__all__ = ["SIZES", "LayerBenchConfig", "check_layers", "format_layers", "layer_steps", "layer_targets",
           "main"]

#: Characters of the Shakespeare text (``linattn_core.lm.data``): the model's vocabulary at the full preset.
VOCAB_SIZE = 84
#: The target: every layer's step within this factor of softmax's.
TARGET_RATIO = 2.0


@dataclass(frozen=True)
class LayerBenchConfig:
    """The model and batch of the timed step, and how long to time it."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    batch_size: int = 12
    block_size: int = 128
    chunk_size: int = 64
    vocab_size: int = VOCAB_SIZE
    rounds: int = 3  # interleaved passes over the layers, each of min_run_time .. max_run_time a layer
    min_run_time: float = 0.3  # seconds of timed steps per layer and pass, at least
    max_run_time: float = 1.5


def _full() -> LayerBenchConfig:
    from ...lm.train import PRESETS

    p = PRESETS["full"]
    return LayerBenchConfig(n_layer=p.n_layer, n_head=p.n_head, n_embd=p.n_embd, batch_size=p.batch_size,
                            block_size=p.block_size, chunk_size=p.chunk_size)


#: ``full``: the ``full`` training preset's model and batch; ``quick``: every code path in seconds.
SIZES: dict[str, Callable[[], LayerBenchConfig]] = {
    "full": _full,
    "quick": lambda: LayerBenchConfig(n_layer=1, n_head=2, n_embd=16, batch_size=2, block_size=24,
                                      chunk_size=8, vocab_size=11, rounds=1, min_run_time=0.01,
                                      max_run_time=0.05),
}


def _model(kind: str, cfg: LayerBenchConfig, dtype: Any = None, seed: int = 0) -> Any:
    import torch

    from ...lm.model import LanguageModel, ModelConfig

    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig(vocab_size=cfg.vocab_size, attention=kind, block_size=cfg.block_size,
                                      n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd,
                                      chunk_size=cfg.chunk_size, seed=seed))
    return model if dtype is None else model.to(dtype)


def check_layers(kinds: Sequence[str], *, n: int = 21, seed: int = 0) -> dict[str, float]:
    """max |parallel - step-by-step| / max |logit| of a small float64 model per layer (length 21, chunk 8)."""
    import torch

    small = LayerBenchConfig(n_layer=2, n_head=2, n_embd=16, block_size=n, chunk_size=8, vocab_size=11)
    errors = {}
    for kind in kinds:
        model = _model(kind, small, torch.float64, seed)
        idx = torch.randint(0, small.vocab_size, (2, n), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            parallel = model(idx)
        errors[kind] = float((model.step_logits(idx) - parallel).abs().max() / parallel.abs().max())
    return errors


def _train_step(kind: str, cfg: LayerBenchConfig) -> tuple[Callable[[], None], int]:
    """A closure doing one training step of a fresh float32 model on a fixed batch; its parameter count."""
    import torch

    from ...lm.train import TrainConfig, lm_loss, make_optimizer, optimizer_step

    model = _model(kind, cfg)
    opt = make_optimizer(model, TrainConfig())
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, cfg.vocab_size, (2, cfg.batch_size, cfg.block_size), generator=gen)

    def step() -> None:
        optimizer_step(opt, model, lm_loss(model(x), y), 1e-3, 1.0)

    return step, model.num_parameters()


def layer_steps(kinds: Sequence[str] | None = None, *, sizes: str | LayerBenchConfig = "full",
                threads: Sequence[int | None] = (1, None), say: Callable[[str], None] | None = None) -> dict:
    """Time one training step of the whole model per layer, for each number of threads.

    ``threads``: ``None`` is the machine's default (torch's number of threads when this starts).
    Returns ``config`` (the sizes), ``default_threads``, ``checks`` (:func:`check_layers`) and ``results``:
    one dict per (layer, threads) with ``median_s`` (the median of its interleaved blocks), ``q25_s``,
    ``q75_s``, ``min_s``, ``max_s``, ``passes`` (blocks), ``tokens_per_s``, ``ratio_to_softmax`` and
    ``parameters``.
    """
    import torch

    from ...lm.layers import LAYERS
    from ..timing import time_calls

    cfg = SIZES[sizes]() if isinstance(sizes, str) else sizes
    kinds = list(LAYERS) if kinds is None else list(kinds)
    unknown = [k for k in kinds if k not in LAYERS]
    if unknown:
        raise ValueError(f"kinds must be among {tuple(LAYERS)}, got {unknown!r}")
    default = torch.get_num_threads()
    checks = check_layers(kinds)
    results = []
    for count in threads:
        with num_threads(count):
            n = torch.get_num_threads()
            steps = {kind: _train_step(kind, cfg) for kind in kinds}
            timings = time_calls({kind: step for kind, (step, _) in steps.items()}, device="cpu",
                                 min_run_time=cfg.rounds * cfg.min_run_time, min_repeats=3 * cfg.rounds,
                                 max_run_time=cfg.rounds * cfg.max_run_time)
        soft = timings["softmax"].median_s if "softmax" in timings else None
        for kind in kinds:
            t = timings[kind]
            results.append({"kind": kind, "threads": n, "median_s": t.median_s, "q25_s": t.q25_s,
                            "q75_s": t.q75_s, "min_s": min(t.times), "max_s": max(t.times),
                            "passes": t.repeats, "tokens_per_s": cfg.batch_size * cfg.block_size / t.median_s,
                            "ratio_to_softmax": None if soft is None else t.median_s / soft,
                            "parameters": steps[kind][1]})
            if say is not None:
                say(format_layers(results[-1:], header=False))
        del steps
    return {"config": asdict(cfg), "default_threads": default, "checks": checks, "results": results}


def format_layers(results: Sequence[dict], *, header: bool = True) -> str:
    """The table: layer, threads, median time per step, spread over the passes, tokens/s, ratio to softmax."""
    head = (f"{'layer':<18} {'threads':>7} {'step':>10} {'passes min-max':>17} {'tokens/s':>9} "
            f"{'vs softmax':>10} {'parameters':>10}")
    lines = [head, "-" * len(head)] if header else []
    for r in results:
        ratio = "-" if r["ratio_to_softmax"] is None else f"{r['ratio_to_softmax']:.2f}x"
        spread = f"{r['min_s'] * 1e3:.0f}-{r['max_s'] * 1e3:.0f} ms"
        lines.append(f"{r['kind']:<18} {r['threads']:>7} {r['median_s'] * 1e3:>7.1f} ms {spread:>17} "
                     f"{r['tokens_per_s']:>9.0f} {ratio:>10} {r['parameters']:>10,}")
    return "\n".join(lines)


def layer_targets(bench: dict) -> list[Target]:
    """Every layer's step within :data:`TARGET_RATIO` of softmax's, on each number of threads."""
    out = []
    for r in bench["results"]:
        if r["kind"] == "softmax":
            continue
        name = f"training step: {r['kind']} vs softmax, {r['threads']} thread{'s' * (r['threads'] > 1)}"
        value = r["ratio_to_softmax"]
        passed = None if value is None else value <= TARGET_RATIO
        soft = next((s for s in bench["results"] if s["kind"] == "softmax" and s["threads"] == r["threads"]),
                    {})
        if value is not None and any(x.get("q75_s", 0) - x.get("q25_s", 0) > x.get("median_s", 1)
                                     for x in (r, soft)):
            out.append(Target(name, f"<= {TARGET_RATIO:g}x", value, None, NOISY, noisy=True))
            continue
        out.append(Target(name, f"<= {TARGET_RATIO:g}x", value, passed, "" if value else "softmax not timed"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m linattn_core.tools.bench.layers``: this part of the benchmark alone."""
    from ...lm.layers import LAYERS
    from .targets import format_targets

    parser = argparse.ArgumentParser(prog="python -m linattn_core.tools.bench.layers",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test in seconds")
    parser.add_argument("--kinds", nargs="+", choices=tuple(LAYERS), default=None,
                        help="layers (default: all)")
    parser.add_argument("--threads", nargs="+", type=int, default=None,
                        help="thread counts to time (default: 1 and the machine's default)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved passes over the layers")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the results as JSON")
    args = parser.parse_args(argv)
    cfg = SIZES["quick" if args.quick else "full"]()
    if args.rounds is not None:
        if args.rounds < 1:
            parser.error(f"--rounds must be positive, got {args.rounds}")
        cfg = replace(cfg, rounds=args.rounds)
    if args.threads is not None and min(args.threads) < 1:
        parser.error(f"--threads must be positive, got {args.threads}")
    threads = tuple(args.threads) if args.threads else ((1,) if args.quick else (1, None))
    start = time.perf_counter()
    meta = environment("cpu", "float32")
    print(f"training step per layer on {meta['device_description']}, torch {meta['torch']}, load average "
          f"{meta['load_average_1min'] or 0.0:.1f}")
    print(f"model: {cfg.n_layer} layers, {cfg.n_head} heads, width {cfg.n_embd}, batch {cfg.batch_size}, "
          f"context {cfg.block_size}, float32, {cfg.rounds} passes")
    print(format_layers([], header=True))
    bench = layer_steps(args.kinds, sizes=cfg, threads=threads, say=print)
    print("parallel vs step form (float64, relative): "
          + ", ".join(f"{k} {e:.0e}" for k, e in bench["checks"].items()))
    print(format_targets(layer_targets(bench)))
    print(f"{time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, **bench}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
