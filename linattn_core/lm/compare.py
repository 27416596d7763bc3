"""Reading a trained comparison: each layer's seeds, their spread, and when a gap is a tie.

With three seeds per layer a mean alone says little: two layers whose seeds overlap are not told
apart by these runs, however their means fall. The rule the training chapter uses is the plainest
one that three seeds support:

- a layer's *spread* is the range of its seeds' final losses, ``max - min``;
- two layers are *separated* when their seed ranges do not overlap (every seed of one ends below
  every seed of the other); otherwise the comparison is a *tie* at this budget.

Runs of the same seed share their data (the same batches in the same order, the same validation
windows), so the per-seed differences are also given: they show whether one layer is ahead in
every seed, even when the ranges overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Contrast", "Seeds", "contrast", "seeds_of"]


@dataclass(frozen=True)
class Seeds:
    """One layer's final values over its seeds (e.g. validation loss in nats per character)."""

    kind: str
    values: tuple[float, ...]  # in seed order

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def low(self) -> float:
        return float(min(self.values))

    @property
    def high(self) -> float:
        return float(max(self.values))

    @property
    def spread(self) -> float:
        """``max - min`` over the seeds."""
        return self.high - self.low


def seeds_of(kind: str, runs: Sequence[Mapping], key: str = "final_val_loss") -> Seeds:
    """The ``key`` of each run (one per seed, in seed order) as :class:`Seeds`."""
    if len(runs) < 2:
        raise ValueError(f"{kind}: a spread needs at least two seeds, got {len(runs)} run(s)")
    ordered = sorted(runs, key=lambda r: r["config"]["seed"])
    seeds = [r["config"]["seed"] for r in ordered]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{kind}: the runs repeat a seed: {seeds}")
    return Seeds(kind, tuple(float(r[key]) for r in ordered))


@dataclass(frozen=True)
class Contrast:
    """``a`` against ``b``: the gap of the means (``a - b``), the per-seed gaps, and the verdict."""

    a: Seeds
    b: Seeds

    @property
    def gap(self) -> float:
        """Mean of ``a`` minus mean of ``b`` (negative: ``a`` is lower)."""
        return self.a.mean - self.b.mean

    @property
    def per_seed(self) -> tuple[float, ...]:
        """``a - b`` seed by seed (runs of one seed share their data)."""
        if len(self.a.values) != len(self.b.values):
            raise ValueError(f"{self.a.kind} and {self.b.kind} have {len(self.a.values)} and"
                             f" {len(self.b.values)} seeds: per-seed gaps need the same seeds")
        return tuple(x - y for x, y in zip(self.a.values, self.b.values, strict=True))

    @property
    def separated(self) -> bool:
        """True when the seed ranges do not overlap."""
        return self.a.high < self.b.low or self.b.high < self.a.low

    @property
    def verdict(self) -> str:
        """``"a lower"``, ``"b lower"`` (ranges apart) or ``"tie"`` (ranges overlap), with the names."""
        if not self.separated:
            return "tie"
        return f"{self.a.kind} lower" if self.gap < 0 else f"{self.b.kind} lower"


def contrast(a: Seeds, b: Seeds) -> Contrast:
    """``a`` against ``b`` (see :class:`Contrast`)."""
    return Contrast(a, b)
