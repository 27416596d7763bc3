"""The training chapter's exercises: their references are the library's step and the formula.

Every exercise's solution and registered mistakes are checked once, for all chapters, in test_exercises.py.
"""

from __future__ import annotations

from _tolerances import assert_close

from linattn_core.tools.exercises import training


def test_decay_step_reference_is_the_librarys_recurrence():
    """The exercise's reference is decayed_linear_attention's recurrence (elu+1 features, z, scalar decay)."""
    import numpy as np

    from linattn_core import get_feature_map
    from linattn_core.decay import decayed_linear_attention

    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 6, 4))
    phi = training.elu_phi()
    S, z = np.zeros((4, 4)), np.zeros(4)
    ys = []
    for t in range(6):
        S, z, y = training._ref_decay_step(S, z, q[t], k[t], v[t], 0.8, phi)
        ys.append(y)
    expected = decayed_linear_attention(q, k, v, get_feature_map("elu+1"), decay=0.8, method="recurrent")
    assert_close(np.stack(ys), expected)


def test_state_bytes_reference_matches_the_formula_for_every_itemsize():
    for itemsize in (2, 4, 8):
        assert training._ref_model_state_bytes(3, 2, 5, 7, itemsize) == 3 * 2 * 5 * 8 * itemsize
