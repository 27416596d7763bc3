"""Grading: practice or graded work (the mode), and the points an exercise gives by group of inputs.

**The mode.** Practice (formative, the default) has every hint and ``solution()``. Graded work
(:func:`summative`) switches ``solution()``, ``Exercise.solution_source()``, the answer keys and the
rubrics' model answers off, limits ``hint(n)``, and makes ``check()`` refuse the kit's own
solutions as well as the library. It is *locked*: once a kernel is summative, :func:`formative`
refuses to switch back, :func:`practice_mode` (the teacher's tools) no longer switches either, and a
later :func:`summative` can lower the number of hints, never raise it. The released notebooks of
``scripts/make_assignments.py --summative`` call it in their locked set-up cell, and every graded
cell calls it again just before its ``check()``, so a learner cell that reaches into this module and
clears the flag is undone before the grade is taken (nbgrader restores locked cells before it
grades).

**Points.** An exercise is worth :data:`POINTS_PER_STAR` points per star, split over the groups of
its inputs (:data:`GROUPS`): the plain values, batch dimensions, the edge cases, and where the
exercise measures it, memory. Each group but the plain values is worth one point per star, the plain
values the rest, so an answer right on its values and wrong on memory gets part of the points, and
the points of every chapter add up to the course's total by difficulty. ``check(fn, part=group)``
runs one group; the graded cells of an assignment are one per group.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .inputs import Case

__all__ = ["GROUPS", "GROUP_TITLES", "POINTS_PER_STAR", "formative", "group_of", "groups",
           "is_summative", "max_hints", "points", "practice_mode", "summative"]


# -- the mode ---------------------------------------------------------------------------------------
@dataclass
class _Mode:
    summative: bool = False
    max_hints: int | None = None  # None: every hint
    locked: bool = False  # set by summative(): formative() and practice_mode() no longer switch


_MODE = _Mode()

LOCKED = ("This notebook is graded work: summative mode stays on for the rest of this session "
          "(formative() does nothing here). check() still says what is wrong with each input.")


def summative(max_hints: int = 0) -> None:
    """Graded work, locked for the session: ``solution()`` is off, ``hint(n)`` answers ``n <= max_hints``.

    ``check()`` refuses an answer that calls the library's attention code in both modes; in this one
    it also refuses an answer that calls the kit's own solutions or references. Called again (as
    every graded cell does), it re-asserts the mode; ``max_hints`` can then only go down.
    """
    if not isinstance(max_hints, (int, np.integer)) or isinstance(max_hints, bool) or max_hints < 0:
        raise ValueError(f"max_hints must be an int >= 0 (0: no hints), got {max_hints!r}")
    hints = int(max_hints)
    if _MODE.locked and _MODE.max_hints is not None:
        hints = min(hints, _MODE.max_hints)
    _MODE.summative, _MODE.max_hints, _MODE.locked = True, hints, True


def formative() -> bool:
    """Practice (the default): every hint and ``solution()``; refused, with a message, once summative.

    Returns whether the mode is now practice.
    """
    if _MODE.locked:
        print(LOCKED)
        return False
    _MODE.summative, _MODE.max_hints = False, None
    return True


def is_summative() -> bool:
    """Whether this session is graded work (:func:`summative` was called)."""
    return _MODE.summative or _MODE.locked


def max_hints() -> int | None:
    """How many hints per exercise this session allows (None: all of them)."""
    return _MODE.max_hints


@contextlib.contextmanager
def practice_mode() -> Iterator[bool]:
    """Practice inside the block, the previous mode after it (the teacher's tools).

    In a summative session it switches nothing: the block runs graded, and yields False, so that
    what the tools would reveal (answer keys, model answers) stays hidden.
    """
    if _MODE.locked:
        yield False
        return
    saved = (_MODE.summative, _MODE.max_hints)
    _MODE.summative, _MODE.max_hints = False, None
    try:
        yield True
    finally:
        _MODE.summative, _MODE.max_hints = saved


def _unlock_for_tests() -> None:
    """Back to practice, lock included: for the test suite, which runs graded and practice checks
    in one process (no released notebook calls it)."""
    _MODE.summative, _MODE.max_hints, _MODE.locked = False, None, False


# -- groups of inputs and their points ---------------------------------------------------------------
GROUPS = ("values", "batch", "edge", "memory")
GROUP_TITLES = {
    "values": "the plain inputs",
    "batch": "batch dimensions",
    "edge": "the edge cases (one token, zero, tiny and negative denominators, large values, exact "
            "counts)",
    "memory": "memory (nothing N x N on a long input)",
}
POINTS_PER_STAR = 4

# words of a case's title that make it an edge case
_EDGE_WORDS = ("one token", "n = 1)", "denominator", "eps", "large", "2**", "empty", "0-d",
               "one value", "one-dimensional", "d_phi = 1,", "one layer, one head", "c = 1 ",
               "one chunk", "beta = 1", "beta in (1, 2)", "more tokens than dimensions",
               "first token")


def group_of(case: Case, index: int = 1) -> str:
    """The group of one input: its own ``group`` if it names one, else read from what it is.

    The first input of an exercise (``index`` 0) is always a plain one.
    """
    if getattr(case, "group", None):
        return case.group
    if index == 0:
        return "values"
    if case.batched:
        return "batch"
    title = case.title.lower()
    if case.large or any(word in title for word in _EDGE_WORDS):
        return "edge"
    return "values"


def groups(cases: Iterable[Case], memory: bool) -> list[str]:
    """The groups a set of inputs falls in (``memory``: the exercise also checks memory), in the order
    of :data:`GROUPS`."""
    found = {group_of(case, i) for i, case in enumerate(cases)}
    if memory:
        found.add("memory")
    return [g for g in GROUPS if g in found]


def points(present: list[str], difficulty: int) -> dict[str, int]:
    """The points of each group present: one per star for each group but the plain values, which get
    the rest."""
    out = {g: difficulty for g in present}
    out["values"] = POINTS_PER_STAR * difficulty - (len(present) - 1) * difficulty
    return out
