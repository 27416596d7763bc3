"""The benchmark's one run: the forward sweep, the training and decoding parts, the targets, the output."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import timing as T
from . import decode as bench_decode
from . import train as bench_train
from .targets import Target, find, format_targets, judged, ratio_target

if TYPE_CHECKING:  # imported where it runs, so that python -m linattn_core.tools.bench.noncausal does not
    from . import noncausal as bench_noncausal  # find its module already imported

__all__ = ["Config", "evaluate_targets", "main", "run"]

FULL_LENGTHS = (256, 1024, 4096, 16384, 65536)
PARTS = ("forward", "training", "decoding", "layers", "models")
QUICK_LENGTHS = (64, 128)


@dataclass(frozen=True)
class Config:
    """The sizes and budgets of one benchmark run."""

    lengths: tuple[int, ...] = FULL_LENGTHS
    batch_heads: int = 8
    d: int = 64
    d_v: int = 64
    dtype: str = "float32"
    chunk_size: int = 64
    matmul_sizes: tuple[int, ...] = (2048, 4096)
    min_run_time: float = 0.1
    max_run_time: float = 1.0
    # interleaved blocks per method and length at least (where max_run_time allows): enough for the
    # quartiles to show a busy machine's phases, which then withhold the verdicts (IQR > median)
    repeats: int = 15
    # 12 s: the training target's SDPA step at N = 16,384 (about 7 s on a 2-core CPU) is measured, not
    # extrapolated; SDPA's forward at 65,536 (some 30 s) still is
    max_call_s: float = 12.0
    budget_s: float | None = 600.0
    threads: int | None = None
    decode_contexts: tuple[int, ...] = (1024, 4096, 16384, 65536)
    decode_batches: tuple[int, ...] = (1, 8)
    # the training step of the whole model per layer (CPU, float32): sizes of bench_layers.SIZES, and
    # the thread counts (None: the machine's default)
    layer_sizes: str = "full"
    layer_threads: tuple[int | None, ...] = (1, None)
    # the whole model against context (bench_models.SIZES)
    model_sizes: str = "full"
    # the parts of the run (--parts): the forward sweep, training, decoding, the layers' step, the models
    parts: tuple[str, ...] = PARTS

    @classmethod
    def quick(cls) -> Config:
        """Tiny sizes: every code path in a few seconds (used by the tests)."""
        return cls(lengths=QUICK_LENGTHS, batch_heads=2, d=16, d_v=16, chunk_size=16, matmul_sizes=(128,),
                   min_run_time=0.005, max_run_time=0.02, repeats=3, max_call_s=2.0, budget_s=60.0,
                   decode_contexts=(32, 64), decode_batches=(1,), layer_sizes="quick", layer_threads=(1,),
                   model_sizes="quick")


def _fraction(records: Sequence[T.Record], matmul_gflops: float, N: int, at_least: float,
              method: str = "chunked", causal: bool = True) -> Target:
    r = find(records, method, causal, N)
    name = f"{method} GFLOP/s / matmul GFLOP/s at N={N}"
    if r is None or not r.measured or r.gflops is None:
        why = "not measured" if r is None else r.skipped or ""
        return Target(name, f">= {at_least:.0%}", None, None, why)
    frac = r.gflops / matmul_gflops
    return judged(Target(name, f">= {at_least:.0%}", frac, frac >= at_least), r)


#: The non-causal form against the causal one on the same inputs: from this length on, and its rate.
NONCAUSAL_FROM_N = 1024
NONCAUSAL_FRACTION = (16384, 0.60)


def noncausal_targets(records: Sequence[T.Record], matmul_gflops: float,
                      lengths: Sequence[int], same_pass: Sequence[bench_noncausal.Pass] = ()) -> list[Target]:
    """The non-causal form (``linear``) at most as slow as the causal chunked form, timed in the same
    interleaved pass on the same inputs, at every length from :data:`NONCAUSAL_FROM_N`; and at
    ``NONCAUSAL_FRACTION`` of the matmul rate (FLOPs ``4 N d d_v`` per batch-head): of a matmul of the
    same FLOPs timed in the same pass as the kernel where ``same_pass`` holds that length
    (:mod:`.noncausal`), else of the rate measured before and after the sweep."""
    out = []
    for N in (n for n in lengths if n >= NONCAUSAL_FROM_N):
        nc, c = find(records, "linear", False, N), find(records, "chunked", True, N)
        name = f"non-causal linear / causal chunked, same inputs, at N={N}"
        if nc is None or c is None or not (nc.measured and c.measured):
            out.append(Target(name, "<= 1x", None, None, "not measured at this length"))
            continue
        ratio = nc.median_s / c.median_s
        out.append(judged(Target(name, "<= 1x", ratio, ratio <= 1.0), nc, c))
    N, at_least = NONCAUSAL_FRACTION
    if any(p.N == N for p in same_pass):
        from . import noncausal as bench_noncausal

        out.append(bench_noncausal.targets([p for p in same_pass if p.N == N])[-1])
    else:
        out.append(_fraction(records, matmul_gflops, N, at_least, "linear", False))
    return out


def evaluate_targets(records: Sequence[T.Record], matmul_gflops: float, *, lengths: Sequence[int],
                     itemsize: int = 4, same_pass: Sequence[bench_noncausal.Pass] = ()) -> list[Target]:
    """The targets of the benchmark, computed from the records (N/A where a measurement is missing).

    - causal ``auto`` vs causal SDPA at 16384 (>= 10x) and 65536 (>= 20x);
    - non-causal ``linear`` vs SDPA at 16384 (>= 30x);
    - ``chunked`` at >= 40% of the matmul rate at 4096 and 16384, >= 25% at 65536
      (chunked FLOPs: ``4 N d d_v + 2 N C (d + d_v)`` per batch-head);
    - non-causal ``linear`` at most as slow as causal ``chunked`` (same inputs, same interleaved pass) at
      every length from 1024, and at >= 60% of the matmul rate at 16384 (:func:`noncausal_targets`; the
      kernel against a matmul of the same FLOPs in one pass where ``same_pass`` has that length);
    - ``auto`` within 1.25x of the fastest causal linear form (recurrent, cumsum, chunked) at every N;
    - peak memory of causal ``auto`` at 65536, inputs included, at most 8x the bytes of q, k, v and the
      output.

    Where the slower side of a ratio was skipped by the time guard, its extrapolated time is used and the
    note says so. Where a measurement behind a target spread wider than its median (IQR > median), the
    verdict is withheld (:func:`.targets.judged`).
    """
    out = [
        ratio_target(records, "causal: auto vs SDPA at N=16384", ("sdpa", True), ("auto", True), 16384, 10),
        ratio_target(records, "causal: auto vs SDPA at N=65536", ("sdpa", True), ("auto", True), 65536, 20),
        ratio_target(records, "non-causal: linear vs SDPA at N=16384", ("sdpa", False), ("linear", False),
                      16384, 30),
        _fraction(records, matmul_gflops, 4096, 0.40),
        _fraction(records, matmul_gflops, 16384, 0.40),
        _fraction(records, matmul_gflops, 65536, 0.25),
        *noncausal_targets(records, matmul_gflops, lengths, same_pass),
    ]
    for N in lengths:
        auto = find(records, "auto", True, N)
        others = [r for r in (find(records, m, True, N) for m in ("recurrent", "cumsum", "chunked"))
                  if r is not None and r.measured]
        name = f"auto / fastest causal linear form at N={N}"
        if auto is None or not auto.measured or not others:
            out.append(Target(name, "<= 1.25x", None, None, "auto or all other causal forms not measured"))
            continue
        best = min(others, key=lambda r: r.median_s)
        ratio = auto.median_s / best.median_s
        target = Target(name, "<= 1.25x", ratio, ratio <= 1.25, f"fastest: {best.method}")
        out.append(judged(target, auto, best))
    auto = find(records, "auto", True, 65536)
    name = "causal auto peak memory at N=65536 / bytes of q, k, v, out"
    if auto is None or not auto.measured or auto.peak_bytes is None:
        why = "not measured" if auto is None or auto.measured else auto.skipped
        out.append(Target(name, "<= 8x", None, None, why or "peak memory not measurable on this device"))
    else:
        io = auto.batch_heads * auto.N * (2 * auto.d + 2 * auto.d_v) * itemsize
        inputs = auto.batch_heads * auto.N * (2 * auto.d + auto.d_v) * itemsize
        ratio = (auto.peak_bytes + inputs) / io
        out.append(Target(name, "<= 8x", ratio, ratio <= 8, "peak = measured extra + the live inputs"))
    return out


def format_results(records: Sequence[T.Record], matmul_gflops: float) -> str:
    """The table: median time, spread, peak extra memory, GFLOP/s and the fraction of the matmul rate."""
    head = (f"{'method':<22} {'N':>6} {'median':>11} {'IQR':>10} {'peak mem':>10} {'GFLOP/s':>8} "
            f"{'of matmul':>9}")
    lines = [head, "-" * len(head)]
    order = {m: i for i, m in enumerate(T.METHODS)}  # methods the cost model does not list come last
    for r in sorted(records, key=lambda r: (r.causal, order.get(r.method, len(order)), r.method, r.N)):
        if r.measured:
            frac = r.gflops / matmul_gflops
            lines.append(f"{r.label:<22} {r.N:>6} {_ms(r.median_s):>11} {_ms(r.q75_s - r.q25_s):>10} "
                         f"{T.format_bytes(r.peak_bytes):>10} {r.gflops:>8.3g} {frac:>9.1%}")
        else:
            lines.append(f"{r.label:<22} {r.N:>6} {'skipped':>11}  {r.skipped}")
    return "\n".join(lines)


def format_noncausal(records: Sequence[T.Record], matmul_gflops: float) -> str:
    """Per length: the non-causal form and the causal chunked form, their ratio and the non-causal
    form's fraction of the matmul rate; "noisy" where either one's IQR exceeds its median."""
    from .targets import noisy

    lines = [f"{'N':>6} {'non-causal':>24} {'causal chunked':>24} {'ratio':>7} {'of matmul':>9}"]
    for N in sorted({r.N for r in records}):
        nc, c = find(records, "linear", False, N), find(records, "chunked", True, N)
        if nc is None or c is None or not (nc.measured and c.measured):
            continue
        flag = "  noisy: IQR > median" if noisy(nc, c) else ""
        lines.append(f"{N:>6} {_spread(nc):>24} {_spread(c):>24} {nc.median_s / c.median_s:>6.2f}x "
                     f"{nc.gflops / matmul_gflops:>9.1%}{flag}")
    return "\n".join(lines)


def _spread(r: T.Record) -> str:
    return f"{_ms(r.median_s)} [{r.q25_s * 1e3:.3g}-{r.q75_s * 1e3:.3g}]"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


#: Largest |fast - reference| accepted by :func:`check_methods` (inputs of order one), per dtype: float64
#: checks the algebra, float32 the forms that only run in float32 (the compiled chunked kernel).
CHECK_ATOL = 1e-8
CHECK_ATOL_FLOAT32 = 5e-5


def check_methods(methods: Sequence[T.Method], device: Any, *, N: int = 67, d: int = 16, d_v: int = 8,
                  seed: int = 0) -> dict[str, float]:
    """Every method against its reference before anything is timed, on the timing device.

    Softmax methods are compared with :func:`linattn_core.softmax_attention`, linear ones with the quadratic
    :func:`linattn_core.kernel_attention` (elu+1), at a length that no chunk size of the run divides, in
    float64 and then with float32 inputs (against the same float64 reference): the compiled chunked
    kernel runs in float32 only. Returns the largest absolute difference per method label and dtype
    (``"chunked (causal)"`` and ``"chunked (causal) float32"``); a speed of a wrong answer is worth nothing.
    """
    import torch

    from linattn_core import kernel_attention, softmax_attention

    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 3, N, d, generator=gen, dtype=torch.float64).to(device) for _ in range(2))
    v = torch.randn(2, 3, N, d_v, generator=gen, dtype=torch.float64).to(device)
    errors = {}
    for m in methods:
        if m.name in ("softmax_naive", "sdpa"):
            ref = softmax_attention(q, k, v, causal=m.causal)
        else:
            ref = kernel_attention(q, k, v, "elu+1", causal=m.causal)
        errors[m.label] = float((m.fn(q, k, v) - ref).abs().max())
        q32, k32, v32 = (x.float() for x in (q, k, v))
        errors[f"{m.label} float32"] = float((m.fn(q32, k32, v32).double() - ref).abs().max())
    return errors


def check_failures(errors: dict[str, float]) -> dict[str, float]:
    """The entries of :func:`check_methods` over their dtype's tolerance."""
    return {k: e for k, e in errors.items()
            if not e <= (CHECK_ATOL_FLOAT32 if k.endswith(" float32") else CHECK_ATOL)}


