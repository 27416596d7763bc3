"""The whole model against context: training and generation tokens/s per attention layer, and where each
linear layer overtakes softmax.

The model of the training chapter (:class:`linattn_core.lm.model.LanguageModel` at the ``full`` preset's
size: 4 layers, 4 heads, width 64, float32) with each layer of :data:`linattn_core.lm.layers.LAYERS`, at
contexts from 128 tokens up (8,192 in the full run):

- **training**: one step as the training loop takes it (forward, loss, backward, clipping, AdamW),
  on a batch of ``tokens_per_step // context`` sequences (at least one), so that every context trains
  on about the same number of tokens a step; tokens/s = batch x context / seconds per step. The layers
  are timed together at each context, interleaved (:func:`linattn_core.tools.timing.time_calls`).
- **generation**: one token for ``gen_batch`` sequences (:meth:`~linattn_core.lm.model.LanguageModel.step`)
  when the context already holds ``context`` tokens (a KV cache that long for softmax, the fixed-size
  state for the others), the layers' steps interleaved (:func:`~linattn_core.tools.timing.time_steps`);
  each layer's memory is filled token by token, as generation fills it; tokens/s = batch / seconds.

The crossover of a linear layer is the context from which its tokens/s stays above softmax's,
interpolated in log context (:func:`linattn_core.tools.timing.crossing`); None where it is still behind
at the longest context. Before anything is timed, each layer's parallel and step forms are compared in
float64 (a speed of a wrong layer is worth nothing).

Run it as ``python -m linattn_core.tools.bench.models`` (``--quick``: every code path in seconds;
``--json PATH`` writes the result with its command, git commit and hardware; ``--device cuda`` times
on a GPU, and every record names its device). ``python -m linattn_core.bench`` runs it too. Speeds are
printed, never tested; :mod:`linattn_core.tools.bench.results` keeps one full run for the timing chapter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..._provenance import environment, git_commit, num_threads, pick_device, torch_device
from ..timing import crossing, time_calls, time_steps

__all__ = ["SIZES", "STORED", "ModelSweepConfig", "config_from_args", "crossovers", "format_crossovers",
           "format_sweep", "main", "run", "stored", "table"]

#: Characters of the Shakespeare text (``linattn_core.lm.data``): the model's vocabulary.
VOCAB_SIZE = 84


@dataclass(frozen=True)
class ModelSweepConfig:
    """The model, the contexts and how long to time them."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    chunk_size: int = 64
    vocab_size: int = VOCAB_SIZE
    contexts: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096, 8192)
    tokens_per_step: int = 8192  # training batch = tokens_per_step // context sequences, at least 1
    gen_batch: int = 1  # sequences generated at once
    gen_steps: int = 8  # timed generated tokens per layer and context (after one untimed)
    repeats: int = 5  # interleaved training blocks per layer and context, at least
    min_run_time: float = 0.5  # seconds of timed training steps per layer and context, at least
    max_run_time: float = 3.0
    max_step_s: float = 20.0  # a layer whose training step took longer stops there (longer contexts skipped)
    kinds: tuple[str, ...] | None = None  # layers (None: every layer of LAYERS)
    # torch threads (None: torch's default). On a machine shared with other work one thread is steadier:
    # a second one mostly waits at the barrier of every small op (a generated token is hundreds of them)
    threads: int | None = None

    def batch(self, context: int) -> int:
        """Training sequences per step at ``context``."""
        return max(1, self.tokens_per_step // context)


def _full() -> ModelSweepConfig:
    from ...lm.train import PRESETS

    p = PRESETS["full"]
    return ModelSweepConfig(n_layer=p.n_layer, n_head=p.n_head, n_embd=p.n_embd, chunk_size=p.chunk_size)


#: ``full``: the training chapter's model at contexts 128 .. 8192; ``quick``: every code path in seconds;
#: ``book``: what the timing chapter measures live (two layers, two contexts, a second or two).
SIZES: dict[str, Callable[[], ModelSweepConfig]] = {
    "full": _full,
    "quick": lambda: ModelSweepConfig(n_layer=1, n_head=2, n_embd=16, chunk_size=8, vocab_size=11,
                                      contexts=(16, 32), tokens_per_step=64, gen_steps=3, repeats=3,
                                      min_run_time=0.005, max_run_time=0.02, threads=1),
    "book": lambda: replace(_full(), contexts=(128, 512), tokens_per_step=512, gen_steps=4, repeats=3,
                            min_run_time=0.02, max_run_time=0.1, kinds=("softmax", "elu+1"), threads=1),
}


def _model(kind: str, cfg: ModelSweepConfig, block_size: int, device: Any, dtype: Any = None,
           seed: int = 0) -> Any:
    import torch

    from ...lm.model import LanguageModel, ModelConfig

    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig(vocab_size=cfg.vocab_size, attention=kind, block_size=block_size,
                                      n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd,
                                      chunk_size=cfg.chunk_size, seed=seed))
    return model.to(device=device, dtype=dtype)


