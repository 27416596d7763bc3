"""linattn_core.lm.compare: seeds, spreads and the tie rule the training chapter reads its runs with."""

from __future__ import annotations

import pytest
from _tolerances import assert_close

from linattn_core.lm.compare import Seeds, contrast, seeds_of


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


def test_ranges_apart_are_separated_and_the_lower_is_named():
    a, b = Seeds("a", (1.0, 1.1, 1.2)), Seeds("b", (1.3, 1.4, 1.5))
    c = contrast(a, b)
    assert c.separated and c.verdict == "a lower" and contrast(b, a).verdict == "a lower"
    assert_close(c.gap, -0.3, dtype="float64")
    assert_close(c.per_seed, (-0.3, -0.3, -0.3), dtype="float64")


@pytest.mark.parametrize("b_values", [(1.2, 1.4, 1.5), (1.15, 1.16, 1.17), (1.2, 1.3, 1.25)])
def test_overlapping_ranges_are_a_tie_whatever_the_means(b_values):
    # touching (1.2 in both), nested and interleaved ranges: the runs do not tell the layers apart
    a = Seeds("a", (1.0, 1.1, 1.2))
    assert not contrast(a, Seeds("b", b_values)).separated
    assert contrast(a, Seeds("b", b_values)).verdict == "tie"


def test_per_seed_gaps_need_the_same_seeds():
    with pytest.raises(ValueError, match="per-seed gaps need the same seeds"):
        _ = contrast(Seeds("a", (1.0, 1.1)), Seeds("b", (1.0, 1.1, 1.2))).per_seed
