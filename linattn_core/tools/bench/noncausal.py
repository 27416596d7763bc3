"""The non-causal kernel against a plain matmul of the same FLOPs and the causal kernel, in one pass.

Run it with ``python -m linattn_core.tools.bench.noncausal`` (``--lengths``, ``--threads``, ``--repeats``;
the benchmark's forward part runs it at 16,384). At each length four calls on the same inputs (float32,
``batch_heads`` sequences of ``d = d_v``, elu+1) are timed together by
:func:`~linattn_core.tools.timing.time_calls`, a block of each in turn, round after round:

``kernel``            :func:`linattn_core.fast.kernel.noncausal` into an output kept between calls: the
                      features, ``S = phi(K)^T V`` with ``z``, and ``phi(Q) S / phi(Q) z``, nothing else
``linear_attention``  the same call as a reader makes it (``causal=False``): its output allocated afresh
``causal``            the causal chunked kernel (:func:`linattn_core.fast.kernel.chunked`) into a kept output
``matmul``            ``torch.mm`` of two ``n x n`` matrices, ``2 n^3`` as close as a whole ``n`` gets to the
                      non-causal form's ``4 N d d_v`` per sequence (exactly at N = 16,384 with the defaults)

The fraction of the matmul rate is taken round by round (each side's FLOPs over its own block of the
round), so that a phase of a busy machine lands on both sides of a ratio, and reported as the median and
quartiles of the rounds. The targets, reported and never tested: the kernel at most as slow as the
causal kernel from N = 1,024 on, and at least 60% of the matmul's rate at N = 16,384; a verdict is
withheld where a timing behind it spread wider than its median (IQR > median).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..timing import Timing, noisy, num_threads, time_calls
from .targets import NOISY, Target

__all__ = ["CALLS", "FRACTION", "FROM_N", "Pass", "format_passes", "main", "matmul_side", "measure",
           "measure_apart", "targets"]

CALLS = ("kernel", "linear_attention", "causal", "matmul")
#: from this length on, the non-causal kernel at most as slow as the causal one
FROM_N = 1024
#: at this length, at least this fraction of the matmul's rate (measured in the same pass)
FRACTION = (16384, 0.60)


def matmul_side(flops: float) -> int:
    """The side ``n`` of the square product whose ``2 n^3`` FLOPs come closest to ``flops``."""
    return max(1, round((flops / 2) ** (1 / 3)))


@dataclass(frozen=True)
class Pass:
    """One length's interleaved pass: the timings of :data:`CALLS`, the FLOPs of each side, and the
    fraction of the matmul's rate of each non-causal call as ``(q25, median, q75)`` over the rounds."""

    N: int
    batch_heads: int
    d: int
    d_v: int
    threads: int
    timings: dict[str, Timing]
    flops: float         # the non-causal form: 4 N d d_v per sequence
    matmul_n: int        # the side of the matmul's squares: 2 n^3 FLOPs
    fractions: dict[str, tuple[float, float, float]]
    load: float | None   # the 1-minute load average after the pass
    omp_wait_policy: str | None = None  # OMP_WAIT_POLICY of the process that measured it

    @property
    def matmul_flops(self) -> float:
        return 2.0 * self.matmul_n**3

    @property
    def ratio_to_causal(self) -> float:
        """Median time of the non-causal kernel over the causal kernel's."""
        return self.timings["kernel"].median_s / self.timings["causal"].median_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: sizes, the matmul's side, the load, and per call its median, quartiles and fraction."""
        calls = {name: {"median_s": t.median_s, "q25_s": t.q25_s, "q75_s": t.q75_s, "repeats": t.repeats,
                        "of_matmul": self.fractions.get(name)} for name, t in self.timings.items()}
        return {"N": self.N, "batch_heads": self.batch_heads, "d": self.d, "d_v": self.d_v,
                "threads": self.threads, "matmul_n": self.matmul_n, "load": self.load,
                "omp_wait_policy": self.omp_wait_policy, "calls": calls}