def check_layers(kinds: Sequence[str], *, n: int = 21, seed: int = 0) -> dict[str, float]:
    """max |parallel - step-by-step| / max |logit| of a small float64 model per layer (length 21, chunk 8)."""
    import torch

    small = ModelSweepConfig(n_layer=2, n_head=2, n_embd=16, chunk_size=8, vocab_size=11)
    errors = {}
    for kind in kinds:
        model = _model(kind, small, n, "cpu", torch.float64, seed)
        idx = torch.randint(0, small.vocab_size, (2, n), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            parallel = model(idx)
        errors[kind] = float((model.step_logits(idx) - parallel).abs().max() / parallel.abs().max())
    return errors


def _train_step(model: Any, batch: int, context: int, cfg: ModelSweepConfig,
                device: Any) -> Callable[[], None]:
    """A closure doing one training step of ``model`` on a fixed batch of ``batch x context`` tokens."""
    import torch

    from ...lm.train import TrainConfig, lm_loss, make_optimizer, optimizer_step

    opt = make_optimizer(model, TrainConfig())
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, cfg.vocab_size, (2, batch, context), generator=gen).to(device)

    def step() -> None:
        optimizer_step(opt, model, lm_loss(model(x), y), 1e-3, 1.0)

    return step


def _training(cfg: ModelSweepConfig, kinds: Sequence[str], device: Any, say: Callable[[str], None] | None
              ) -> list[dict]:
    """Training rows: per context, the layers' steps timed together, interleaved."""
    rows: list[dict] = []
    stopped: dict[str, str] = {}
    block = max(cfg.contexts)
    models = {kind: _model(kind, cfg, block, device) for kind in kinds}
    for context in sorted(cfg.contexts):
        batch = cfg.batch(context)
        live = [k for k in kinds if k not in stopped]
        steps = {k: _train_step(models[k], batch, context, cfg, device) for k in live}
        timings = time_calls(steps, device=device, min_run_time=cfg.min_run_time, min_repeats=cfg.repeats,
                             max_run_time=cfg.max_run_time, max_first_s=cfg.max_step_s)
        for kind in kinds:
            if kind in stopped:
                rows.append({"kind": kind, "context": context, "batch": batch, "skipped": stopped[kind]})
                continue
            t = timings[kind]
            rows.append({"kind": kind, "context": context, "batch": batch, "median_s": t.median_s,
                         "q25_s": t.q25_s, "q75_s": t.q75_s, "repeats": t.repeats,
                         "tokens_per_s": batch * context / t.median_s, "skipped": None})
            if t.first_call_s > cfg.max_step_s:
                stopped[kind] = (f"a step took {t.first_call_s:.3g} s at context {context}, over "
                                 f"{cfg.max_step_s:g} s")
        if say is not None:
            say(format_sweep([r for r in rows if r["context"] == context], header=False))
        del steps
    return rows


