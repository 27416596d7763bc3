"""linattn_core.lm.compare: seeds, and contrasts as paired differences with Student's t interval."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close

from linattn_core.lm.compare import Seeds, contrast, seeds_of, t_quantile


def runs(values, seeds=None):
    seeds = range(len(values)) if seeds is None else seeds
    return [{"config": {"seed": s}, "final_val_loss": v} for s, v in zip(seeds, values, strict=True)]


def test_seeds_are_read_in_seed_order_with_mean_and_spread():
    s = seeds_of("x", runs([1.5, 1.2, 1.4], seeds=[2, 0, 1]))
    assert s.values == (1.2, 1.4, 1.5)
    assert_close(s.mean, 4.1 / 3, dtype="float64")
    assert (s.low, s.high) == (1.2, 1.5)
    assert_close(s.spread, 0.3, dtype="float64")


def test_seeds_read_another_key():
    r = [{"config": {"seed": 0}, "final_accuracy": 0.5}, {"config": {"seed": 1}, "final_accuracy": 0.7}]
    assert seeds_of("x", r, key="final_accuracy").values == (0.5, 0.7)


@pytest.mark.parametrize("bad, match", [(runs([1.0]), "at least two seeds"),
                                        (runs([1.0, 2.0], seeds=[0, 0]), "repeat a seed")])
def test_seeds_refuse_what_gives_no_spread(bad, match):
    with pytest.raises(ValueError, match=match):
        seeds_of("x", bad)


def test_seeds_keep_their_numbers_and_refuse_a_missing_value():
    s = seeds_of("x", runs([1.5, 1.2], seeds=[4, 3]))
    assert s.seeds == (3, 4) and s.values == (1.2, 1.5)
    with pytest.raises(ValueError, match=r"seeds \[1\] have no final_val_loss"):
        seeds_of("x", runs([1.0, None]))
    with pytest.raises(ValueError, match="finite"):
        Seeds("x", (1.0, float("nan")))
    with pytest.raises(ValueError, match="3 values for 2 seeds"):
        Seeds("x", (1.0, 1.1, 1.2), (0, 1))


@pytest.mark.parametrize("p, df, expected", [(0.975, 1, 12.706204736174698), (0.975, 2, 4.302652729911275),
                                             (0.975, 4, 2.7764451051977987), (0.95, 3, 2.3533634348018264),
                                             (0.975, 30, 2.0422724563012373), (0.995, 9, 3.24983554401537)])
def test_t_quantiles_match_the_tables(p, df, expected):
    assert abs(t_quantile(p, df) - expected) < 1e-8 * expected


@pytest.mark.parametrize("p, df", [(0.5, 2), (1.0, 2), (0.9, 0), (0.9, 1.5), (0.9, True)])
def test_t_quantile_refuses_what_it_cannot_answer(p, df):
    with pytest.raises(ValueError):
        t_quantile(p, df)


def test_a_paired_difference_and_its_interval():
    a, b = Seeds("a", (1.0, 1.1, 1.2)), Seeds("b", (1.3, 1.35, 1.5))
    c = contrast(a, b)
    d = np.array([-0.3, -0.25, -0.3])
    assert_close(c.per_seed, tuple(d), dtype="float64")
    assert_close(c.mean, d.mean(), dtype="float64")
    assert_close(c.sem, d.std(ddof=1) / np.sqrt(3), dtype="float64")
    low, high = c.interval
    assert_close(high - c.mean, 4.302652729911275 * c.sem, dtype="float64")
    assert_close(c.mean - low, 4.302652729911275 * c.sem, dtype="float64")
    assert high < 0 and c.verdict == "a lower" and contrast(b, a).verdict == "a lower"


def test_the_verdict_reads_the_interval_not_the_ranges():
    # ranges overlap, yet b is above a by 0.1 in every seed: the paired interval excludes zero
    a, b = Seeds("a", (1.0, 1.2, 1.4)), Seeds("b", (1.1, 1.3, 1.5 + 1e-3))
    assert contrast(a, b).verdict == "a lower"
    # a mean gap of 0.28 whose per-seed gaps disagree in sign: a tie
    a, b = Seeds("a", (1.0, 1.0, 1.0)), Seeds("b", (1.3, 0.8, 1.05))
    low, high = contrast(a, b).interval
    assert low < 0 < high and contrast(a, b).verdict == "tie"


def test_level_widens_the_interval():
    a, b = Seeds("a", (1.0, 1.1, 1.2, 1.0)), Seeds("b", (1.2, 1.2, 1.3, 1.3))
    w90 = np.diff(contrast(a, b, 0.90).interval)[0]
    w99 = np.diff(contrast(a, b, 0.99).interval)[0]
    assert w99 > w90 > 0
    with pytest.raises(ValueError, match="level"):
        contrast(a, b, 1.0)


def test_a_paired_difference_needs_the_same_seeds():
    with pytest.raises(ValueError, match="same seeds"):
        contrast(Seeds("a", (1.0, 1.1)), Seeds("b", (1.0, 1.1, 1.2)))
    with pytest.raises(ValueError, match="same seeds"):
        contrast(Seeds("a", (1.0, 1.1), (0, 1)), Seeds("b", (1.0, 1.1), (0, 2)))