def _fractions(t: Timing, mm: Timing, flops: float, matmul_flops: float) -> tuple[float, float, float]:
    import numpy as np

    n = min(len(t.times), len(mm.times))  # block i of each ran in round i
    per_round = np.asarray(mm.times[:n]) / np.asarray(t.times[:n]) * (flops / matmul_flops)
    q25, median, q75 = np.quantile(per_round, [0.25, 0.5, 0.75])
    return float(q25), float(median), float(q75)


def measure(N: int, *, batch_heads: int = 8, d: int = 64, d_v: int = 64, threads: int | None = None,
            repeats: int = 30, max_run_time: float = 60.0, seed: int = 0) -> Pass:
    """Time :data:`CALLS` at length ``N`` in one interleaved pass (``repeats`` blocks each at least, as
    long as ``max_run_time`` seconds allow) on ``threads`` threads (default: torch's)."""
    import torch

    from linattn_core import linear_attention
    from linattn_core.fast import kernel
    from linattn_core.feature_maps import EluPlusOne

    if not kernel.available():
        raise RuntimeError("the compiled kernel is not in use here (not built, no AVX2, or LINATTN_NATIVE=0)")
    with num_threads(threads):
        used = torch.get_num_threads()
        gen = torch.Generator().manual_seed(seed)
        q, k = (torch.randn(batch_heads, N, d, generator=gen) for _ in range(2))  # (B, N, d)
        v = torch.randn(batch_heads, N, d_v, generator=gen)
        out, den = torch.empty(batch_heads, N, d_v), torch.empty(batch_heads, N)
        q4, k4, v4 = (x.view(1, batch_heads, N, -1) for x in (q, k, v))  # (batch, heads, N, .)
        flops = 4.0 * N * d * d_v * batch_heads
        n = matmul_side(flops)
        a, b = (torch.randn(n, n, generator=gen) for _ in range(2))
        phi, eps = EluPlusOne(), 1e-6
        calls = {
            "kernel": lambda: kernel.noncausal(q, k, v, phi, eps, out, den, threads=used),
            "linear_attention": lambda: linear_attention(q4, k4, v4, "elu+1", causal=False, eps=eps),
            "causal": lambda: kernel.chunked(q, k, v, phi, eps, 64, out, den, threads=used),
            "matmul": lambda: torch.mm(a, b),
        }
        # a block of about a millisecond or more each, and `repeats` blocks where max_run_time allows
        timings = time_calls(calls, min_run_time=repeats * 2e-3, min_repeats=repeats,
                             max_run_time=max_run_time)
    fractions = {name: _fractions(timings[name], timings["matmul"], flops, 2.0 * n**3)
                 for name in ("kernel", "linear_attention", "causal")}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return Pass(N, batch_heads, d, d_v, used, timings, flops, n, fractions, load,
                os.environ.get("OMP_WAIT_POLICY"))


def measure_apart(N: int, **options: Any) -> Pass:
    """:func:`measure` in a child process whose torch OpenMP workers sleep as soon as they are idle
    (``OMP_WAIT_POLICY=PASSIVE``, unless the caller's environment sets a policy).

    The pass calls ``torch.mm`` and the kernel in turn. Under libgomp's default, torch's idle workers
    spin for a while after each product, on the cores the kernel's own threads then need, and the
    kernel's time would include that spinning (measured at N = 16,384 on 2 threads: 14.6 ms against
    12.4 ms). The policy is read when torch loads, hence the fresh process; the rest of the benchmark
    keeps the caller's policy, since its models are torch ops through and through."""
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    code = "import sys; from linattn_core.tools.bench.noncausal import _child; _child(sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", code, str(N), json.dumps(options)], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the non-causal pass at N={N} failed in its process:\n{done.stderr[-2000:]}")
    d = json.loads(done.stdout.splitlines()[-1])
    timings = {name: Timing(**{**t, "times": tuple(t["times"])}) for name, t in d.pop("timings").items()}
    fractions = {name: tuple(f) for name, f in d.pop("fractions").items()}
    return Pass(**d, timings=timings, fractions=fractions)