def chunked_kernel(device: Any) -> str:
    """What runs the causal chunked form here: the compiled kernel (its instruction set) or torch ops."""
    from ...fast import kernel

    if T.torch_device(device).type != "cpu":
        return "torch ops (the compiled kernel is for CPUs)"
    if kernel.available():
        return f"compiled kernel, {kernel.default_isa()} (LINATTN_NATIVE=0 times the torch ops instead)"
    why = "switched off by LINATTN_NATIVE=0" if kernel.isas() else "not built or no AVX2 on this CPU"
    return f"torch ops (compiled kernel {why})"


def run(config: Config, *, device: Any = None, progress: bool | None = None,
        say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark and print it; return the JSON-ready result.

    Keys: ``matmul_gflops`` (the higher of the rates measured before and after the sweep, which are
    also given as ``matmul_gflops_before`` and ``matmul_gflops_after``), ``meta`` (hardware and
    software), ``config``, ``results`` (one dict per :class:`~linattn_core.tools.timing.Record`, without its
    ``meta``), ``targets``.
    """
    dev = T.pick_device(device)
    with T.num_threads(config.threads):  # the yardstick and the sweep on the same threads
        meta = T.environment(dev, config.dtype)
        say(f"linattn benchmark on {meta['device_description']}")
        load = meta["load_average_1min"] or 0.0
        say(f"torch {meta['torch']}, Python {meta['python']}, {meta['platform']}, {config.dtype}, "
            f"batch*heads={config.batch_heads}, d=d_v={config.d}, load average {load:.1f}")
        start = time.perf_counter()
        rate = T.matmul_rate(dev, config.matmul_sizes, config.dtype, min_run_time=config.min_run_time)
        matmul_gflops = rate / 1e9
        sizes = " and ".join(f"{n}³" for n in config.matmul_sizes)
        say(f"{config.dtype} matmul rate (best of {sizes} products): {matmul_gflops:.1f} GFLOP/s")
        methods = T.standard_methods(chunk_size=config.chunk_size)
        kernel = chunked_kernel(dev)
        say(f"causal chunked form: {kernel}")
        checks = check_methods(methods, dev)
        wrong = check_failures(checks)
        worst = {dt: max(e for k, e in checks.items() if k.endswith(" float32") == (dt == "float32"))
                 for dt in ("float64", "float32")}
        say(f"checked against the float64 references (N=67): max |difference| = {worst['float64']:.1e} "
            f"(float64 inputs), {worst['float32']:.1e} (float32 inputs)"
            + (f"; WRONG: {wrong}" if wrong else ""))
        parts = set(config.parts)
        records = T.sweep(methods, config.lengths, d=config.d, d_v=config.d_v,
                          batch_heads=config.batch_heads, dtype=config.dtype, device=dev,
                          min_run_time=config.min_run_time, min_repeats=config.repeats,
                          max_run_time=config.max_run_time, max_call_s=config.max_call_s,
                          budget_s=config.budget_s, progress=progress) if "forward" in parts else []
        # the non-causal kernel against a matmul of the same FLOPs, in one interleaved pass (bench_noncausal)
        from . import noncausal as bench_noncausal

        same_pass = []
        if "forward" in parts and NONCAUSAL_FRACTION[0] in config.lengths and "compiled" in kernel:
            same_pass.append(bench_noncausal.measure_apart(
                NONCAUSAL_FRACTION[0], batch_heads=config.batch_heads, d=config.d, d_v=config.d_v,
                threads=config.threads, repeats=config.repeats))
        # training: forward + backward (sdpa_train, chunked_train, chunked_train_autograd; see bench_train)
        train_checks, train = {}, []
        if "training" in parts:
            train_checks = bench_train.check_train(dev, chunk_size=config.chunk_size)
            train = bench_train.train_sweep(config.lengths, batch_heads=config.batch_heads, d=config.d,
                                            d_v=config.d_v, dtype=config.dtype, device=dev,
                                            chunk_size=config.chunk_size, min_run_time=config.min_run_time,
                                            max_run_time=config.max_run_time, max_call_s=config.max_call_s,
                                            budget_s=config.budget_s, min_repeats=config.repeats)
        # decoding: one token with a KV cache against a fixed-size state (see bench_decode)
        decoding = bench_decode.decode_sweep(config.decode_contexts, batches=config.decode_batches,
                                             batch_heads=config.batch_heads, d=config.d,
                                             device=str(dev.type)) if "decoding" in parts else []
        # again after the sweep: on a shared machine the rate drifts, and the fractions below use the
        # higher of the two (the stricter yardstick)
        rate_after = T.matmul_rate(dev, config.matmul_sizes, config.dtype, min_run_time=config.min_run_time)
    # the whole model: its training step per layer at the training chapter's context, on one thread and on
    # the machine's default (outside the block above, which may have set the threads), and against
    # context (training and generation, the crossovers); imported here, so that python -m
    # linattn_core.tools.bench.layers (or .models) does not find its module already imported
    from . import layers as bench_layers
    from . import models as bench_models

    layer_bench = (bench_layers.layer_steps(sizes=config.layer_sizes, threads=config.layer_threads)
                   if "layers" in parts else None)
    model_sweep = None
    if "models" in parts:
        model_sweep = bench_models.run(bench_models.SIZES[config.model_sizes](), device=dev,
                                       command="python -m linattn_core.bench (its models part)", say=None)
    matmul_gflops_before, matmul_gflops_after = matmul_gflops, rate_after / 1e9
    matmul_gflops = max(matmul_gflops_before, matmul_gflops_after)
    say(f"{config.dtype} matmul rate again after the sweep: {matmul_gflops_after:.1f} GFLOP/s "
        f"({matmul_gflops_after / matmul_gflops_before - 1:+.0%}); the fractions use {matmul_gflops:.1f}")
    itemsize = 2 if config.dtype in ("float16", "bfloat16") else (8 if config.dtype == "float64" else 4)
    targets = []
    if "forward" in parts:
        targets += evaluate_targets(records, matmul_gflops, lengths=config.lengths, itemsize=itemsize,
                                    same_pass=same_pass)
    if "training" in parts:
        targets += bench_train.train_targets(train, train_checks, itemsize=itemsize)
    if "decoding" in parts:
        targets += bench_decode.decode_targets(decoding)
    if layer_bench is not None:
        targets += bench_layers.layer_targets(layer_bench)
    if records:
        say("")
        say(format_results(records, matmul_gflops))
        say("\nNon-causal against causal on the same inputs, timed in the same interleaved pass (median "
            "[quartiles]; the fraction of the matmul rate counts 4 N d d_v per batch-head):")
        say(format_noncausal(records, matmul_gflops))
    if same_pass:
        from . import noncausal as bench_noncausal

        say("\nThe non-causal kernel, the same call through linear_attention (its output allocated afresh), "
            "the causal kernel and a matmul of the same FLOPs, interleaved (python -m "
            "linattn_core.tools.bench.noncausal; the fractions taken round by round):")
        say(bench_noncausal.format_passes(same_pass))
    if train:
        say("\nTraining, forward + backward (FLOPs counted as 3 forwards; gradients checked in float64, "
            "N=67: " + ", ".join(f"{k} {e:.1e}" for k, e in train_checks.items()) + ")")
        say(format_results(train, matmul_gflops))
    if decoding:
        say(f"\nDecoding, one token (attention only, {config.batch_heads} heads, d = d_v = {config.d}, "
            "float32, one thread)")
        say(bench_decode.format_decode(decoding))
    if layer_bench is not None:
        lc = layer_bench["config"]
        say(f"\nTraining step of the whole model per layer (forward, backward, AdamW; {lc['n_layer']} "
            f"layers, {lc['n_head']} heads, width {lc['n_embd']}, batch {lc['batch_size']}, context "
            f"{lc['block_size']}, float32 CPU, layers interleaved; parallel vs step form in float64: "
            f"max {max(layer_bench['checks'].values()):.0e})")
        say(bench_layers.format_layers(layer_bench["results"]))
    if model_sweep is not None:
        mc = model_sweep["config"]
        say(f"\nThe whole model against context ({model_sweep['device']}; {mc['n_layer']} layers, "
            f"{mc['n_head']} heads, width {mc['n_embd']}, float32; training {mc['tokens_per_step']} tokens a "
            f"step, generation batch {mc['gen_batch']}; layers interleaved at each context)")
        for what in ("training", "generation"):
            say(f"{what}:")
            say(bench_models.format_sweep(model_sweep[what], what=what))
        say("the context from which each linear layer's tokens/s passes softmax's:")
        say(bench_models.format_crossovers(model_sweep))
    say("")
    say("Targets (reported, not tested):")
    say(format_targets(targets))
    say(f"\n{len(records)} measurements in {time.perf_counter() - start:.0f} s")
    return {
        "matmul_gflops": matmul_gflops,
        "matmul_gflops_before": matmul_gflops_before,
        "matmul_gflops_after": matmul_gflops_after,
        "meta": meta,
        "chunked_kernel": kernel,
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "checks": checks,
        "noncausal_same_pass": [p.to_dict() for p in same_pass],
        "results": [r.to_dict(meta=False) for r in records],
        "training": {"checks": train_checks, "results": [r.to_dict(meta=False) for r in train]},
        "decode": decoding,
        "layers": layer_bench,
        "models": model_sweep,
        "targets": [dict(name=t.name, wanted=t.wanted, value=t.value, verdict=t.verdict, note=t.note)
                    for t in targets],
    }


def _positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        value = kind(text)
        if not value > 0 or (isinstance(value, float) and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
        return value

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; always returns 0 (the targets are reported, not enforced)."""
    parser = argparse.ArgumentParser(prog="python -m linattn_core.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test in seconds")
    parser.add_argument("--max-n", type=_positive(int), default=None, help="longest sequence length")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: best available)")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the results as JSON")
    parser.add_argument("--max-call-s", type=_positive(float), default=None, help="per-call time budget (s)")
    parser.add_argument("--budget-s", type=_positive(float), default=None, help="whole-sweep time budget (s)")
    parser.add_argument("--threads", type=_positive(int), default=None,
                        help="torch CPU threads for the sweep (default: torch's own choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=None,
                        help=f"run only these parts (default: all of {' '.join(PARTS)})")
    args = parser.parse_args(argv)
    config = Config.quick() if args.quick else Config()
    changes: dict[str, Any] = {}
    if args.max_n is not None:
        lengths = tuple(n for n in config.lengths if n <= args.max_n)
        if not lengths:
            parser.error(f"--max-n {args.max_n} is shorter than every length of the run {config.lengths}")
        changes["lengths"] = lengths
    if args.max_call_s is not None:
        changes["max_call_s"] = args.max_call_s
    if args.budget_s is not None:
        changes["budget_s"] = args.budget_s
    if args.threads is not None:
        changes["threads"] = args.threads
    if args.parts:
        changes["parts"] = tuple(p for p in PARTS if p in args.parts)
    if changes:
        config = replace(config, **changes)
    try:
        T.pick_device(args.device)
    except ValueError as exc:
        parser.error(str(exc))
    result = run(config, device=args.device, progress=False if args.no_progress else None)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
