"""The benchmark's decoding part: one generated token with a KV cache against a fixed-size state.

Methods ``decode_kvcache`` and ``decode_state`` (:mod:`linattn_core.tools.timing.decode`, the library's
:class:`~linattn_core.KVCache` and :class:`~linattn_core.LinearAttentionState`), with the context
length as ``N`` and ``median_s`` the time of one decoding step, for ``batch`` sequences of
``batch_heads`` heads of width ``d = d_v``. The targets, reported like the others: at context 16k
the state's step is at least 10x faster than the cache's, and its time per token varies by at most
1.5x between context 1k and 64k (a state does not grow; a cache is read whole for every token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..timing import decode
from .targets import Target

__all__ = ["DECODE_METHODS", "decode_sweep", "decode_targets", "format_decode"]

DECODE_METHODS = {"decode_kvcache": "kvcache", "decode_state": "state"}


def decode_sweep(contexts: Sequence[int], *, batches: Sequence[int] = (1, 8), batch_heads: int = 8,
                 d: int = 64, device: str = "cpu", repeats: int = 16) -> list[dict[str, Any]]:
    """One row per method, batch and context: ``{"method", "N", "batch", "median_s",
    "bytes_per_sequence"}`` (the memory one sequence holds at that context)."""
    rows = []
    for batch in batches:
        for method, which in DECODE_METHODS.items():
            for r in decode.decode_times(which, contexts, batch=batch, heads=batch_heads, d=d,
                                         repeats=repeats, device=device):
                rows.append({"method": method, "batch": batch, **r})
    return rows


def _time(rows: Sequence[dict], method: str, N: int, batch: int = 1) -> float | None:
    for r in rows:
        if r["method"] == method and r["N"] == N and r["batch"] == batch:
            return r["median_s"]
    return None


def decode_targets(rows: Sequence[dict]) -> list[Target]:
    """The two decoding targets."""
    out = []
    name = "decode: KV cache / state per token at N=16384 (batch 1)"
    cache, state = _time(rows, "decode_kvcache", 16384), _time(rows, "decode_state", 16384)
    if cache is None or state is None:
        out.append(Target(name, ">= 10x", None, None, "N=16384 not measured"))
    else:
        out.append(Target(name, ">= 10x", cache / state, cache / state >= 10))
    name = "decode: state per token, slowest / fastest of N=1024 and N=65536 (batch 1)"
    short, long = _time(rows, "decode_state", 1024), _time(rows, "decode_state", 65536)
    if short is None or long is None:
        out.append(Target(name, "<= 1.5x", None, None, "N=1024 or N=65536 not measured"))
    else:
        spread = max(short, long) / min(short, long)
        out.append(Target(name, "<= 1.5x", spread, spread <= 1.5))
    return out


def format_decode(rows: Sequence[dict]) -> str:
    """A table: per batch and context, both methods' time per token and memory per sequence."""
    lines = [f"{'batch':>5} {'N':>7} {'KV cache / token':>17} {'state / token':>14} {'ratio':>7} "
             f"{'KV cache / seq':>15} {'state / seq':>12}"]
    keys = sorted({(r["batch"], r["N"]) for r in rows})
    for batch, N in keys:
        found = {r["method"]: r for r in rows if r["batch"] == batch and r["N"] == N}
        cache, state = found.get("decode_kvcache"), found.get("decode_state")
        if cache is None or state is None:
            continue
        lines.append(f"{batch:>5} {N:>7} {cache['median_s'] * 1e6:>14.1f} µs "
                     f"{state['median_s'] * 1e6:>11.1f} µs {cache['median_s'] / state['median_s']:>6.1f}x "
                     f"{cache['bytes_per_sequence'] / 2**20:>11.2f} MiB "
                     f"{state['bytes_per_sequence'] / 2**10:>8.1f} KiB")
    return "\n".join(lines)
