"""Exercises of feature_maps.md and feature_maps_random.md: elu_plus_one, performer_features.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _exercises import SOL, diagnosed
from _tolerances import assert_close

from linattn_core import (
    get_feature_map,
)
from linattn_core.tools import exercises


def elu_where(x):
    return np.where(x > 0, x + 1, np.exp(x))

def elu_plain(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))

def elu_relu(x):
    return np.maximum(x, 0) + 1

def elu_inplace(x):
    neg = x <= 0
    x[neg] = np.exp(x[neg])
    x[~neg] += 1
    return x

def pf_no_scale(x, W):
    return np.exp(x @ W.T - 0.5 * (x * x).sum(-1, keepdims=True)) / np.sqrt(W.shape[0])

def pf_no_m(x, W):
    xs = x * W.shape[1] ** -0.25
    return np.exp(xs @ W.T - 0.5 * (xs * xs).sum(-1, keepdims=True))

def pf_no_norm(x, W):
    xs = x * W.shape[1] ** -0.25
    return np.exp(xs @ W.T) / np.sqrt(W.shape[0])

def pf_stabilised(x, W):
    xs = x * W.shape[1] ** -0.25
    u = xs @ W.T - 0.5 * (xs * xs).sum(-1, keepdims=True)
    return np.exp(u - u.max(-1, keepdims=True)) / np.sqrt(W.shape[0])

def pf_untransposed(x, W):
    xs = x * W.shape[1] ** -0.25
    return np.exp(xs @ W - 0.5 * (xs * xs).sum(-1, keepdims=True)) / np.sqrt(W.shape[0])

def pf_fixed_d(x, W):
    xs = x * 4 ** -0.25
    return np.exp(xs @ W.T - 0.5 * (xs * xs).sum(-1, keepdims=True)) / np.sqrt(W.shape[0])

@pytest.mark.parametrize(("d", "m"), [(4, 6), (8, 3), (4, 16), (3, 5)])
def test_performer_reference_matches_library(d, m):
    fm = get_feature_map("performer", d=d, num_features=m, seed=3, stabilize=False)
    x = np.random.default_rng(0).standard_normal((2, 7, d))
    ref = exercises.feature_maps.ref_performer_features
    assert_close(ref(x, fm.projection), fm(x), what="performer")
    assert_close(SOL["performer_features"](x, fm.projection), fm(x), what="solution")


WRONG = [
    ("elu_plus_one", elu_where, "evaluates BOTH branches"),
    ("elu_plus_one", elu_plain, "that is elu(x), without the + 1"),
    ("elu_plus_one", elu_relu, "that is relu(x) + 1"),
    ("elu_plus_one", elu_inplace, "changed its input `x` in place"),
    ("performer_features", pf_no_scale, "forgot to scale x by d^(-1/4)"),
    ("performer_features", pf_no_m, "forgot the 1/sqrt(m) factor"),
    ("performer_features", pf_no_norm, "left out the -|x'|^2 / 2 term"),
    ("performer_features", pf_stabilised, "you stabilised"),
    ("performer_features", pf_untransposed, "projection.T"),
    ("performer_features", pf_fixed_d, "fixed 4^(-1/4)"),
]


@pytest.mark.parametrize(("name", "fn", "message"), WRONG,
                         ids=[f"{n}-{f.__name__}-{i}" for i, (n, f, _) in enumerate(WRONG)])
def test_typical_mistake_is_diagnosed(name, fn, message, capsys):
    diagnosed(name, fn, message, capsys)
