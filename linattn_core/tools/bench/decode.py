"""The benchmark's decoding part: one generated token with a KV cache against a fixed-size state.

Methods ``decode_kvcache`` and ``decode_state`` (:mod:`linattn_core.tools.timing.decode`, the library's
:class:`~linattn_core.KVCache` and :class:`~linattn_core.LinearAttentionState`), with the context
length as ``N``, ``median_s`` the median time of one decoding step and ``q25_s``, ``q75_s`` its
quartiles, for ``batch`` sequences of ``batch_heads`` heads of width ``d = d_v``. The contexts take
turns step by step (``decode_times``), so no context is favoured by when it ran. The targets, reported
like the others: at context 16k the state's step is at least 10x faster than the cache's, and its
median time per token varies by at most 1.5x over the contexts from 1k to 64k (a state does not grow;
a cache is read whole for every token); the note gives the quartiles, the spread of the steps.
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
    """One row per method, batch and context: ``{"method", "N", "batch", "median_s", "q25_s", "q75_s",
    "repeats", "bytes_per_sequence"}`` (the memory one sequence holds at that context); the contexts'
    steps interleaved."""
    rows = []
    for batch in batches:
        for method, which in DECODE_METHODS.items():
            for r in decode.decode_times(which, contexts, batch=batch, heads=batch_heads, d=d,
                                         repeats=repeats, device=device):
                rows.append({"method": method, "batch": batch, **r})
    return rows


def _row(rows: Sequence[dict], method: str, N: int, batch: int = 1) -> dict | None:
    for r in rows:
        if r["method"] == method and r["N"] == N and r["batch"] == batch:
            return r
    return None


def decode_targets(rows: Sequence[dict]) -> list[Target]:
    """The two decoding targets, from medians; the flatness note gives the quartiles around them."""
    out = []
    name = "decode: KV cache / state per token at N=16384 (batch 1)"
    cache, state = _row(rows, "decode_kvcache", 16384), _row(rows, "decode_state", 16384)
    if cache is None or state is None:
        out.append(Target(name, ">= 10x", None, None, "N=16384 not measured"))
    else:
        ratio = cache["median_s"] / state["median_s"]
        out.append(Target(name, ">= 10x", ratio, ratio >= 10))
    name = "decode: state per token, slowest / fastest median over N=1024..65536 (batch 1)"
    states = [r for r in rows if r["method"] == "decode_state" and r["batch"] == 1
              and 1024 <= r["N"] <= 65536]
    if {r["N"] for r in states} >= {1024, 65536}:
        slow = max(states, key=lambda r: r["median_s"])
        fast = min(states, key=lambda r: r["median_s"])
        spread = slow["median_s"] / fast["median_s"]
        note = "; ".join(f"{what} N={r['N']}: {r['median_s'] * 1e6:.1f} µs, quartiles {_quartiles(r)} µs"
                         for what, r in (("slowest", slow), ("fastest", fast)))
        out.append(Target(name, "<= 1.5x", spread, spread <= 1.5, note))
    else:
        out.append(Target(name, "<= 1.5x", None, None, "N=1024 or N=65536 not measured"))
    return out


def format_decode(rows: Sequence[dict]) -> str:
    """A table: per batch and context, both methods' median time per token with its quartiles, their
    ratio, and the memory per sequence."""
    lines = [f"{'batch':>5} {'N':>7} {'KV cache / token':>17} {'quartiles':>17} {'state / token':>14} "
             f"{'quartiles':>13} {'ratio':>7} {'KV cache / seq':>15} {'state / seq':>12}"]
    keys = sorted({(r["batch"], r["N"]) for r in rows})
    for batch, N in keys:
        cache, state = _row(rows, "decode_kvcache", N, batch), _row(rows, "decode_state", N, batch)
        if cache is None or state is None:
            continue
        lines.append(f"{batch:>5} {N:>7} {cache['median_s'] * 1e6:>14.1f} µs {_quartiles(cache):>17} "
                     f"{state['median_s'] * 1e6:>11.1f} µs {_quartiles(state):>13} "
                     f"{cache['median_s'] / state['median_s']:>6.1f}x "
                     f"{cache['bytes_per_sequence'] / 2**20:>11.2f} MiB "
                     f"{state['bytes_per_sequence'] / 2**10:>8.1f} KiB")
    return "\n".join(lines)


def _quartiles(r: dict) -> str:
    # the spread of one row's steps, in microseconds
    q25, q75 = r.get("q25_s", r["median_s"]), r.get("q75_s", r["median_s"])
    digits = 1 if q75 < 1e-3 else 0  # tenths of a microsecond only where they are a visible part
    return f"{q25 * 1e6:.{digits}f}-{q75 * 1e6:.{digits}f}"
