"""A/B timing of the causal chunked form: a git revision against the working tree, in one process.

    python scripts/ab_bench.py 28db73e            # N = 4096 and 16384, best of 25 interleaved calls
    python scripts/ab_bench.py HEAD~3 --lengths 65536 --reps 8
    python scripts/ab_bench.py HEAD~1 --noncausal              # the non-causal form instead

On a shared machine the speed drifts by tens of percent within minutes, so two separate bench runs cannot
tell a 10% change from noise. Here both versions run on the same inputs, call after call in alternation,
and each keeps its fastest call; the median is printed too (the bench reports medians). The matmul rate
is measured before and after, to show the drift. The fractions use the bench's chunked FLOP count and
the better of the two rates (the stricter reading).

A revision that has the compiled kernel (``linattn_core/fast/_chunked.c``; in older ones ``_chunked.c`` at
the package's top) gets it built in its temporary copy, and each version says whether it runs the kernel or
the torch ops (``LINATTN_NATIVE=0`` makes both run the torch ops).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load(path: Path):
    """Import linattn_core from ``path`` as a separate module object."""
    for name in [m for m in sys.modules if m == "linattn_core" or m.startswith("linattn_core.")]:
        del sys.modules[name]
    sys.path.insert(0, str(path))
    try:
        return importlib.import_module("linattn_core")
    finally:
        sys.path.pop(0)


def checkout(rev: str, into: Path) -> Path:
    def exists(path: str) -> bool:
        return subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], cwd=ROOT).returncode == 0

    paths = ["linattn_core"] + [p for p in ("setup.py", "pyproject.toml") if exists(p)]
    archive = subprocess.run(["git", "archive", rev, *paths], cwd=ROOT, check=True,
                             capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        tarfile.open(fileobj=f).extractall(into, filter="data")
    if (into / "setup.py").exists():  # the revision has a compiled kernel: build it in the copy
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into, check=True,
                       capture_output=True)
    return into


def runs(module) -> str:
    """What runs the causal chunked form in this version of linattn_core: the compiled kernel's module is
    ``fast.kernel`` (``native`` in revisions before the tiers), or there is none."""
    native = None
    for name in ("fast.kernel", "native"):
        try:
            native = importlib.import_module(f"{module.__name__}.{name}")
            break
        except ImportError:
            continue
    if native is None or not native.available():
        return "torch ops"
    default_isa = getattr(native, "default_isa", lambda: native.isas()[0])  # older revisions lack it
    return f"kernel ({default_isa()})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="git revision to compare the working tree with")
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--noncausal", action="store_true", help="time the non-causal form instead")
    args = parser.parse_args()

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        versions = {args.rev: load(checkout(args.rev, Path(tmp)))}
        forms = {args.rev: runs(versions[args.rev])}
        versions["working tree"] = load(ROOT)
        forms["working tree"] = runs(versions["working tree"])
        for name, form in forms.items():
            print(f"{name}: the causal chunked form runs as {form}")
        timing = importlib.import_module("linattn_core.tools.timing")  # the working tree's (loaded last)
        rate_before = timing.matmul_rate("cpu")
        gen = torch.Generator().manual_seed(0)
        rows = []
        for n in args.lengths:
            q, k, v = (torch.randn(1, 8, n, 64, generator=gen) for _ in range(3))
            calls = {name: functools.partial(m.linear_attention, q, k, v, "elu+1", causal=not args.noncausal,
                                             method="chunked", chunk_size=args.chunk_size)
                     for name, m in versions.items()}
            for call in calls.values():
                call()  # warm-up
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(args.reps):
                for name, call in calls.items():
                    start = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - start)
            form = ("linear", False) if args.noncausal else ("chunked", True)
            flops = timing.flops(*form[:1], n, 64, 64, causal=form[1], chunk_size=args.chunk_size,
                                 batch_heads=8)
            rows += [(n, name, min(ts), statistics.median(ts), flops / min(ts) / 1e9)
                     for name, ts in times.items()]
        rate_after = timing.matmul_rate("cpu")
    rate = max(rate_before, rate_after) / 1e9
    print(f"matmul rate: {rate_before / 1e9:.1f} GFLOP/s before, {rate_after / 1e9:.1f} after; "
          f"fractions use {rate:.1f}")
    print(f"{'N':>8s}  {'version':14s} {'best':>9s}    {'median':>9s}    best as GFLOP/s, fraction")
    for n, name, best, median, gflops in rows:
        print(f"N={n:6d}  {name:14s} {best * 1e3:9.2f} ms {median * 1e3:9.2f} ms  {gflops:6.1f} GFLOP/s  "
              f"{gflops / rate:6.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
