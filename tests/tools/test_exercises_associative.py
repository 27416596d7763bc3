"""Exercises of associative.md: kernel_attention_mine, associative_attention, crossover_length.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _exercises import SOL, _softmax, aa_quadratic, diagnosed, run_check, sw
from _tolerances import assert_close

from linattn_core import (
    get_feature_map,
    kernel_attention,
    softmax_attention,
)
from linattn_core.tools import exercises


def ka_unnormalized(q, k, v, phi):
    return phi(q) @ sw(phi(k)) @ v

def ka_columns(q, k, v, phi):
    A = phi(q) @ sw(phi(k))
    return A / A.sum(-2, keepdims=True) @ v

def ka_no_phi(q, k, v, phi):
    A = q @ sw(k)
    return A @ v / A.sum(-1, keepdims=True)

def ka_softmax(q, k, v, phi):
    return _softmax(q @ sw(k) / np.sqrt(q.shape[-1])) @ v

def aa_unnormalized(q, k, v, phi):
    return phi(q) @ (sw(phi(k)) @ v)

def aa_raw_k(q, k, v, phi):
    fq = phi(q)
    return fq @ (sw(k) @ v) / np.maximum(fq @ k.sum(-2)[..., None], 1e-6)

def ka_no_clamp(q, k, v, phi):
    A = phi(q) @ sw(phi(k))
    return A @ v / A.sum(-1, keepdims=True)

def ka_plus_eps(q, k, v, phi):
    A = phi(q) @ sw(phi(k))
    return A @ v / (A.sum(-1, keepdims=True) + 1e-6)

def ka_no_phi_q(q, k, v, phi):
    A = q @ sw(phi(k))
    return A @ v / np.maximum(A.sum(-1), 1e-6)[..., None]

def aa_no_phi_q(q, k, v, phi):
    fk = phi(k)
    S, z = sw(fk) @ v, fk.sum(-2)
    return q @ S / np.maximum(q @ z[..., None], 1e-6)

def aa_z_wrong_axis(q, k, v, phi):
    fq, fk = phi(q), phi(k)
    z = fk.sum(axis=-1)                                   # one number per key: wrong
    return fq @ (sw(fk) @ v) / np.maximum(fq.sum(-1) * z, 1e-6)[..., None]

def aa_no_clamp(q, k, v, phi):
    fq, fk = phi(q), phi(k)
    return fq @ (sw(fk) @ v) / (fq @ fk.sum(-2)[..., None])

def test_solutions_agree_with_the_quadratic_reference():
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 2, 3, 9, 4))
    v = rng.standard_normal((2, 3, 9, 5))
    phi = get_feature_map("elu+1")
    for causal, name in [(False, "kernel_attention_mine"), (False, "associative_attention"),
                         (True, "causal_cumsum_mine")]:
        assert_close(SOL[name](q, k, v, phi), kernel_attention(q, k, v, phi, causal=causal),
                     what=name)
    assert_close(SOL["softmax_attention_mine"](q, k, v), softmax_attention(q, k, v), what="softmax")

@pytest.mark.parametrize(("d_phi", "d_v"), [(64, 64), (256, 64), (16, 128), (7, 3), (1, 1)])
def test_crossover_is_the_cost_model_crossover(d_phi, d_v):
    # the exercise's answer is the one cost model's, which the chapter quotes
    from linattn_core.tools import timing

    expected = timing.flop_crossover("kernel", "linear", d=d_phi, d_v=d_v, d_phi=d_phi)
    ex = exercises.associative.crossover
    assert_close(np.float64(ex.reference(d_phi, d_v)), np.float64(expected), what="reference")
    assert_close(np.float64(ex.solution_fn(d_phi, d_v)), np.float64(expected), what="solution")

def cl_half(d_phi, d_v):
    return d_phi * d_v / (d_phi + d_v)

def cl_floor(d_phi, d_v):
    return 2 * d_phi * d_v // (d_phi + d_v)

def cl_with_normalizer(d_phi, d_v):
    return 2 * d_phi * (d_v + 1) / (d_phi + d_v + 1)

@pytest.mark.parametrize(("fn", "message"), [(cl_half, "off by a factor 2"),
                                             (cl_floor, "integer division"),
                                             (cl_with_normalizer, "normalizer terms")])
def test_crossover_mistakes(fn, message, capsys):
    ok, out = run_check(exercises.associative.crossover, fn, capsys)
    assert not ok and message in out, out


WRONG = [
    ("kernel_attention_mine", ka_unnormalized, "forgot the normalizer"),
    ("kernel_attention_mine", ka_columns, "normalized the columns"),
    ("kernel_attention_mine", ka_no_phi, "you left out phi"),
    ("kernel_attention_mine", ka_softmax, "that is softmax attention"),
    ("kernel_attention_mine", ka_no_clamp, "did not clamp the denominator"),
    ("kernel_attention_mine", ka_plus_eps, "added eps (den + 1e-6) instead of clamping"),
    ("kernel_attention_mine", ka_no_phi_q, "did not apply phi to q"),
    ("associative_attention", aa_no_phi_q, "did not apply phi to q"),
    ("associative_attention", aa_z_wrong_axis, "z is summed over the wrong axis"),
    ("associative_attention", aa_no_clamp, "did not clamp the denominator"),
    ("associative_attention", aa_unnormalized, "forgot the normalizer"),
    ("associative_attention", aa_quadratic, "N x N matrix"),
    ("associative_attention", aa_raw_k, "applied phi to the queries only"),
]


@pytest.mark.parametrize(("name", "fn", "message"), WRONG,
                         ids=[f"{n}-{f.__name__}-{i}" for i, (n, f, _) in enumerate(WRONG)])
def test_typical_mistake_is_diagnosed(name, fn, message, capsys):
    diagnosed(name, fn, message, capsys)
