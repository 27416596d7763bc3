"""Every test of the book's assignments starts and ends in practice mode: graded mode is locked for a
session (a learner cannot switch it off), so the suite, which runs graded and practice notebooks in
one process, unlocks it around each test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _practice_mode_around_each_test():
    from linattn_core.tools.exercises import grading

    grading._unlock_for_tests()
    yield
    grading._unlock_for_tests()