def _child(argv: Sequence[str]) -> None:
    # measure_apart's process: one pass, printed whole (every round's time) as one line of JSON
    p = measure(int(argv[0]), **json.loads(argv[1]))
    d = asdict(p)
    print(json.dumps(d))


def targets(passes: Sequence[Pass]) -> list[Target]:
    """The kernel at most as slow as the causal kernel at every measured length from :data:`FROM_N`, and at
    :data:`FRACTION` of the matmul's rate (the median of the rounds); N/A where the length was not
    measured, no verdict where a timing behind the target spread wider than its median."""
    out = []
    for p in sorted((p for p in passes if p.N >= FROM_N), key=lambda p: p.N):
        ratio, name = p.ratio_to_causal, f"non-causal kernel / causal kernel, same pass, at N={p.N}"
        target = Target(name, "<= 1x", ratio, ratio <= 1.0)
        out.append(_judged(target, p.timings["kernel"], p.timings["causal"]))
    N, at_least = FRACTION
    name = f"non-causal kernel GFLOP/s / matmul GFLOP/s, same pass, at N={N}"
    p = next((p for p in passes if p.N == N), None)
    if p is None:
        out.append(Target(name, f">= {at_least:.0%}", None, None, "not measured"))
        return out
    q25, median, q75 = p.fractions["kernel"]
    note = f"rounds' quartiles {q25:.1%}-{q75:.1%}, load average {p.load:.1f}" if p.load is not None else ""
    out.append(_judged(Target(name, f">= {at_least:.0%}", median, median >= at_least, note),
                       p.timings["kernel"], p.timings["matmul"]))
    return out


def _judged(target: Target, *timings: Timing) -> Target:
    if not any(noisy(t) for t in timings):
        return target
    note = NOISY + (f"; {target.note}" if target.note else "")
    return Target(target.name, target.wanted, target.value, None, note, noisy=True)


def format_passes(passes: Sequence[Pass]) -> str:
    """Per length: each call's median [quartiles] and, for the non-causal calls and the causal kernel, the
    fraction of the matmul's rate (median of the rounds [quartiles]); "noisy" where a call's IQR
    exceeds its median."""
    lines = [f"{'N':>6} {'call':<17} {'median [quartiles]':>28} {'of matmul, per round':>28}"]
    for p in sorted(passes, key=lambda p: p.N):
        for name in CALLS:
            t = p.timings[name]
            spread = f"{t.median_s * 1e3:.3g} ms [{t.q25_s * 1e3:.3g}-{t.q75_s * 1e3:.3g}]"
            if name == "matmul":
                frac = f"{p.matmul_n}^3, {p.matmul_flops / t.median_s / 1e9:.3g} GFLOP/s"
            else:
                q25, median, q75 = p.fractions[name]
                frac = f"{median:.1%} [{q25:.1%}-{q75:.1%}]"
            flag = "  noisy: IQR > median" if noisy(t) else ""
            lines.append(f"{p.N:>6} {name:<17} {spread:>28} {frac:>28}{flag}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: measure, print the table and the targets; always returns 0."""
    from .targets import format_targets

    parser = argparse.ArgumentParser(prog="python -m linattn_core.tools.bench.noncausal",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=30, help="interleaved blocks per call at least")
    parser.add_argument("--batch-heads", type=int, default=8)
    args = parser.parse_args(argv)
    passes = [measure_apart(N, batch_heads=args.batch_heads, threads=args.threads, repeats=args.repeats)
              for N in args.lengths]
    p = passes[0]
    print(f"non-causal kernel, causal kernel and a matmul of the same FLOPs, interleaved (float32, elu+1, "
          f"{p.batch_heads} sequences, d = d_v = {p.d}, {p.threads} threads; load average after the last "
          f"pass {passes[-1].load}; each pass in its own process, OMP_WAIT_POLICY={p.omp_wait_policy})")
    print(format_passes(passes))
    print("\nTargets (reported, not tested):")
    print(format_targets(targets(passes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
