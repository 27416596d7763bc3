"""What the benchmark reports at its end: targets with a measured value and a verdict (never tested).

A verdict is withheld when a measurement it rests on is noise: where the interquartile range of the
repeats exceeds their median (:func:`noisy`), the target prints its value with
``noisy: IQR > median, no verdict`` instead of PASS or FAIL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import timing as T

__all__ = ["NOISY", "Target", "find", "format_targets", "judged", "noisy", "ratio_target", "seconds"]

NOISY = "noisy: IQR > median, no verdict"


@dataclass(frozen=True)
class Target:
    """One reported target: what it asks, the measured value, and PASS / FAIL / N/A."""

    name: str
    wanted: str
    value: float | None
    passed: bool | None
    note: str = ""
    noisy: bool = False  # a measurement behind it spread wider than its median: no verdict

    @property
    def verdict(self) -> str:
        if self.noisy:
            return "NOISY"
        return "N/A" if self.passed is None else ("PASS" if self.passed else "FAIL")


def noisy(*records: T.Record | None) -> bool:
    """True when any measured record's repeats spread wider than their median (IQR > median)."""
    return any(r is not None and r.measured and r.repeats > 1 and r.q75_s - r.q25_s > r.median_s
               for r in records)


def judged(target: Target, *records: T.Record | None) -> Target:
    """``target``, its verdict withheld (and the note saying so) when a record behind it is noise."""
    if not noisy(*records) or target.value is None:
        return target
    note = NOISY + (f"; {target.note}" if target.note else "")
    return Target(target.name, target.wanted, target.value, None, note, noisy=True)


def find(records: Sequence[T.Record], method: str, causal: bool, N: int) -> T.Record | None:
    for r in records:
        if r.method == method and r.causal == causal and r.N == N:
            return r
    return None


def seconds(r: T.Record | None) -> tuple[float | None, str]:
    """Seconds per call of a record, measured or else predicted by the time guard, with a note."""
    if r is None:
        return None, "not run"
    if r.measured:
        return r.median_s, ""
    if r.predicted_s is not None:
        return r.predicted_s, (f"{r.label} not measured: {r.predicted_s:.2g} s per call extrapolated from a "
                               "shorter length")
    return None, f"{r.label} skipped: {r.skipped}"


def ratio_target(records: Sequence[T.Record], name: str, slow: tuple[str, bool], fast: tuple[str, bool],
                  N: int, at_least: float) -> Target:
    t_slow, note_slow = seconds(find(records, *slow, N))
    r_fast = find(records, *fast, N)
    wanted = f">= {at_least:g}x"
    if r_fast is None or not r_fast.measured or t_slow is None:
        why = note_slow or (f"{fast[0]} skipped: {r_fast.skipped}" if r_fast else f"N={N} not run")
        return Target(name, wanted, None, None, why)
    ratio = t_slow / r_fast.median_s
    return judged(Target(name, wanted, ratio, ratio >= at_least, note_slow), find(records, *slow, N), r_fast)


def format_targets(targets: Sequence[Target]) -> str:
    lines = []
    for t in targets:
        value = "-" if t.value is None else (f"{t.value:.1%}" if "matmul" in t.name else f"{t.value:.3g}x")
        note = f"  ({t.note})" if t.note else ""
        tag = "noisy" if t.noisy else t.verdict
        lines.append(f"[{tag:<4}] {t.name}: {value} (target {t.wanted}){note}")
    return "\n".join(lines)
