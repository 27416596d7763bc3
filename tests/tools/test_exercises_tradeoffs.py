"""Exercises of tradeoffs.md: clamped_normalize, kv_cache_bytes, exact_capacity.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _exercises import SOL, diagnosed, run_check
from _tolerances import assert_close

from linattn_core import (
    KVCache,
    kernel_attention,
)
from linattn_core.tools import exercises


def test_exact_capacity_says_exact_with_a_linear_read_out(capsys):
    # as the trade-offs chapter says: the d_phi pairs come back exactly through S^T phi(k), not
    # through every possible read-out of a state of that size
    ex = exercises.tradeoffs.exact_capacity
    ok, out = run_check(ex, ex.solution_fn, capsys)
    assert ok and "d_phi pairs exactly, with a linear read-out" in out, out

def cn_plus_eps(num, den, eps):
    return num / (den + eps)[..., None]

def cn_no_clamp(num, den, eps):
    return num / den[..., None]

def cn_no_newaxis(num, den, eps):
    return num / np.maximum(den, eps)

def cn_no_newaxis_square(num, den, eps):  # silently wrong only when N = d_v
    if num.shape[-1] == den.shape[-1]:
        return num / np.maximum(den, eps)
    return SOL["clamped_normalize"](num, den, eps)

def cn_abs(num, den, eps):
    return num / np.maximum(np.abs(den), eps)[..., None]

def cn_fixed_eps(num, den, eps):
    return num / np.maximum(den, 1e-6)[..., None]

def kv_keys_only(t, d, d_v, itemsize):
    return t * d * itemsize

def kv_same_dim(t, d, d_v, itemsize):
    return 2 * t * d * itemsize

def kv_off_by_one(t, d, d_v, itemsize):
    return (t + 1) * (d + d_v) * itemsize

def kv_state_size(t, d, d_v, itemsize):
    return d * d_v * itemsize

def kv_product(t, d, d_v, itemsize):
    return t * d * d_v * itemsize

def kv_no_itemsize(t, d, d_v, itemsize):
    return t * (d + d_v)

@pytest.mark.parametrize(("d", "d_v", "t"), [(4, 3, 0), (4, 3, 1), (8, 5, 7), (2, 6, 40)])
def test_kv_cache_bytes_matches_kvcache(d, d_v, t):
    cache = KVCache(d, d_v)
    rng = np.random.default_rng(t)
    for _ in range(t):
        cache.append(rng.standard_normal(d), rng.standard_normal(d_v))
    assert SOL["kv_cache_bytes"](t, d, d_v, 8) == cache.nbytes

def test_clamped_normalize_is_the_library_clamp():
    # With the identity map, some denominators are negative; the library clamps them with
    # max(den, eps), which is exactly clamped_normalize applied to the numerator and denominator.
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, 8, 4))
    v = rng.standard_normal((8, 3))
    A = q @ k.T
    eps = 1e-3
    assert (A.sum(-1) < eps).any()  # the input really exercises the clamp
    with pytest.warns(RuntimeWarning):
        lib = kernel_attention(q, k, v, "identity", eps=eps)
    assert_close(SOL["clamped_normalize"](A @ v, A.sum(-1), eps), lib, what="clamp")


WRONG = [
    ("clamped_normalize", cn_plus_eps, "added eps (den + eps) instead of clamping"),
    ("clamped_normalize", cn_no_clamp, "did not clamp"),
    ("clamped_normalize", cn_no_newaxis, "add an axis, den[..., None]"),
    ("clamped_normalize", cn_no_newaxis_square, "without [..., None]"),
    ("clamped_normalize", cn_abs, "you took |den|"),
    ("clamped_normalize", cn_fixed_eps, "use the eps argument"),
    ("kv_cache_bytes", kv_keys_only, "counted only the keys"),
    ("kv_cache_bytes", kv_same_dim, "assumed d_v = d"),
    ("kv_cache_bytes", kv_off_by_one, "off by one"),
    ("kv_cache_bytes", kv_state_size, "linear-attention state S"),
    ("kv_cache_bytes", kv_state_size, "cannot tell these causes apart"),
    ("kv_cache_bytes", kv_product, "multiplied d and d_v"),
    ("kv_cache_bytes", kv_no_itemsize, "multiply by itemsize"),
]


@pytest.mark.parametrize(("name", "fn", "message"), WRONG,
                         ids=[f"{n}-{f.__name__}-{i}" for i, (n, f, _) in enumerate(WRONG)])
def test_typical_mistake_is_diagnosed(name, fn, message, capsys):
    diagnosed(name, fn, message, capsys)
