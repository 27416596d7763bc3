"""The checking framework: an :class:`Exercise` runs the reader's function and explains the result.

``check(fn)`` must be trustworthy whatever ``fn`` does. Its parts, by concern:

- :mod:`.inputs`: the seeded inputs (cases) and feature maps with readable names;
- :mod:`.running`: ``fn`` called on deep copies, expected answers computed before it runs, the
  watch for calls of the library (and, in graded work, of the kit's solutions), the memory check;
- :mod:`.compare`: reading whatever ``fn`` returned and saying what differs; nothing there raises;
- :mod:`.feedback`: the messages, the typical mistakes ("Likely cause" only where an input can tell
  it), :class:`CheckResult`;
- :mod:`.grading`: practice or graded work (a locked :func:`summative` mode), the groups of inputs
  and the points each is worth (``check(fn, part=...)``).

This module holds the :class:`Exercise` itself: its public API and the loop over the inputs.
"""

from __future__ import annotations

import functools
import inspect
import textwrap
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import compare, grading
from .feedback import _WARNING_ADVICE, CheckResult, Feedback, Mistake, warning_text, wrap
from .grading import formative, practice_mode, summative
from .inputs import Case
from .running import KIT, LIBRARY, MEMORY_LENGTHS, Running

__all__ = ["KIT", "LIBRARY", "MEMORY_LENGTHS", "CheckResult", "Exercise", "Mistake", "formative",
           "practice_mode", "summative"]


