"""Exercises of the chapters beyond: decay_step (beyond_decay.md), delta_loop, normed_numerator.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

import numpy as np
from _exercises import ROOT, SOL, run_check
from _tolerances import assert_close

from linattn_core import get_feature_map
from linattn_core.tools import exercises


def test_delta_loop_solution_is_the_library_recurrence():
    from linattn_core.delta import delta_rule_attention

    rng = np.random.default_rng(8)
    q, k = rng.standard_normal((2, 12, 5))
    v, beta = rng.standard_normal((12, 2)), rng.uniform(0.0, 2.0, 12)
    for method in ("recurrent", "chunked"):
        assert_close(SOL["delta_loop"](q, k, v, beta),
                     delta_rule_attention(q, k, v, beta, method=method), what=method)

def ds_no_clamp(S, z, q_t, k_t, v_t, g, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new, z_new = g * S + np.outer(fk, v_t), g * z + fk
    return S_new, z_new, fq @ S_new / (fq @ z_new)

def ds_eps_added(S, z, q_t, k_t, v_t, g, phi):
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new, z_new = g * S + np.outer(fk, v_t), g * z + fk
    return S_new, z_new, fq @ S_new / (fq @ z_new + 1e-6)

def test_decay_step_without_a_clamp_fails(capsys):
    ok, out = run_check(exercises.beyond.decay_step, ds_no_clamp, capsys)
    assert not ok and "did not clamp the denominator" in out, out
    ok, out = run_check(exercises.beyond.decay_step, ds_eps_added, capsys)
    assert not ok and "Not yet" in out, out


def test_decay_step_reference_is_the_librarys_recurrence():
    """The exercise's reference is decayed_linear_attention's recurrence (elu+1 features, z, scalar decay)."""
    from linattn_core.decay import decayed_linear_attention
    from linattn_core.tools.exercises import beyond

    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 6, 4))
    phi = beyond.elu_phi()
    S, z = np.zeros((4, 4)), np.zeros(4)
    ys = []
    for t in range(6):
        S, z, y = beyond._ref_decay_step(S, z, q[t], k[t], v[t], 0.8, phi)
        ys.append(y)
    expected = decayed_linear_attention(q, k, v, get_feature_map("elu+1"), decay=0.8, method="recurrent")
    assert_close(np.stack(ys), expected)


def test_decay_step_is_asked_in_beyond_decay_only():
    ex = exercises.beyond.decay_step
    assert ex.chapter == "beyond_decay" and ex.path == "exercises.beyond.decay_step"
    assert not hasattr(exercises.training, "decay_step")
    for page in ("training", "training_compare", "training_recall"):
        assert "decay_step" not in (ROOT / "book" / f"{page}.md").read_text(encoding="utf-8"), page
