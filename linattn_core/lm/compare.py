"""Reading a trained comparison: each layer's seeds, and a contrast as a paired difference with its interval.

Runs of the same seed share their data (the same batches in the same order, the same validation
windows), so two layers are compared seed by seed: ``d_s = a_s - b_s``. A contrast reports the mean
of the ``d_s``, its standard error over the seeds and Student's t interval (95% by default, ``n - 1``
degrees of freedom). The verdict follows the interval alone:

- ``"A lower"`` / ``"B lower"`` when the interval lies below / above zero;
- ``"tie"`` when it contains zero: these seeds do not tell the two apart at this budget.

With three seeds the interval is wide (t = 4.30 for two degrees of freedom): a tie is the honest
reading of most small gaps, and five seeds (t = 2.78) are what a gap of a few hundredths needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Contrast", "Seeds", "contrast", "seeds_of", "t_quantile"]


@dataclass(frozen=True)
class Seeds:
    """One layer's final values over its seeds (e.g. validation loss in nats per character)."""

    kind: str
    values: tuple[float, ...]  # in seed order
    seeds: tuple[int, ...] = ()  # the seeds, in that order (empty: 0, 1, 2, ...)

    def __post_init__(self) -> None:
        if not self.seeds:
            object.__setattr__(self, "seeds", tuple(range(len(self.values))))
        if len(self.seeds) != len(self.values):
            raise ValueError(f"{self.kind}: {len(self.values)} values for {len(self.seeds)} seeds")
        if not all(math.isfinite(v) for v in self.values):
            raise ValueError(f"{self.kind}: every value must be finite, got {self.values}")

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
    missing = [r["config"]["seed"] for r in ordered if r.get(key) is None]
    if missing:
        raise ValueError(f"{kind}: the runs of seeds {missing} have no {key} (diverged or unfinished)")
    return Seeds(kind, tuple(float(r[key]) for r in ordered), tuple(seeds))


def t_quantile(p: float, df: int) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (``0.5 < p < 1``), by bisection
    on its distribution function (the regularized incomplete beta below)."""
    if not 0.5 < p < 1:
        raise ValueError(f"p must lie in (0.5, 1), got {p!r}")
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be a positive int, got {df!r}")
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return 0.5 * (lo + hi)


def _t_cdf(t: float, df: int) -> float:
    """P(T <= t) for t >= 0: ``1 - I_x(df/2, 1/2) / 2`` with ``x = df / (df + t^2)``."""
    return 1.0 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta ``I_x(a, b)``: its continued fraction (modified Lentz), on the side
    where it converges fast."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
                     + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2:
            num = -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1))
        else:
            num = (m * (b - m) * x) / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return front * (f - 1.0)


@dataclass(frozen=True)
class Contrast:
    """``a`` against ``b`` as a paired difference over their common seeds: ``d_s = a_s - b_s``.

    ``mean`` and ``interval`` (Student's t at ``level``) of the ``d_s``; negative: ``a`` is lower.
    """

    a: Seeds
    b: Seeds
    level: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.level < 1:
            raise ValueError(f"level must lie in (0, 1), got {self.level!r}")
        if self.a.seeds != self.b.seeds:
            raise ValueError(f"{self.a.kind} and {self.b.kind} ran other seeds ({list(self.a.seeds)} and"
                             f" {list(self.b.seeds)}): a paired difference needs the same seeds")

    @property
    def per_seed(self) -> tuple[float, ...]:
        """``a - b`` seed by seed (runs of one seed share their data)."""
        return tuple(x - y for x, y in zip(self.a.values, self.b.values, strict=True))

    @property
    def n(self) -> int:
        return len(self.per_seed)

    @property
    def mean(self) -> float:
        """The mean paired difference ``a - b``."""
        return float(np.mean(self.per_seed))

    gap = mean  # the name the chapter's tables use

    @property
    def sem(self) -> float:
        """The standard error of the mean difference (sample standard deviation / sqrt(n))."""
        return float(np.std(self.per_seed, ddof=1) / math.sqrt(self.n))

    @property
    def interval(self) -> tuple[float, float]:
        """Student's t interval of the mean difference at ``level``, ``n - 1`` degrees of freedom."""
        half = t_quantile(0.5 + self.level / 2, self.n - 1) * self.sem
        return self.mean - half, self.mean + half

    @property
    def verdict(self) -> str:
        """``"<a> lower"`` or ``"<b> lower"`` when the interval excludes zero, else ``"tie"``."""
        low, high = self.interval
        if high < 0:
            return f"{self.a.kind} lower"
        if low > 0:
            return f"{self.b.kind} lower"
        return "tie"


def contrast(a: Seeds, b: Seeds, level: float = 0.95) -> Contrast:
    """``a`` against ``b``, paired by seed (see :class:`Contrast`)."""
    return Contrast(a, b, level)