class Exercise(Feedback, Running):
    """An auto-checked exercise: ``check(fn)``, ``hint(n)``, ``solution()``.

    Parameters
    ----------
    name : str
        The exercise's key in :data:`linattn_core.tools.exercises.EXERCISES` (``exercises.get(name)``).
    path : str
        How the chapter reaches it, e.g. ``"exercises.causal.prefix_sums"`` (used in feedback).
    fn_name : str
        The name of the function the reader writes in the chapter.
    chapter : str
        The chapter file (without ``.md``) whose exercise section uses it.
    title, task : str
        A one-line title and the full task (signature, shapes, what is checked).
    arg_names : sequence of str
        The names of ``fn``'s arguments, as used in the feedback.
    cases : callable
        ``cases() -> list[Case]``: the seeded inputs, simple ones first.
    reference : callable
        Computes the expected result from a case's arguments (``linattn_core`` where it has the
        function).
    solution_fn : callable
        A model solution in plain numpy; ``solution()`` prints its source.
    hints : sequence of str
        Progressive hints, the last one nearly the solution.
    kind : {"array", "triple", "int", "number"}
        What ``fn`` returns (``"number"``: a real number, equal to rounding).
    unit : str
        What an ``"int"`` answer counts, as the feedback names it (``"bytes"``, ``"pairs"``).
    mistakes : sequence of Mistake
        Typical wrong answers, tried when the reader's answer is wrong.
    forbid_warnings : bool
        Fail if ``fn`` makes numpy warn (overflow, invalid value, divide by zero).
    memory_case : callable or None
        ``memory_case(n) -> case``: a long input of ``n`` tokens. ``fn`` runs on two lengths,
        :data:`MEMORY_LENGTHS`, and fails if its peak allocation (numpy's seen by ``tracemalloc``,
        torch's by a dispatch mode) grows like N^2: at least a quarter of an N x N byte matrix at
        the longer length, and more than 3 times larger when N doubles (an O(N C) chunked answer
        doubles, an N x N matrix quadruples).
    difficulty : int
        1 (warm-up) to 3 (hardest).
    minutes : int
        About how long it takes a reader who has read the chapter.
    exception_hints : sequence of (str, str)
        (fragment of an exception message, advice): extra advice when ``fn`` raises.
    success : str
        A sentence printed after "Correct!": what the exercise connects to.
    extra_check : callable or None
        ``extra_check(exercise) -> run``: prepares its expected answer first, then
        ``run(fn) -> (problem or None, note)`` runs after every case passed (e.g. stepping through
        a whole sequence); ``note`` is added to the "Correct!" line.
    forbidden : sequence of str
        Modules (dotted prefixes) ``fn`` may not call besides :data:`LIBRARY`, e.g. the feature maps
        for the exercise that writes one.
    library_answer : callable or None
        The shortcut this exercise refuses: a function that gets the right numbers by calling the
        library. ``course.wrong_answers`` shows it with the feedback it gets.
    """

    def __init__(self, name: str, path: str, fn_name: str, chapter: str, title: str, task: str,
                 arg_names: Sequence[str], cases: Callable[[], list], reference: Callable,
                 solution_fn: Callable, hints: Sequence[str], *, kind: str = "array",
                 mistakes: Sequence[Mistake] = (), forbid_warnings: bool = False,
                 memory_case: Callable | None = None, difficulty: int = 1, minutes: int = 10,
                 exception_hints: Sequence[tuple[str, str]] = (), success: str = "",
                 extra_check: Callable | None = None, unit: str = "bytes",
                 forbidden: Sequence[str] = (), library_answer: Callable | None = None):
        self.name = name
        self.path = path
        self.fn_name = fn_name
        self.chapter = chapter
        self.title = title
        self.task = textwrap.dedent(task).strip()
        self.arg_names = tuple(arg_names)
        self._cases = cases
        self.reference = reference
        self.solution_fn = solution_fn
        self.hints = tuple(textwrap.dedent(h).strip() for h in hints)
        self.kind = kind
        self.mistakes = tuple(mistakes)
        self.forbid_warnings = forbid_warnings
        self._memory_case = memory_case
        self.difficulty = difficulty
        self.minutes = minutes
        self.exception_hints = tuple(exception_hints)
        self.success = success
        self._extra_check = extra_check
        self.forbidden = tuple(forbidden)
        self.library_answer = library_answer
        if kind == "array":
            self._compare, self._same = compare.compare_array, compare.same_array
        elif kind == "triple":
            self._compare, self._same = compare.compare_triple, compare.same_triple
        elif kind == "int":
            self._compare = functools.partial(compare.compare_int, unit=unit)
            self._same = compare.same_int
        elif kind == "number":
            self._compare, self._same = compare.compare_number, compare.same_number
        else:
            raise ValueError(f"kind must be 'array', 'triple', 'int' or 'number', got {kind!r}")

    # -- public API ---------------------------------------------------------------------------
    def __call__(self, fn: Callable, part: str | None = None) -> CheckResult:
        """Same as :meth:`check`."""
        return self.check(fn, part)

    def cases(self) -> list[Case]:
        """The seeded inputs of the check, in the order they are tried."""
        return self._cases()

    def check(self, fn: Callable, part: str | None = None) -> CheckResult:
        """Run ``fn`` on every input, print feedback, return a result that is truthy if all right.

        ``part``: one group of inputs only (:func:`.grading.groups`; an assignment grades each group
        in a cell of its own, for its points). Never raises (except KeyboardInterrupt): whatever
        ``fn`` returns or raises is reported.
        """
        if part is not None and part not in self.groups():
            raise ValueError(f"{self.path} has no group of inputs {part!r}; its groups are "
                             f"{', '.join(self.groups())}")
        try:
            # the comparisons themselves may overflow on a wild answer: that is not fn's warning
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                passed, text = self._check(fn, part)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            passed, text = False, (
                f"Not yet. check() could not finish examining your function "
                f"({type(exc).__name__}: {compare.safe_str(exc, 200)}). Make it take plain "
                f"numpy arrays and return one.{self._stuck()}")
        print(text)
        return CheckResult(passed, text, self.name, part)

    def hint(self, n: int = 1) -> None:
        """Print hint ``n`` (1, 2, ...); later hints say more."""
        total = len(self.hints)
        limit = grading.max_hints()
        allowed = total if limit is None else min(total, limit)
        if allowed == 0:
            print("There are no hints in this assignment (it is graded); check() still says what "
                  "is wrong with each input.")
            return
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            print(f"hint(n) takes n = 1 to {allowed}, got {n!r}.")
            return
        if n > allowed:
            if allowed < total:
                print(f"This assignment allows hints 1 to {allowed} of {self.path}; here is hint "
                      f"{allowed}.")
            elif grading.is_summative():
                print(f"There are {total} hints for {self.path}; here is the last one.")
            else:
                print(f"There are {total} hints for {self.path}; here is the last one. "
                      f"The full solution: {self.path}.solution()")
            n = allowed
        print(f"Hint {n} of {total}:")
        print(wrap(self.hints[n - 1]))
        if n < allowed:
            print(f"(More: {self.path}.hint({n + 1}))")

    def solution(self) -> None:
        """Print a reference solution (plain numpy); in a graded assignment, say it is off."""
        if grading.is_summative():
            print("solution() is switched off in this assignment (it is graded). check() still "
                  "says what is wrong with each input.")
            return
        print(self.solution_source())

    def solution_source(self) -> str:
        """The source of the reference solution, named like the reader's function ("" in graded work)."""
        if grading.is_summative():
            return ""
        src = textwrap.dedent(inspect.getsource(self.solution_fn))
        return src.replace(f"def {self.solution_fn.__name__}(", f"def {self.fn_name}(", 1).rstrip()

    def describe(self) -> str:
        stars = "*" * self.difficulty
        return (f"{self.path} [{stars}, ~{self.minutes} min] {self.title}\n\n"
                f"{self.task}\n\n{self.fn_name}({', '.join(self.arg_names)}); "
                f"check(fn), hint(1..{len(self.hints)}), solution()")

    def __repr__(self) -> str:
        return f"<Exercise {self.path} ({self.chapter}.md): {self.title}>"

    def _repr_markdown_(self) -> str:
        stars = "★" * self.difficulty + "☆" * (3 - self.difficulty)
        return (f"**`{self.path}`** ({stars}, about {self.minutes} min): {self.title}\n\n"
                f"{self.task}\n\n`check(fn)` · `hint(1)` … `hint({len(self.hints)})` · "
                "`solution()`")

    def groups(self) -> list[str]:
        """The groups of this exercise's inputs (``check(fn, part=...)``), in grading order."""
        return grading.groups(self.cases(), self._memory_case is not None)

    def points(self) -> dict[str, int]:
        """The points of each group of inputs; they add up to ``POINTS_PER_STAR`` per star."""
        return grading.points(self.groups(), self.difficulty)

    def _check(self, fn: Callable, part: str | None = None) -> tuple[bool, str]:
        if not callable(fn):
            got = "None" if fn is None else compare.type_name(fn)
            return False, (f"check() needs your function itself, not {got}: "
                           f"{self.path}.check({self.fn_name}) - no parentheses after the name.")
        cases = self._cases()
        if part is not None:
            cases = [c for i, c in enumerate(cases) if grading.group_of(c, i) == part]
        expected = [self.expected(case) for case in cases]  # all before fn first runs
        memory = None
        if self._memory_case is not None and part in (None, "memory"):
            memory = []
            for n in MEMORY_LENGTHS:
                mem_case = self._memory_case(n)
                memory.append((mem_case, n, self.expected(mem_case)))
        extra = (self._extra_check(self) if self._extra_check is not None and part in (None, "values")
                 else None)

        passed_unbatched = part == "batch"  # a group of batched inputs: its slices are the plain ones
        for number, (case, exp) in enumerate(zip(cases, expected, strict=True), start=1):
            problem = self._run_case(fn, case, exp, number, len(cases), passed_unbatched)
            if problem is not None:
                return False, problem
            passed_unbatched = passed_unbatched or not case.batched
        note = ""
        if memory is not None:
            problem = self._check_memory(fn, memory)
            if problem is not None:
                return False, problem
            note = " It also never built an N x N matrix."
        if extra is not None:
            problem, extra_note = extra(fn)
            if problem is not None:
                return False, problem
            note += extra_note
        titles = "; ".join(c.title for c in cases)
        if part is None:
            text = wrap(f"Correct! Your {self.fn_name} gives the right answer on all {len(cases)} "
                        f"inputs ({titles}).{note}", indent="")
        elif part == "memory":
            text = wrap(f"Correct on {grading.GROUP_TITLES[part]}: your {self.fn_name} gives the "
                        f"right answer on the long inputs.{note}", indent="")
        else:
            text = wrap(f"Correct on {grading.GROUP_TITLES[part]}: your {self.fn_name} gives the "
                        f"right answer on all {len(cases)} inputs of this group ({titles}).{note}",
                        indent="")
        if self.success:
            text += "\n" + wrap(self.success, indent="")
        return True, text

    def _run_case(self, fn: Callable, case: Case, expected: Any, number: int, total: int,
                  passed_unbatched: bool) -> str | None:
        where = f"Input #{number} of {total} ({case.describe(self.arg_names)})"
        run = self.call(fn, case.args)
        if run.library or (run.unwatched and run.error is None):
            return self.library_problem(where, run.library)
        if run.error is not None:
            return self._raised(run.error, where, case, passed_unbatched, fn)
        if "phi" in run.changed:
            return f"Not yet. {where}:\n" + wrap(
                "your function changed the feature map `phi` (its arrays, e.g. a Performer's "
                "projection redrawn): use phi as it is given, so that queries and keys share one "
                "set of features.")
        if run.changed:
            return f"Not yet. {where}:\n" + wrap(
                f"your function changed its input {', '.join('`' + c + '`' for c in run.changed)}"
                " in place. Compute new arrays instead (e.g. `S_new = S + ...`, not `S += ...`), "
                "so the caller's arrays stay as they were.")
        problem = self._compare(run.result, expected)
        if problem is None:
            if self.forbid_warnings and run.warnings:
                return (f"Not yet. {where}:\n  the values are right, but numpy warned: "
                        f"{warning_text(run.warnings)}.\n" + wrap(_WARNING_ADVICE))
            return None
        if run.result is None and number == 1:
            return wrap(f"Not yet: {self.fn_name} returns None, so there is nothing to check. "
                        "Write its body in place of the `...` line and end it with "
                        "`return`.", indent="") + self._stuck().replace("\n  ", "\n")
        lines = [f"Not yet. {where}:", wrap(problem)]
        lines += self._diagnose(fn, case, expected, run.result, passed_unbatched)
        if run.warnings:
            lines.append(f"  numpy warned: {warning_text(run.warnings)}.")
        if number == 2:
            lines.append("  (Input #1 was right.)")
        elif number > 2:
            lines.append(f"  (Inputs #1 to #{number - 1} were right.)")
        return "\n".join(lines) + self._stuck()

