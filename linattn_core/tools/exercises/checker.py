"""The checking framework: an :class:`Exercise` runs the reader's function and explains the result.

``check(fn)`` must be trustworthy whatever ``fn`` does, so:

- every expected answer is computed *before* ``fn`` first runs, from deep copies of the arguments
  (feature-map objects included), so nothing ``fn`` does (changing its inputs, redrawing a
  Performer, reseeding a global generator) can change what it is compared with;
- ``fn`` runs on its own deep copies; afterwards the checker compares them with the originals to
  report an input changed in place;
- nothing ``fn`` returns or raises escapes: any return value is read by :mod:`.compare` (or
  described), any exception but KeyboardInterrupt is reported, and a failure of the checker itself
  becomes feedback too;
- a diagnosis ("Likely cause") is given only when the input can tell it apart: when several typical
  mistakes give the same numbers on a degenerate input (one token), all of them are listed, and a
  mistake that gives the right answer on the input is never named;
- ``fn`` must compute the answer itself: while it runs, a profile hook records every call into the
  library's attention code (and the kit's own solutions), however it was imported, and such an answer
  fails with a message naming the function it called.

:func:`summative` switches ``solution()`` off and limits ``hint()`` for graded work (see
``scripts/make_assignments.py --summative``); :func:`formative` switches them back on.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import sys
import textwrap
import threading
import tracemalloc
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import compare
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


# The library's attention code: an answer that calls any of it has not computed the answer itself.
# (The feature maps are not here: every exercise with a `phi` argument is meant to call it.)
LIBRARY = ("linattn_core.attention", "linattn_core.linear", "linattn_core.linear_grad",
           "linattn_core.decay", "linattn_core.delta", "linattn_core.streaming", "linattn_core.recall",
           "linattn_core.fast", "linattn_core.lm")
# In summative mode the kit's own solutions and references are refused too (in practice they are one
# solution() away anyway) ...
KIT = ("linattn_core.tools.exercises",)
# ... except the checker itself and the feature-map wrapper it hands to fn.
_ALLOWED = ("linattn_core.tools.exercises.inputs", "linattn_core.tools.exercises.checker",
            "linattn_core.tools.exercises.compare")


# The two lengths of the memory check: the longer one twice the shorter.
MEMORY_LENGTHS = (1024, 2048)


@dataclass
class _Mode:
    summative: bool = False
    max_hints: int | None = None  # None: every hint


_MODE = _Mode()


def summative(max_hints: int = 0) -> None:
    """Graded work: ``solution()`` is off, ``hint(n)`` answers only ``n <= max_hints``.

    ``check()`` refuses an answer that calls the library's attention code in both modes; in this
    one it also refuses an answer that calls the kit's own solutions or references. The released
    notebooks of ``make_assignments.py --summative`` call
    this in their first code cell.
    """
    if not isinstance(max_hints, (int, np.integer)) or isinstance(max_hints, bool) or max_hints < 0:
        raise ValueError(f"max_hints must be an int >= 0 (0: no hints), got {max_hints!r}")
    _MODE.summative, _MODE.max_hints = True, int(max_hints)


def formative() -> None:
    """Practice (the default): every hint and ``solution()`` are available."""
    _MODE.summative, _MODE.max_hints = False, None


@contextlib.contextmanager
def practice_mode() -> Iterator[None]:
    """Formative mode inside the block, the previous mode after it (for the teacher's tools)."""
    saved = (_MODE.summative, _MODE.max_hints)
    formative()
    try:
        yield
    finally:
        _MODE.summative, _MODE.max_hints = saved


def _in(module: str, prefixes: Sequence[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _public_name(module: str, qualname: str) -> str:
    """``linattn_core.linear_attention`` for an exported function, else its full dotted name."""
    top = qualname.split(".", 1)[0]
    package = sys.modules.get("linattn_core")
    if module.startswith("linattn_core.") and top in getattr(package, "__all__", ()):
        return f"linattn_core.{qualname}"
    return f"{module}.{qualname}"


@contextlib.contextmanager
def _library_calls(forbidden: Sequence[str]) -> Iterator[list]:
    """Record the forbidden library functions the code run inside calls (names, first call first).

    A profile hook sees every Python function call, whatever name the caller reached the function
    by (``la.linear_attention``, ``from linattn_core.linear import ...``, a method of
    LinearAttentionState, a helper that calls the library), and every call of a compiled function
    of the library. Only the entry points are recorded: a library frame called from outside.
    If the hook is gone afterwards, ``"sys.setprofile"`` ends the list: the code removed it, or
    Python did (it drops a profile function that raises, e.g. at the recursion limit).
    """
    calls: list[str] = []
    active = [True]  # a thread fn started may outlive the call: its hook then does nothing
    depth = [0]  # how many forbidden frames are running: only the outermost is an entry point
    verdicts: dict = {}  # code object -> whether it is forbidden code (one module per code object)

    def banned(frame) -> bool:
        code = frame.f_code
        if code not in verdicts:
            module = frame.f_globals.get("__name__", "")
            verdicts[code] = isinstance(module, str) and _in(module, forbidden) \
                and not _in(module, _ALLOWED)
        return verdicts[code]

    def record(name: str) -> None:
        if name not in calls:
            calls.append(name)

    def hook(frame, event, arg):
        if not active[0]:
            return
        if event == "call":
            if banned(frame):
                # a module's body running on its first import is no call of the reader's
                if depth[0] == 0 and frame.f_code.co_name != "<module>":
                    code = frame.f_code
                    record(_public_name(frame.f_globals["__name__"],
                                        getattr(code, "co_qualname", code.co_name)))
                depth[0] += 1
        elif event == "return":
            if banned(frame):
                depth[0] -= 1
        elif event == "c_call" and depth[0] == 0:
            module = getattr(arg, "__module__", None)
            if isinstance(module, str) and _in(module, forbidden):
                record(f"{module}.{getattr(arg, '__name__', '?')}")

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield calls
    finally:
        active[0] = False
        if sys.getprofile() is not hook:
            calls.append("sys.setprofile")
        sys.setprofile(previous)
        threading.setprofile(previous_threads)


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

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"<CheckResult {self.exercise}: {'passed' if self.passed else 'not yet'}>"

    def _ipython_display_(self) -> None:
        """Display nothing: check() printed the feedback already."""


@dataclass
class _Call:
    result: Any = None
    error: BaseException | None = None
    warnings: list = field(default_factory=list)
    changed: list = field(default_factory=list)
    library: list = field(default_factory=list)  # forbidden library functions fn called
    unwatched: bool = False  # the watch for library calls was gone when fn returned


def _changed(before: Any, after: Any, depth: int = 0) -> bool:
    """Whether the reader's function changed an argument (an array, or a feature map's arrays).

    Objects are compared through their attributes, three levels deep (a Phi holds the library's
    feature map, which holds its projection).
    """
    if isinstance(before, np.ndarray):
        return not (isinstance(after, np.ndarray) and before.shape == after.shape
                    and np.array_equal(before, after, equal_nan=True))
    inner = getattr(before, "__dict__", None)
    if depth >= 3 or inner is None or not isinstance(getattr(after, "__dict__", None), dict):
        return False
    after_dict = vars(after)
    return any(_changed(value, after_dict.get(key), depth + 1) for key, value in inner.items()
               if isinstance(value, np.ndarray) or hasattr(value, "__dict__"))


@contextlib.contextmanager
def _torch_allocations() -> Iterator[list]:
    """Track the largest tensor any torch operation creates (``[bytes]``; torch only if imported).

    tracemalloc sees numpy's allocations but not torch's, whose CPU allocator bypasses Python's:
    a dispatch mode sees every operation's outputs instead.
    """
    largest = [0]
    torch = sys.modules.get("torch")
    mode = None
    if torch is not None:
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
            from torch.utils._pytree import tree_leaves

            class _Largest(TorchDispatchMode):
                def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                    out = func(*args, **(kwargs or {}))
                    for t in tree_leaves(out):
                        if isinstance(t, torch.Tensor):
                            largest[0] = max(largest[0], t.numel() * t.element_size())
                    return out

            mode = _Largest()
        except Exception:
            mode = None
    if mode is None:
        yield largest
        return
    with mode:
        yield largest


class Exercise:
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
    def __call__(self, fn: Callable) -> CheckResult:
        """Same as :meth:`check`."""
        return self.check(fn)

    def cases(self) -> list[Case]:
        """The seeded inputs of the check, in the order they are tried."""
        return self._cases()

    def check(self, fn: Callable) -> CheckResult:
        """Run ``fn`` on every input, print feedback, return a result that is truthy if all right.

        Never raises (except KeyboardInterrupt): whatever ``fn`` returns or raises is reported.
        """
        try:
            # the comparisons themselves may overflow on a wild answer: that is not fn's warning
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                passed, text = self._check(fn)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            passed, text = False, (
                f"Not yet. check() could not finish examining your function "
                f"({type(exc).__name__}: {compare.safe_str(exc, 200)}). Make it take plain "
                f"numpy arrays and return one.{self._stuck()}")
        print(text)
        return CheckResult(passed, text, self.name)

    def hint(self, n: int = 1) -> None:
        """Print hint ``n`` (1, 2, ...); later hints say more."""
        total = len(self.hints)
        allowed = total if _MODE.max_hints is None else min(total, _MODE.max_hints)
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
            elif _MODE.summative:
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
        if _MODE.summative:
            print("solution() is switched off in this assignment (it is graded). check() still "
                  "says what is wrong with each input.")
            return
        print(self.solution_source())

    def solution_source(self) -> str:
        """The source of the reference solution, named like the reader's function."""
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

    def _stuck(self) -> str:
        """The closing "Stuck?" line of a failure (none where the assignment allows no hints)."""
        return "" if _MODE.max_hints == 0 else f"\n  Stuck? {self.path}.hint(1)"

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
                                        "solutions." if _MODE.summative else "."))
        return f"Not yet. {where}:\n" + wrap(text) + self._stuck()

    # -- running the reader's function --------------------------------------------------------
    def expected(self, case: Case) -> Any:
        """The reference answer, from deep copies of the case's arguments, warnings silenced."""
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return self.reference(*case.fresh_args())

    def call(self, fn: Callable, args: tuple) -> _Call:
        """Call ``fn`` on deep copies of ``args``: result, exception, numeric warnings, changes."""
        copies = copy.deepcopy(args)
        out = _Call()
        forbidden = LIBRARY + self.forbidden + (KIT if _MODE.summative else ())
        with warnings.catch_warnings(record=True) as caught, \
                np.errstate(over="warn", divide="warn", invalid="warn", under="ignore"):
            warnings.simplefilter("always")
            with _library_calls(forbidden) as library:
                try:
                    out.result = fn(*copies)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    out.error = exc
        out.unwatched = bool(library) and library[-1] == "sys.setprofile"
        out.library = [name for name in library if name != "sys.setprofile"]
        out.warnings = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        out.changed = [name for name, a, c in zip(self.arg_names, args, copies, strict=False)
                       if _changed(a, c)]
        return out

    def _check(self, fn: Callable) -> tuple[bool, str]:
        if not callable(fn):
            got = "None" if fn is None else compare.type_name(fn)
            return False, (f"check() needs your function itself, not {got}: "
                           f"{self.path}.check({self.fn_name}) - no parentheses after the name.")
        cases = self._cases()
        expected = [self.expected(case) for case in cases]  # all before fn first runs
        memory = None
        if self._memory_case is not None:
            memory = []
            for n in MEMORY_LENGTHS:
                mem_case = self._memory_case(n)
                memory.append((mem_case, n, self.expected(mem_case)))
        extra = self._extra_check(self) if self._extra_check is not None else None

        passed_unbatched = False
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
        text = wrap(f"Correct! Your {self.fn_name} gives the right answer on all {len(cases)} "
                    f"inputs ({titles}).{note}", indent="")
        if self.success:
            text += "\n" + wrap(self.success, indent="")
        return True, text

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
                        f"{_warning_text(run.warnings)}.\n" + wrap(_WARNING_ADVICE))
            return None
        if run.result is None and number == 1:
            return wrap(f"Not yet: {self.fn_name} returns None, so there is nothing to check. "
                        "Write its body in place of the `...` line and end it with "
                        "`return`.", indent="") + self._stuck().replace("\n  ", "\n")
        lines = [f"Not yet. {where}:", wrap(problem)]
        lines += self._diagnose(fn, case, expected, run.result, passed_unbatched)
        if run.warnings:
            lines.append(f"  numpy warned: {_warning_text(run.warnings)}.")
        if number == 2:
            lines.append("  (Input #1 was right.)")
        elif number > 2:
            lines.append(f"  (Inputs #1 to #{number - 1} were right.)")
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

    def _slice_is_right(self, fn: Callable, case: Case, expected: Any) -> bool:
        """Whether ``fn`` is right on the first slice of a batched case (same feature map)."""
        idx = (0,) * case.batch_ndim
        sliced = case.first_slice()
        try:
            with contextlib.redirect_stdout(None):
                run = self.call(fn, sliced)
            exp = (tuple(e[idx] for e in expected) if isinstance(expected, tuple)
                   else expected[idx])
            return run.error is None and self._compare(run.result, exp) is None
        except Exception:
            return False

    def _slice_runs(self, fn: Callable | None, case: Case) -> bool:
        """Whether ``fn`` runs without raising on the first slice of a batched case."""
        if fn is None:
            return False
        try:
            with contextlib.redirect_stdout(None):
                return self.call(fn, case.first_slice()).error is None
        except Exception:  # no slice run: no batch diagnosis
            return False

    @staticmethod
    def _has_nonfinite(result: Any) -> bool:
        items = result if isinstance(result, (tuple, list)) else (result,)
        for item in items:
            arr, _ = compare.to_array(item)
            if arr is not None and not np.isfinite(arr).all():
                return True
        return False

    def _peak(self, fn: Callable, case: Case) -> tuple[_Call, int]:
        """Run ``fn`` once on ``case``: the call, and its peak allocation in bytes.

        The peak is the larger of numpy's (``tracemalloc``, above what was allocated before) and
        the largest single torch tensor (a dispatch mode).
        """
        with _torch_allocations() as torch_largest:
            was_tracing = tracemalloc.is_tracing()
            if not was_tracing:
                tracemalloc.start()
            tracemalloc.reset_peak()
            base, _ = tracemalloc.get_traced_memory()
            try:
                run = self.call(fn, case.args)  # copies of q, k, v: linear in N, far below
                _, peak = tracemalloc.get_traced_memory()
            finally:
                if not was_tracing:
                    tracemalloc.stop()
        return run, max(peak - base, torch_largest[0])

    def _check_memory(self, fn: Callable, memory: list[tuple[Case, int, Any]]) -> str | None:
        """Fail ``fn`` if its peak memory grows like N^2 between the two lengths of ``memory``.

        A size threshold alone cannot tell an O(N C) chunked answer (2.3 MiB at N = 2048 for the
        library's chunked form) from a boolean N x N mask (4 MiB): the growth can. Doubling N
        doubles the first and quadruples the second.
        """
        with _torch_allocations():  # a first call, unmeasured: lazy imports allocate too
            with contextlib.redirect_stdout(None):
                self.call(fn, memory[0][0].args)
        peaks = []
        for case, n, expected in memory:
            run, used = self._peak(fn, case)
            where = f"Long input ({case.describe(self.arg_names)})"
            if run.library or (run.unwatched and run.error is None):
                return self.library_problem(where, run.library)
            if run.error is not None:
                return self._raised(run.error, where, None, False)
            problem = self._compare(run.result, expected)
            if problem is not None:
                return f"Not yet. {where}:\n{wrap(problem)}{self._stuck()}"
            peaks.append((n, used))
        (n1, used1), (n2, used2) = peaks
        growth, r = used2 / max(used1, 1), n2 / n1
        # N^2 when the longer length holds at least a quarter of an N x N byte matrix and the peak
        # grew closer to r^2 (quadratic) than to r (linear)
        if used2 >= n2 * n2 // 4 and growth > (r + r * r) / 2:
            return "Almost!\n" + wrap(
                f"The values are right, but your function's memory grows like N^2: at its peak it "
                f"allocated {used1 / 2**20:.1f} MiB on N = {n1} tokens and {used2 / 2**20:.1f} MiB "
                f"on N = {n2} ({growth:.1f} times as much for {n2 / n1:g} times the tokens; numpy "
                f"arrays, or one torch tensor). That is an N x N matrix ({n2 * n2 * 8 / 2**20:.1f} "
                f"MiB in float64, {n2 * n2 / 2**20:.1f} MiB as booleans at N = {n2}). The point of "
                "this form is that nothing N x N is ever built: aggregate phi(K) and V first (S "
                "and z), then query the aggregate.")
        return None


def _warning_text(caught: list) -> str:
    messages = sorted({compare.safe_str(w.message) for w in caught})
    return "; ".join(messages)
