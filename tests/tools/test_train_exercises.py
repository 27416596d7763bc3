"""The training chapter's exercises: each solution passes, each typical mistake is caught and named."""

from __future__ import annotations

import pytest
from _tolerances import assert_close

from linattn_core.tools.exercises import training

EXERCISES = [training.decay_step, training.model_state_bytes]


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_solution_passes(ex, capsys):
    assert ex.check(ex.solution_fn)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_every_mistake_fails_with_its_message(ex, capsys):
    for mistake in ex.mistakes:
        assert not ex.check(mistake.fn)
        out = " ".join(capsys.readouterr().out.split())
        assert " ".join(mistake.message.split())[:40] in out, mistake.message


def test_decay_step_reference_is_the_model_step():
    """The exercise's reference decays the library state exactly as the model's decay layers do."""
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
