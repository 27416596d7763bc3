"""Feedback: what ``check()`` tells the reader when an answer is wrong, and the result it returns.

A diagnosis ("Likely cause") is given only when the input can tell it apart: when several typical
mistakes give the same numbers on a degenerate input (one token), all of them are listed, and a
mistake that gives the right answer on the input is never named. The mixin :class:`Feedback` holds
the messages of :class:`~.checker.Exercise` (an answer that raised, that called the library, that
matches a typical mistake); :mod:`.compare` says what differs.
"""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import compare, grading
from .inputs import Case

_BATCH_ADVICE = (
    "your function is right on one slice of this batch (the batch index set to 0) but not on the "
    "whole batch. On an array with batch dimensions, `x.T` reverses *all* axes: use "
    "`np.swapaxes(x, -1, -2)`, reduce over `axis=-1` / `axis=-2` (counted from the end), and index "
    "with `...` so leading dimensions pass through."
)
_STABILITY_ADVICE = (
    "not numerically stable. For scores around 1e3, `np.exp` overflows to inf and inf/inf is "
    "NaN. Subtract each row's maximum score before `exp` (softmax does not change when every "
    "score of a row moves by the same constant)."
)
_WARNING_ADVICE = (
    "np.where(cond, a, b) evaluates BOTH branches on every element, so np.exp(x) runs on "
    "large positive x too and overflows, even though that branch is thrown away. Feed exp only "
    "values it can take: np.exp(np.minimum(x, 0))."
)


def wrap(text: str, indent: str = "  ") -> str:
    """Feedback lines wrapped at 100 characters (long code lines are never broken)."""
    return "\n".join(textwrap.fill(para, width=100, initial_indent=indent, subsequent_indent=indent,
                                   break_long_words=False, break_on_hyphens=False)
                     for para in text.split("\n"))


@dataclass
class Mistake:
    """A typical wrong answer: a function computing it, and what to tell the reader if it matches."""

    fn: Callable
    message: str


@dataclass
class CheckResult:
    """What ``check()`` found: truthy when every input was right; ``feedback`` is what it printed.

    ``assert ex.check(fn)`` fails a build on a wrong solution. In a notebook the result displays
    nothing more (the feedback is already printed), so a cell ending in ``check(fn)`` shows the
    feedback and no ``True``/``False``.
    """

    passed: bool
    feedback: str
    exercise: str = ""
    part: str | None = None  # the group of inputs checked (None: all of them)

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"<CheckResult {self.exercise}: {'passed' if self.passed else 'not yet'}>"

    def _ipython_display_(self) -> None:
        """Display nothing: check() printed the feedback already."""



class Feedback:
    """The messages of an exercise (a mixin of :class:`~.checker.Exercise`)."""

    def _stuck(self) -> str:
        """The closing "Stuck?" line of a failure (none where the assignment allows no hints)."""
        return "" if grading.max_hints() == 0 else f"\n  Stuck? {self.path}.hint(1)"

    def library_problem(self, where: str, names: Sequence[str]) -> str:
        """The feedback for an answer that called the library (no names: switched off the watch)."""
        if not names:
            text = ("your function switched off check()'s watch for library calls "
                    "(sys.setprofile), so check() cannot tell whether it computed the answer itself. "
                    "Leave the profiler alone.")
        else:
            listed = ", ".join(f"`{n}`" for n in names[:2])
            if len(names) > 2:
                listed += f" (and {len(names) - 2} more)"
            text = (f"your function calls the library's own {listed}. This exercise is to compute "
                    "the answer yourself, in plain numpy: check() does not accept an answer that "
                    "calls the library code it is compared with, or any of linattn_core's "
                    "attention code" + (", nor, in a graded assignment, the exercises' own "
                                        "solutions." if grading.is_summative() else "."))
        return f"Not yet. {where}:\n" + wrap(text) + self._stuck()

    # -- running the reader's function --------------------------------------------------------
    def _raised(self, error: BaseException, where: str, case: Case | None,
                passed_unbatched: bool, fn: Callable | None = None) -> str:
        call = f"{self.fn_name}({', '.join(self.arg_names)})"
        name = type(error).__name__
        lines = [f"Not yet. {where}:",
                 f"  your function raised {name}: {compare.safe_str(error)}",
                 f"  (check() calls it as {call}.)"]
        if isinstance(error, SystemExit):
            lines.append(wrap("exit() or sys.exit() stops the program; return a value instead."))
        elif case is not None and case.batched and passed_unbatched \
                and self._slice_runs(fn, case):
            lines.append(wrap("Likely cause: it works without batch dimensions but not with "
                              f"them. {_BATCH_ADVICE.split('. ', 1)[1]}"))
        else:
            for fragment, advice in self.exception_hints:
                if fragment.lower() in compare.safe_str(error, 2000).lower():
                    lines.append(wrap(advice))
                    break
        return "\n".join(lines) + self._stuck()


    def _diagnose(self, fn: Callable, case: Case, expected: Any, result: Any,
                  passed_unbatched: bool) -> list[str]:
        """'Likely cause' lines: only what this input can tell apart.

        A mistake that gives the right answer on this input cannot be what went wrong here, and
        the right number in the wrong type (a float for an int) is no mistake of formula at all.
        """
        if compare.right_number_as_float(result, expected):
            return []
        matched: list[str] = []
        for mistake in self.mistakes:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    wrong = mistake.fn(*case.fresh_args())
            except Exception:
                continue
            if self._same(wrong, expected):
                continue
            if self._same(result, wrong) and mistake.message not in matched:
                matched.append(mistake.message)
        if len(matched) == 1:
            return [wrap("Likely cause: " + matched[0])]
        if matched:
            return [wrap("This input cannot tell these causes apart; it is one of:")] + [
                wrap("- " + m, indent="    ") for m in matched]
        if case.large and self._has_nonfinite(result):
            return [wrap("Likely cause: " + _STABILITY_ADVICE)]
        if case.batched and self._slice_is_right(fn, case, expected):
            return [wrap("Likely cause: " + _BATCH_ADVICE)]
        if self.kind == "array":
            arr, _ = compare.to_array(result)
            note = None if arr is None else compare.small_error_note(result, arr, expected)
            if note:
                return [wrap("Likely cause: " + note)]
        return []


def warning_text(caught: list) -> str:
    messages = sorted({compare.safe_str(w.message) for w in caught})
    return "; ".join(messages)
