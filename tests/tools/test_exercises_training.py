"""Exercises of training.md: model_state_bytes.

Their typical wrong answers, each failing with the message that names the mistake, and their
references held to the library. What holds for every exercise (adversarial answers, the watch for
library calls, graded mode) is in test_exercises.py.
"""

from __future__ import annotations

from _exercises import BOOK, run_check

from linattn_core.tools import exercises


def test_model_state_bytes_verdicts_name_the_right_cause(capsys):
    ex = exercises.training.model_state_bytes
    ok, out = run_check(ex, lambda L, H, f, dv, i: float(L * H * f * (dv + 1) * i), capsys)
    assert not ok and "right number" in out and "but a float" in out, out
    assert "Likely cause" not in out and "cannot tell" not in out
    for fixed in (4, 8, 2):
        ok, out = run_check(ex, lambda L, H, f, dv, i, b=fixed: L * H * f * (dv + 1) * b, capsys)
        assert not ok and "fixed number of bytes per number" in out, (fixed, out)
        assert "S but not z" not in out and "cannot tell" not in out, (fixed, out)

def test_model_state_bytes_says_which_model_and_dtype():
    task = " ".join(exercises.training.model_state_bytes.task.split())
    for words in ("n_layer layers", "n_head heads", "normaliser z", "n_embd = n_head * d_v",
                  "S (d_phi x d_v) and z (d_phi)", "float32", "Count, do not allocate", "22 PiB"):
        assert words in task, words
    text = " ".join((BOOK / "training.md").read_text(encoding="utf-8").split())
    block = text.split(":label: ex-training-state-bytes", 1)[1].split("```", 1)[0]
    for words in ("n_layer", "n_head", "n_embd", "float32", "normaliser"):
        assert words in block, words


def test_state_bytes_reference_matches_the_formula_for_every_itemsize():
    from linattn_core.tools.exercises import training

    for itemsize in (2, 4, 8):
        assert training._ref_model_state_bytes(3, 2, 5, 7, itemsize) == 3 * 2 * 5 * 8 * itemsize
