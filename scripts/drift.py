"""How this machine's speed drifts: the causal chunked form called back to back, with a matmul now and then.

    python scripts/drift.py                  # N = 16384 for 150 s
    python scripts/drift.py --n 4096 --seconds 60

Every ``--window`` calls it prints their median and best, and the rate of one 2048^3 product taken
right after. On a shared VM both move in phases of several seconds, together; a benchmark that takes
a few calls samples one phase, so read its fractions with this spread in mind.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--seconds", type=float, default=150.0)
    parser.add_argument("--window", type=int, default=40)
    args = parser.parse_args()

    import torch

    from linattn_core import linear_attention

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, args.n, 64, generator=gen) for _ in range(3))
    a, b = (torch.randn(2048, 2048, generator=gen) for _ in range(2))
    start = time.perf_counter()
    window: list[float] = []
    while time.perf_counter() - start < args.seconds:
        t = time.perf_counter()
        linear_attention(q, k, v, causal=True, method="chunked")
        window.append(time.perf_counter() - t)
        if len(window) == args.window:
            t = time.perf_counter()
            a @ b
            rate = 2 * 2048**3 / (time.perf_counter() - t) / 1e9
            median, best = statistics.median(window) * 1e3, min(window) * 1e3
            print(f"t={time.perf_counter() - start:5.0f} s  chunked median {median:6.1f} ms  "
                  f"best {best:6.1f} ms   2048^3 matmul {rate:5.0f} GFLOP/s", flush=True)
            window = []
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