def _generation(cfg: ModelSweepConfig, kinds: Sequence[str], device: Any, say: Callable[[str], None] | None
                ) -> list[dict]:
    """Generation rows: each layer's memory grown token by token, the steps at each context interleaved."""
    import torch

    rows: list[dict] = []
    contexts = sorted(cfg.contexts)
    block = max(contexts) + 1
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        models = {kind: _model(kind, cfg, block, device) for kind in kinds}
        states = {kind: models[kind].new_states(cfg.gen_batch) for kind in kinds}
        pos = dict.fromkeys(kinds, 0)
        tokens = torch.randint(0, cfg.vocab_size, (block, cfg.gen_batch), generator=gen).to(device)

        def stepper(kind: str) -> Callable[[], Any]:
            def step() -> Any:  # one generated token: position pos[kind] reads the memory and joins it
                out = models[kind].step(tokens[pos[kind]], states[kind], pos[kind])
                pos[kind] += 1
                return out

            return step

        steppers = {kind: stepper(kind) for kind in kinds}
        for context in contexts:
            # fill to context - gen_steps - 1 tokens: the untimed step, then the timed ones, end at context
            for kind in kinds:
                while pos[kind] < context - cfg.gen_steps - 1:
                    steppers[kind]()
            timings = time_steps(steppers, cfg.gen_steps, device=device, warmup=1)
            for kind in kinds:
                t = timings[kind]
                rows.append({"kind": kind, "context": context, "batch": cfg.gen_batch, "median_s": t.median_s,
                             "q25_s": t.q25_s, "q75_s": t.q75_s, "repeats": t.repeats,
                             "tokens_per_s": cfg.gen_batch / t.median_s, "skipped": None,
                             "memory_bytes": sum(s.nbytes for s in states[kind]) // cfg.gen_batch})
            if say is not None:
                now = [r for r in rows if r["context"] == context]
                say(format_sweep(now, header=False, what="generation"))
    return rows


def crossovers(rows: Sequence[dict], reference: str = "softmax") -> dict[str, float | None]:
    """Per layer (not ``reference``): the context from which its tokens/s stays above the reference's,
    interpolated in log context (:func:`~linattn_core.tools.timing.crossing`); None where it is still
    behind at the longest context measured for both."""
    def times(kind: str) -> dict[int, float]:
        return {r["context"]: 1.0 / r["tokens_per_s"] for r in rows if r["kind"] == kind and not r["skipped"]}

    ref = times(reference)
    kinds = dict.fromkeys(r["kind"] for r in rows if r["kind"] != reference)
    return {kind: crossing(ref, times(kind)) for kind in kinds}


def table(result: dict, what: str = "training") -> dict[str, dict[int, float]]:
    """``{layer: {context: tokens/s}}`` of a result's ``training`` or ``generation`` rows (measured ones)."""
    out: dict[str, dict[int, float]] = {}
    for r in result[what]:
        if not r["skipped"]:
            out.setdefault(r["kind"], {})[r["context"]] = r["tokens_per_s"]
    return out


def run(cfg: ModelSweepConfig, *, device: Any = None, command: str | None = None,
        say: Callable[[str], None] | None = print) -> dict:
    """Run the sweep and print it as it goes; return the JSON-ready result.

    Keys: ``command`` (what reproduces it), ``git_commit``, ``hardware`` (:func:`environment`: the
    device, its name, threads, versions, load), ``device`` (the device's one-line description),
    ``config``, ``checks`` (parallel vs step form per layer, float64), ``training`` and ``generation``
    (one row per layer and context: ``kind``, ``context``, ``batch``, ``median_s``, ``q25_s``,
    ``q75_s``, ``repeats``, ``tokens_per_s``, ``skipped``; generation rows add ``memory_bytes`` per
    sequence), ``crossovers`` (``{"training": {layer: context}, "generation": {...}}``), ``wall_s``.
    """
    from ...lm.layers import LAYERS

    dev = torch_device(pick_device(device))
    kinds = list(LAYERS) if cfg.kinds is None else list(cfg.kinds)
    unknown = [k for k in kinds if k not in LAYERS]
    if unknown:
        raise ValueError(f"kinds must be among {tuple(LAYERS)}, got {unknown!r}")
    if "softmax" not in kinds:
        kinds.insert(0, "softmax")  # the reference every crossover is read against
    if min(cfg.contexts) <= cfg.gen_steps + 1:
        raise ValueError(f"contexts must be longer than gen_steps + 1 = {cfg.gen_steps + 1}, got "
                         f"{cfg.contexts}")
    start = time.perf_counter()
    commit = git_commit()  # the code that runs is the code at the start (HEAD may move meanwhile)
    with num_threads(cfg.threads):
        hardware = environment(dev, "float32")
        if say is not None:
            say(f"whole model against context on {hardware['device_description']}, torch "
                f"{hardware['torch']}, load average {hardware['load_average_1min'] or 0.0:.1f}")
            say(f"model: {cfg.n_layer} layers, {cfg.n_head} heads, width {cfg.n_embd}, float32; training "
                f"{cfg.tokens_per_step} tokens a step (batch = {cfg.tokens_per_step} / context); generation "
                f"batch {cfg.gen_batch}")
        checks = check_layers(kinds)
        if say is not None:
            say("parallel vs step form (float64, relative): "
                + ", ".join(f"{k} {e:.0e}" for k, e in checks.items()))
            say("\nTraining (forward, backward, AdamW), layers interleaved at each context")
            say(format_sweep([], header=True))
        training = _training(cfg, kinds, dev, say)
        if say is not None:
            say("\nGeneration (one token for the batch, the memory holding `context` tokens), layers "
                "interleaved")
            say(format_sweep([], header=True, what="generation"))
        generation = _generation(cfg, kinds, dev, say)
    result = {
        "command": command or "python -m linattn_core.tools.bench.models",
        "git_commit": commit,
        "hardware": hardware,
        "device": hardware["device_description"],
        "config": asdict(cfg),
        "checks": checks,
        "training": training,
        "generation": generation,
        "crossovers": {"training": crossovers(training), "generation": crossovers(generation)},
        "wall_s": time.perf_counter() - start,
    }
    if say is not None:
        say("\n" + format_crossovers(result))
    return result


def format_sweep(rows: Sequence[dict], *, header: bool = True, what: str = "training") -> str:
    """The table: layer, context, batch, tokens/s with the quartiles of the step time, and the ratio to
    softmax's tokens/s at the same context (above 1: faster than softmax)."""
    head = (f"{'layer':<18} {'context':>7} {'batch':>5} {'tokens/s':>10} {'step (quartiles)':>24} "
            f"{'vs softmax':>10}")
    lines = [head, "-" * len(head)] if header else []
    soft = {r["context"]: r for r in rows if r["kind"] == "softmax" and not r["skipped"]}
    for r in rows:
        if r["skipped"]:
            lines.append(f"{r['kind']:<18} {r['context']:>7} {r['batch']:>5} {'skipped':>10}  {r['skipped']}")
            continue
        s = soft.get(r["context"])
        ratio = "-" if s is None else f"{r['tokens_per_s'] / s['tokens_per_s']:.2f}x"
        step = f"{_ms(r['median_s'])} ({_ms(r['q25_s'])}-{_ms(r['q75_s'])})"
        flag = "  noisy" if r["q75_s"] - r["q25_s"] > r["median_s"] else ""
        lines.append(f"{r['kind']:<18} {r['context']:>7} {r['batch']:>5} {r['tokens_per_s']:>10.4g} "
                     f"{step:>24} {ratio:>10}{flag}")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def format_crossovers(result: dict) -> str:
    """Per linear layer: the context from which it is faster than softmax, for training and generation."""
    longest = max(result["config"]["contexts"])
    lines = [f"{'layer':<18} {'overtakes softmax: training':>28} {'generation':>12}"]
    cross = result["crossovers"]
    for kind in cross["training"]:
        cells = []
        for what in ("training", "generation"):
            n = cross[what].get(kind)
            cells.append(f"> {longest}" if n is None else f"~{n:,.0f}")
        lines.append(f"{kind:<18} {cells[0]:>28} {cells[1]:>12}")
    return "\n".join(lines)


#: The stored full runs (package data, installed with the package): ``results/<name>.json``.
STORED = ("models-cpu",)


def stored(name: str = "models-cpu") -> dict:
    """One stored run of this sweep (``linattn_core/tools/bench/results/<name>.json``), as :func:`run`
    returned it, wherever the package is installed."""
    from importlib import resources

    if name not in STORED:
        raise ValueError(f"name must be one of {STORED}, got {name!r}")
    text = resources.files(__package__).joinpath("results", f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def _parser() -> argparse.ArgumentParser:
    from ...lm.layers import LAYERS

    parser = argparse.ArgumentParser(prog="python -m linattn_core.tools.bench.models",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test in seconds")
    parser.add_argument("--kinds", nargs="+", choices=tuple(LAYERS), default=None,
                        help="layers (default: all)")
    parser.add_argument("--contexts", nargs="+", type=int, default=None, help="context lengths")
    parser.add_argument("--tokens-per-step", type=int, default=None, help="training tokens per step")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: best available)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the result as JSON")
    return parser


def config_from_args(argv: Sequence[str]) -> tuple[ModelSweepConfig, str | None]:
    """The configuration and device a command line asks for (``argv`` without the program name): how
    ``main`` reads it, and how a stored run's ``command`` is replayed."""
    parser = _parser()
    args = parser.parse_args(argv)
    cfg = SIZES["quick" if args.quick else "full"]()
    changes: dict[str, Any] = {}
    if args.kinds:
        changes["kinds"] = tuple(args.kinds)
    if args.contexts:
        if min(args.contexts) < 2:
            parser.error(f"--contexts must be at least 2, got {args.contexts}")
        changes["contexts"] = tuple(sorted(set(args.contexts)))
    if args.tokens_per_step is not None:
        changes["tokens_per_step"] = args.tokens_per_step
    if args.threads is not None:
        changes["threads"] = args.threads
    try:
        pick_device(args.device)
    except ValueError as exc:
        parser.error(str(exc))
    return replace(cfg, **changes), args.device


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m linattn_core.tools.bench.models``: the whole-model sweep alone."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg, device = config_from_args(argv)
    args = _parser().parse_args(argv)
    command = " ".join(["python -m linattn_core.tools.bench.models", *argv])
    result = run(cfg, device=device, command=command)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
