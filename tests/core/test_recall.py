"""The associative-recall experiment of the trade-offs and beyond chapters."""

from __future__ import annotations

import numpy as np
import pytest
from _tolerances import assert_close, tolerance

from linattn_core.recall import RULES, make_task, recall_answers, recall_error, recall_errors


def test_softmax_recalls_everything_and_the_best_state_is_exact_up_to_d():
    d = 16
    for n in (4, 16, 64):
        assert recall_error(make_task(n, d, seed=n), "softmax") < 1e-6
    # exact in exact arithmetic; the error 1 - cos^2 is of order one, so the float64 tolerance is an
    # absolute bound that any summation order meets (rounding leaves ~1e-16, a wrong state > 0.1)
    assert recall_error(make_task(d, d, seed=1), "best") < tolerance("float64")[1]
    assert recall_error(make_task(2 * d, d, seed=1), "best") > 0.1


def test_linear_attention_error_grows_with_n_over_d():
    d = 16
    def mean_error(n):
        return np.mean([recall_error(make_task(n, d, seed=s), "linear") for s in range(4)])

    errors = [mean_error(n) for n in (4, 16, 64)]
    assert errors[0] < errors[1] < errors[2]


def test_linear_rule_reads_the_sum_of_outer_products():
    task = make_task(10, 6, seed=3)
    S = task.keys.T @ task.values
    assert_close(recall_answers(task, "linear"), task.keys @ S, what="linear rule vs K S")


def test_delta_rule_with_replays_converges_to_exact_recall_below_capacity():
    task = make_task(12, 32, seed=4)
    one, many = recall_error(task, "delta"), recall_error(task, "delta", passes=30)
    assert many < 1e-6 < one


def test_decay_and_delta_remember_the_most_recent_pairs_best():
    task = make_task(64, 16, seed=5)
    for rule in ("decay", "delta"):
        e = recall_errors(recall_answers(task, rule, gamma=0.8), task.values)
        assert e[-4:].mean() < e[:4].mean(), rule


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: recall_error(make_task(4, 4), "lstm"), "rule must be one of"),
        (lambda: recall_error(make_task(4, 4), "delta", passes=0), "passes must be a positive integer"),
        (lambda: make_task(0, 4), "n must be a positive integer"),
        (lambda: make_task(4, 2.5), "d must be a positive integer"),
    ],
)
def test_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_rules_listed():
    assert set(RULES) == {"softmax", "linear", "decay", "delta", "best"}
