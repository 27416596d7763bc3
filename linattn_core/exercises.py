"""Auto-checked exercises for the linattn book.

Every exercise is an :class:`Exercise` object named after the function the reader writes. In a
notebook::

    from linattn_core import exercises

    def softmax_attention(q, k, v):
        ...  # your code here

    exercises.softmax_attention.check(softmax_attention)   # prints feedback, returns True/False
    exercises.softmax_attention.hint(1)                     # hint 1, 2, ... (more and more explicit)
    exercises.softmax_attention.solution()                  # prints a reference solution
    exercises.list()                                        # all exercises, by chapter

``check(fn)`` runs ``fn`` on several seeded float64 inputs (one token, an odd length such as 7,
batch dimensions ``(2, 3)``, and the edge cases of each exercise) and compares the result with
``linattn_core`` itself. It never raises for a wrong answer: it says which input failed, the shape or
the first mismatching position and the size of the error, and, when the answer matches a typical
mistake (the current token forgotten, the normaliser or the ``1/sqrt(d)`` scale left out, an
overflowing ``exp``, ...), what that mistake is. Exceptions raised by ``fn`` are caught and reported.

The solutions are ordinary functions of this module (``_solution_<name>``); the test suite checks
that each of them passes its own exercise and agrees with the library.
"""

from __future__ import annotations

import builtins
import inspect
import math
import textwrap
import tracemalloc
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# ``list`` (exercises.list()) is deliberately not exported: a star import must not shadow the builtin.
__all__ = [
    "EXERCISES",
    "Exercise",
    "associative_attention",
    "causal_cumsum",
    "clamped_normalise",
    "elu_plus_one",
    "kernel_attention",
    "kv_cache_bytes",
    "performer_features",
    "score_matrix_bytes",
    "softmax_attention",
    "streaming_step",
]

# One place for the comparison tolerance: inputs are float64 and every correct answer differs from
# the library only by rounding, while every typical mistake is off by far more than this.
_RTOL = 1e-8
_ATOL = 1e-10
# The library's default clamp of the denominator: max(den, eps).
_EPS = 1e-6
# Batch dimensions used in the checks: (batch, heads).
_BATCH = (2, 3)


# --------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------
class _Phi:
    """A library feature map with a readable name (what the reader sees in the feedback).

    Attribute access (``phi.d_phi``, ``phi.projection``) is forwarded to the library object.
    """

    def __init__(self, feature_map: Callable, label: str):
        self._fm = feature_map
        self.label = label

    def __call__(self, x):
        return self._fm(x)

    def __getattr__(self, name):
        return getattr(self._fm, name)

    def __repr__(self) -> str:
        return f"phi = {self.label}"


def _lib_phi(phi: Any) -> Any:
    """The library's own feature map behind a :class:`_Phi` (what the references pass on)."""
    return phi._fm if isinstance(phi, _Phi) else phi


def _elu_phi() -> _Phi:
    from linattn_core import get_feature_map

    return _Phi(get_feature_map("elu+1"), "elu+1")


def _performer_phi(d: int, m: int, seed: int) -> _Phi:
    from linattn_core import get_feature_map

    fm = get_feature_map("performer", d=d, num_features=m, seed=seed, stabilize=False)
    return _Phi(fm, f"performer (unstabilised, m = {m} random features)")


@dataclass
class _Case:
    """One input of a check: the arguments and a line that describes them."""

    title: str
    args: tuple
    batched: bool = False
    large: bool = False  # large-magnitude inputs: tests numerical stability

    def describe(self, names: Sequence[str]) -> str:
        parts = []
        for name, arg in zip(names, self.args, strict=False):
            if isinstance(arg, np.ndarray):
                parts.append(f"{name} {tuple(arg.shape)}")
            elif isinstance(arg, _Phi):
                parts.append(repr(arg))
            else:
                parts.append(f"{name} = {arg!r}")
        return f"{self.title}: " + ", ".join(parts)


def _qkv(rng: np.random.Generator, n_q: int, n_k: int, d: int = 4, d_v: int = 3,
         batch: tuple = (), scale: float = 1.0):
    # q: (*batch, n_q, d), k: (*batch, n_k, d), v: (*batch, n_k, d_v); signed values
    q = scale * rng.standard_normal((*batch, n_q, d))
    k = scale * rng.standard_normal((*batch, n_k, d))
    v = rng.standard_normal((*batch, n_k, d_v))
    return q, k, v


def _attention_cases(seed: int, *, cross: bool = True, performer: bool = True,
                     with_phi: bool = True) -> list[_Case]:
    """The standard inputs of the attention exercises (d = 4, d_v = 3 so that d != d_v)."""
    rng = np.random.default_rng(seed)

    def phi_args():
        return (_elu_phi(),) if with_phi else ()

    cases = [
        _Case("small", (*_qkv(rng, 5, 5), *phi_args())),
        _Case("one token (N = 1)", (*_qkv(rng, 1, 1), *phi_args())),
        _Case("odd length (N = 7)", (*_qkv(rng, 7, 7), *phi_args())),
    ]
    if cross:
        cases.append(_Case("cross-attention (3 queries, 6 keys)", (*_qkv(rng, 3, 6), *phi_args())))
    cases.append(_Case(f"batch dims {_BATCH}", (*_qkv(rng, 7, 7, batch=_BATCH), *phi_args()),
                       batched=True))
    if with_phi and performer:
        q, k, v = _qkv(rng, 6, 6, scale=0.5)
        cases.append(_Case("a feature map with d_phi != d", (q, k, v, _performer_phi(4, 6, seed))))
    return cases


# --------------------------------------------------------------------------------------------------
# Comparing answers
# --------------------------------------------------------------------------------------------------
def _as_array(got: Any) -> tuple[np.ndarray | None, str | None]:
    """Convert the reader's return value to a float array, or explain why it cannot be used."""
    if got is None:
        return None, "your function returned None - did you forget `return`?"
    if isinstance(got, (tuple, builtins.list)) and got and not np.isscalar(got[0]):
        return None, (f"your function returned a {type(got).__name__} of {len(got)} items; "
                      "return only the output array")
    if hasattr(got, "detach") and hasattr(got, "numpy"):  # a torch tensor
        got = got.detach().cpu().numpy()
    try:
        arr = np.asarray(got)
    except Exception:  # any failure means "not an array"; we say so below
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        return None, f"your function returned {type(got).__name__}, expected a numpy array of floats"
    return arr.astype(np.float64, copy=False), None


def _fmt_index(idx: tuple) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _array_difference(got: np.ndarray, expected: np.ndarray, what: str = "output") -> str | None:
    """None if ``got`` matches ``expected``; otherwise a precise description of the difference."""
    if got.shape != expected.shape:
        return f"wrong shape of {what}: expected {tuple(expected.shape)}, got {tuple(got.shape)}"
    bad_finite = ~np.isfinite(got) & np.isfinite(expected)
    if bad_finite.any():
        idx = tuple(np.argwhere(bad_finite)[0])
        kind = "NaN" if np.isnan(got[idx]) else "inf"
        return (f"{what} contains NaN or inf in {int(bad_finite.sum())} of {got.size} entries "
                f"(first at index {_fmt_index(idx)}: {kind}, expected {expected[idx]:.6g})")
    close = np.isclose(got, expected, rtol=_RTOL, atol=_ATOL, equal_nan=True)
    if close.all():
        return None
    idx = tuple(np.argwhere(~close)[0])
    err = np.abs(got - expected)
    err = np.where(np.isfinite(err), err, 0.0)
    return (f"wrong values in {what}: {int((~close).sum())} of {got.size} entries differ; "
            f"first at index {_fmt_index(idx)}: expected {expected[idx]:.6g}, got {got[idx]:.6g}; "
            f"largest error |got - expected| = {err.max():.2e}")


def _same_array(a: Any, b: Any) -> bool:
    """Loose match used to recognise a typical mistake (NaN matches NaN)."""
    a_arr, _ = _as_array(a)
    b_arr, _ = _as_array(b)
    if a_arr is None or b_arr is None or a_arr.shape != b_arr.shape:
        return False
    return bool(np.allclose(a_arr, b_arr, rtol=_RTOL, atol=_ATOL, equal_nan=True))


def _compare_array(got: Any, expected: np.ndarray) -> str | None:
    arr, problem = _as_array(got)
    if problem:
        return problem
    return _array_difference(arr, expected)


def _compare_triple(got: Any, expected: tuple) -> str | None:
    names = ("S_new", "z_new", "y_t")
    if got is None:
        return "your function returned None - did you forget `return`?"
    if not isinstance(got, (tuple, builtins.list)) or len(got) != 3:
        what = f"a {type(got).__name__} of length {len(got)}" if isinstance(
            got, (tuple, builtins.list)) else type(got).__name__
        return f"expected a tuple (S_new, z_new, y_t) of three arrays, got {what}"
    for name, g, e in zip(names, got, expected, strict=True):
        arr, problem = _as_array(g)
        if problem:
            return f"{name}: {problem}"
        diff = _array_difference(arr, e, what=name)
        if diff:
            return diff
    return None


def _same_triple(a: Any, b: Any) -> bool:
    if not isinstance(a, (tuple, builtins.list)) or len(a) != 3:
        return False
    return all(_same_array(x, y) for x, y in zip(a, b, strict=True))


def _compare_int(got: Any, expected: int) -> str | None:
    if got is None:
        return "your function returned None - did you forget `return`?"
    if isinstance(got, (bool, np.bool_)):
        return f"your function returned a bool ({got}), expected an int number of bytes"
    if isinstance(got, (float, np.floating)):
        if math.isfinite(got) and float(got) == expected:
            return (f"right number ({got!r}) but a float: return an int "
                    "(use integer arithmetic: `*` and `//`, not `/`; or wrap it in int(...))")
        return f"expected {expected:,} bytes (an int), got the float {got!r}"
    if not isinstance(got, (int, np.integer)):
        return f"your function returned {type(got).__name__}, expected an int number of bytes"
    if int(got) != expected:
        ratio = int(got) / expected if expected else float("nan")
        return f"expected {expected:,} bytes, got {int(got):,}" + (
            f" ({ratio:.4g} times the right number)" if expected else "")
    return None


def _same_int(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------------
# The Exercise object
# --------------------------------------------------------------------------------------------------
@dataclass
class _Mistake:
    """A typical wrong answer: a function computing it, and what to tell the reader if it matches."""

    fn: Callable
    message: str


class Exercise:
    """An auto-checked exercise: ``check(fn)``, ``hint(n)``, ``solution()``.

    Parameters
    ----------
    name : str
        The name of the function the reader writes (and of this object in the module).
    chapter : str
        The chapter file (without ``.md``) whose exercise section uses it.
    title, task : str
        A one-line title and the full task (signature, shapes, what is checked).
    arg_names : sequence of str
        The names of ``fn``'s arguments, as used in the feedback.
    cases : callable
        ``cases() -> list[_Case]``: the seeded inputs, simple ones first.
    reference : callable
        Computes the expected result from a case's arguments (``linattn_core`` where it has the
        function).
    solution_fn : callable
        A model solution in plain numpy; ``solution()`` prints its source.
    hints : sequence of str
        Progressive hints, the last one nearly the solution.
    kind : {"array", "triple", "int"}
        What ``fn`` returns.
    mistakes : sequence of _Mistake
        Typical wrong answers, tried in order when the reader's answer is wrong.
    forbid_warnings : bool
        Fail if ``fn`` makes numpy warn (overflow, invalid value, divide by zero).
    memory_case : callable or None
        ``memory_case() -> (case, n)``: a long input on which ``fn`` must not allocate anything
        N x N (checked with ``tracemalloc``).
    difficulty : int
        1 (warm-up) to 3 (hardest).
    minutes : int
        About how long it takes a reader who has read the chapter.
    exception_hints : sequence of (str, str)
        (fragment of an exception message, advice): extra advice when ``fn`` raises.
    success : str
        A sentence printed after "Correct!": what the exercise connects to.
    extra_check : callable or None
        ``extra_check(exercise, fn) -> (problem or None, note)``, run after every case passed
        (e.g. stepping through a whole sequence); ``note`` is added to the "Correct!" line.
    """

    def __init__(self, name: str, chapter: str, title: str, task: str, arg_names: Sequence[str],
                 cases: Callable[[], builtins.list], reference: Callable, solution_fn: Callable,
                 hints: Sequence[str], *, kind: str = "array",
                 mistakes: Sequence[_Mistake] = (), forbid_warnings: bool = False,
                 memory_case: Callable | None = None, difficulty: int = 1, minutes: int = 10,
                 exception_hints: Sequence[tuple[str, str]] = (), success: str = "",
                 extra_check: Callable | None = None):
        self.name = name
        self.chapter = chapter
        self.title = title
        self.task = textwrap.dedent(task).strip()
        self.arg_names = tuple(arg_names)
        self._cases = cases
        self._reference = reference
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
        if kind == "array":
            self._compare, self._same = _compare_array, _same_array
        elif kind == "triple":
            self._compare, self._same = _compare_triple, _same_triple
        elif kind == "int":
            self._compare, self._same = _compare_int, _same_int
        else:
            raise ValueError(f"kind must be 'array', 'triple' or 'int', got {kind!r}")

    # -- public API ---------------------------------------------------------------------------
    def __call__(self, fn: Callable) -> bool:
        """Same as :meth:`check`."""
        return self.check(fn)

    def check(self, fn: Callable) -> bool:
        """Run ``fn`` on every input, print feedback, and return True if every answer is right."""
        if not callable(fn):
            got = "None" if fn is None else type(fn).__name__
            print(f"check() needs your function itself, not {got}: "
                  f"exercises.{self.name}.check({self.name}) - no parentheses after the name.")
            return False
        cases = self._cases()
        passed_unbatched = False
        for number, case in enumerate(cases, start=1):
            problem = self._run_case(fn, case, number, len(cases), passed_unbatched)
            if problem is not None:
                print(problem)
                return False
            passed_unbatched = passed_unbatched or not case.batched
        if self._memory_case is not None:
            problem = self._check_memory(fn)
            if problem is not None:
                print(problem)
                return False
        extra = " It also never built an N x N matrix." if self._memory_case else ""
        if self._extra_check is not None:
            problem, note = self._extra_check(self, fn)
            if problem is not None:
                print(problem)
                return False
            extra += note
        titles = "; ".join(c.title for c in cases)
        print(_wrap(f"Correct! Your {self.name} gives the right answer on all {len(cases)} inputs "
                    f"({titles}).{extra}", indent=""))
        if self.success:
            print(_wrap(self.success, indent=""))
        return True

    def hint(self, n: int = 1) -> None:
        """Print hint ``n`` (1, 2, ...); later hints say more."""
        total = len(self.hints)
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            print(f"hint(n) takes n = 1 to {total}, got {n!r}.")
            return
        if n > total:
            print(f"There are {total} hints for {self.name}; here is the last one. "
                  f"The full solution: exercises.{self.name}.solution()")
            n = total
        print(f"Hint {n} of {total}:")
        print(_wrap(self.hints[n - 1]))
        if n < total:
            print(f"(More: exercises.{self.name}.hint({n + 1}))")

    def solution(self) -> None:
        """Print a reference solution (plain numpy)."""
        print(self.solution_source())

    def solution_source(self) -> str:
        """The source of the reference solution, named like the reader's function."""
        src = textwrap.dedent(inspect.getsource(self.solution_fn))
        return src.replace(f"def {self.solution_fn.__name__}(", f"def {self.name}(", 1).rstrip()

    def describe(self) -> str:
        stars = "*" * self.difficulty
        return (f"exercises.{self.name} [{stars}, ~{self.minutes} min] {self.title}\n\n"
                f"{self.task}\n\nfn({', '.join(self.arg_names)}); "
                f"check(fn), hint(1..{len(self.hints)}), solution()")

    def __repr__(self) -> str:
        return f"<Exercise {self.name} ({self.chapter}.md): {self.title}>"

    def _repr_markdown_(self) -> str:
        stars = "★" * self.difficulty + "☆" * (3 - self.difficulty)
        return (f"**`exercises.{self.name}`** ({stars}, about {self.minutes} min): {self.title}\n\n"
                f"{self.task}\n\n`check(fn)` · `hint(1)` … `hint({len(self.hints)})` · "
                "`solution()`")

    # -- internals ----------------------------------------------------------------------------
    def _call(self, fn: Callable, args: tuple):
        """Call ``fn`` on copies of ``args``; return (result, exception, warnings, changed args)."""
        copies = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
        result, error = None, None
        with warnings.catch_warnings(record=True) as caught, \
                np.errstate(over="warn", divide="warn", invalid="warn", under="ignore"):
            warnings.simplefilter("always")
            try:
                result = fn(*copies)
            except Exception as exc:  # the reader's code may raise anything
                error = exc
        numeric = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        changed = [name for name, a, c in zip(self.arg_names, args, copies, strict=True)
                   if isinstance(a, np.ndarray)
                   and (a.shape != c.shape or not np.array_equal(a, c, equal_nan=True))]
        return result, error, numeric, changed

    def _run_case(self, fn: Callable, case: _Case, number: int, total: int,
                  passed_unbatched: bool) -> str | None:
        where = f"Input #{number} of {total} ({case.describe(self.arg_names)})"
        call = f"{self.name}({', '.join(self.arg_names)})"
        result, error, numeric_warnings, changed = self._call(fn, case.args)

        if error is not None:
            lines = [f"Not yet. {where}:",
                     f"  your function raised {type(error).__name__}: {error}",
                     f"  (check() calls it as {call}.)"]
            if case.batched and passed_unbatched:
                lines.append(_wrap("Likely cause: " + _BATCH_ADVICE))
            else:
                for fragment, advice in self.exception_hints:
                    if fragment.lower() in str(error).lower():
                        lines.append(_wrap(advice))
                        break
            lines.append(f"  Stuck? exercises.{self.name}.hint(1)")
            return "\n".join(lines)

        if changed:
            return f"Not yet. {where}:\n" + _wrap(
                f"your function changed its input {', '.join('`' + c + '`' for c in changed)} in "
                "place. Compute new arrays instead (e.g. `S_new = S + ...`, not `S += ...`), so "
                "the caller's arrays stay as they were.")

        expected = self._reference(*case.args)
        problem = self._compare(result, expected)
        if problem is None:
            if self.forbid_warnings and numeric_warnings:
                return (f"Not yet. {where}:\n  the values are right, but numpy warned: "
                        f"{_warning_text(numeric_warnings)}.\n" + _wrap(_WARNING_ADVICE))
            return None

        lines = [f"Not yet. {where}:", "  " + problem]
        matched = []
        for mistake in self.mistakes:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    wrong = mistake.fn(*case.args)
            except Exception:  # a mistake that cannot apply to this input
                continue
            if self._same(result, wrong):
                matched.append(mistake.message)
        diagnosis = matched[0] if matched else None
        if diagnosis is None and case.large and self._has_nonfinite(result):
            diagnosis = _STABILITY_ADVICE
        if diagnosis is None and case.batched and passed_unbatched:
            diagnosis = _BATCH_ADVICE
        got_dtype = getattr(result, "dtype", None)
        if diagnosis is None and self.kind == "array" and got_dtype is not None \
                and str(got_dtype) not in ("float64", "torch.float64"):
            diagnosis = (f"your output is {got_dtype}, not float64: keep the inputs' float64 so "
                         "the answer is exact to rounding.")
        if diagnosis:
            lines.append(_wrap("Likely cause: " + diagnosis))
        for other in matched[1:2]:  # on this input two mistakes give the same numbers
            lines.append(_wrap("Or: " + other))
        if numeric_warnings:
            lines.append(f"  numpy warned: {_warning_text(numeric_warnings)}.")
        if number > 1:
            lines.append(f"  (Inputs #1 to #{number - 1} were right.)")
        lines.append(f"  Stuck? exercises.{self.name}.hint(1)")
        return "\n".join(lines)

    @staticmethod
    def _has_nonfinite(result: Any) -> bool:
        items = result if isinstance(result, (tuple, builtins.list)) else (result,)
        for item in items:
            arr, _ = _as_array(item)
            if arr is not None and not np.isfinite(arr).all():
                return True
        return False

    def _check_memory(self, fn: Callable) -> str | None:
        case, n = self._memory_case()
        quadratic = n * n * 8  # one float64 N x N matrix
        was_tracing = tracemalloc.is_tracing()
        if not was_tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        try:
            result, error, _, _ = self._call(fn, case.args)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            if not was_tracing:
                tracemalloc.stop()
        where = f"Long input ({case.describe(self.arg_names)})"
        if error is not None:
            return f"Not yet. {where}:\n  your function raised {type(error).__name__}: {error}"
        problem = self._compare(result, self._reference(*case.args))
        if problem is not None:
            return f"Not yet. {where}:\n  {problem}"
        used = peak - base
        if used >= quadratic // 2:
            return "Almost!\n" + _wrap(
                    f"The values are right, but on a sequence of N = {n} tokens your "
                    f"function allocated {used / 2**20:.1f} MiB at its peak, about the size of an "
                    f"N x N matrix ({quadratic / 2**20:.1f} MiB in float64). The point of this form "
                    "is that nothing N x N is ever built: aggregate phi(K) and V first (S and z), "
                    "then query the aggregate.")
        return None


_BATCH_ADVICE = (
    "it works without batch dimensions but not with batch dims (2, 3). On a 4-d array `x.T` "
    "reverses *all* axes: use `np.swapaxes(x, -1, -2)` (or `x.swapaxes(-1, -2)`), sum over "
    "`axis=-1` / `axis=-2`, and index with `...` so leading dimensions pass through."
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


def _wrap(text: str, indent: str = "  ") -> str:
    """Feedback lines wrapped at 100 characters (long code lines are never broken)."""
    return "\n".join(textwrap.fill(para, width=100, initial_indent=indent, subsequent_indent=indent,
                                   break_long_words=False, break_on_hyphens=False)
                     for para in text.split("\n"))


def _warning_text(caught: builtins.list) -> str:
    messages = sorted({str(w.message) for w in caught})
    return "; ".join(messages)


# --------------------------------------------------------------------------------------------------
# Small numpy helpers for the references and the typical mistakes
# --------------------------------------------------------------------------------------------------
def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _softmax_rows(s: np.ndarray, axis: int = -1) -> np.ndarray:
    s = s - s.max(axis=axis, keepdims=True)
    w = np.exp(s)
    return w / w.sum(axis=axis, keepdims=True)


def _global_shift_softmax(s: np.ndarray) -> np.ndarray:
    w = np.exp(s - s.max())
    return w / w.sum(axis=-1, keepdims=True)


def _whole_softmax(s: np.ndarray) -> np.ndarray:
    w = np.exp(s - s.max())
    return w / w.sum()


def _row_normalise(a: np.ndarray, v: np.ndarray, eps: float | None = _EPS) -> np.ndarray:
    # a: (..., N_q, N_k) scores, v: (..., N_k, d_v); eps=None: no clamp
    den = a.sum(-1) if eps is None else np.maximum(a.sum(-1), eps)
    return (a @ v) / den[..., None]


_NO_PHI = ("you left out phi: q k^T is not the kernel (and can be negative). Apply phi to q and to k "
           "first.")


def _causal_mask(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))


# --------------------------------------------------------------------------------------------------
# softmax.md
# --------------------------------------------------------------------------------------------------
def _solution_softmax_attention(q, k, v):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)           # (..., N_q, N_k)
    scores = scores - scores.max(axis=-1, keepdims=True)       # stable: every exp(.) <= 1
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)    # each row sums to 1
    return weights @ v                                         # (..., N_q, d_v)


def _ref_softmax_attention(q, k, v):
    from linattn_core import softmax_attention as lib_softmax_attention

    return lib_softmax_attention(q, k, v)


def _cases_softmax_attention() -> builtins.list:
    cases = _attention_cases(seed=101, with_phi=False)
    rng = np.random.default_rng(102)
    cases.append(_Case("large scores (|q . k| / sqrt(d) ~ 1e3)", _qkv(rng, 6, 6, scale=30.0),
                       large=True))
    return cases


def _softmax_mistakes() -> builtins.list:
    def scaled(scale_fn):
        return lambda q, k, v: _softmax_rows(q @ _t(k) * scale_fn(q, v)) @ v

    return [
        _Mistake(scaled(lambda q, v: 1.0),
                 "you forgot the 1/sqrt(d) scale: your output matches softmax(q k^T) v. Divide the "
                 "scores by sqrt(d), where d = q.shape[-1]."),
        _Mistake(scaled(lambda q, v: 1.0 / q.shape[-1]),
                 "you scaled the scores by 1/d; the scale is 1/sqrt(d)."),
        _Mistake(scaled(lambda q, v: np.sqrt(q.shape[-1])),
                 "you multiplied the scores by sqrt(d) instead of dividing by it."),
        _Mistake(scaled(lambda q, v: 1.0 / np.sqrt(v.shape[-1])),
                 "you scaled by 1/sqrt(d_v); the scale uses the query/key dimension, "
                 "d = q.shape[-1]."),
        _Mistake(lambda q, k, v: _softmax_rows(q @ _t(k) / np.sqrt(q.shape[-1]), axis=-2) @ v,
                 "you normalised over the wrong axis (over queries, axis=-2). Each query's weights "
                 "over the keys must sum to 1: use axis=-1 with keepdims=True."),
        _Mistake(lambda q, k, v: np.exp(q @ _t(k) / np.sqrt(q.shape[-1])) @ v,
                 "you forgot to normalise: divide exp(scores) by its row sums."),
        _Mistake(lambda q, k, v: _global_shift_softmax(q @ _t(k) / np.sqrt(q.shape[-1])) @ v,
                 "you subtracted the maximum of the whole score array; subtract each row's own "
                 "maximum (axis=-1, keepdims=True). With one global shift, rows whose scores are "
                 "all far below it underflow to 0/0."),
        _Mistake(lambda q, k, v: _whole_softmax(q @ _t(k) / np.sqrt(q.shape[-1])) @ v,
                 "you normalised over the whole score matrix (a sum without axis); each row must "
                 "sum to 1: sum over axis=-1 with keepdims=True."),
        _Mistake(lambda q, k, v: np.exp(q @ _t(k) / np.sqrt(q.shape[-1])
                                        - (q @ _t(k) / np.sqrt(q.shape[-1])).max(-1, keepdims=True))
                 @ v,
                 "you subtracted the row maximum but did not divide by the row sums."),
        _Mistake(lambda q, k, v: _softmax_rows(
            np.where(_causal_mask(q.shape[-2]), q @ _t(k) / np.sqrt(q.shape[-1]), -np.inf)) @ v,
                 "you applied a causal mask, but this attention is non-causal: every query sees "
                 "every key."),
        _Mistake(lambda q, k, v: _softmax_rows(q @ _t(k) / np.sqrt(q.shape[-1])),
                 "you returned the attention weights (..., N_q, N_k); multiply them by v."),
    ]


softmax_attention = Exercise(
    name="softmax_attention",
    chapter="softmax",
    title="Softmax attention, numerically stable, with batch dimensions",
    task="""
        Write `softmax_attention(q, k, v)` for q: (..., N_q, d), k: (..., N_k, d),
        v: (..., N_k, d_v), returning (..., N_q, d_v): softmax(q k^T / sqrt(d)) v with the softmax
        over the keys. It must work with any leading batch dimensions, with N_q != N_k, and stay
        finite when the scores are around 1e3. check() compares with
        linattn_core.softmax_attention on one token, N = 7, cross-attention, batch dims (2, 3)
        and large scores.
    """,
    arg_names=("q", "k", "v"),
    cases=_cases_softmax_attention,
    reference=_ref_softmax_attention,
    solution_fn=_solution_softmax_attention,
    hints=[
        "Three steps: scores = q k^T / sqrt(d) (shape (..., N_q, N_k)); weights = softmax of each "
        "row; output = weights @ v.",
        "With batch dimensions, transpose only the last two axes: np.swapaxes(k, -1, -2). "
        "Row-wise reductions need axis=-1 and keepdims=True so they broadcast back.",
        "For stability, subtract each row's maximum before exp: "
        "scores - scores.max(axis=-1, keepdims=True). Every exp is then <= 1, and the softmax is "
        "unchanged because the constant cancels between numerator and denominator.",
    ],
    mistakes=_softmax_mistakes(),
    exception_hints=[("matmul", "Check the shapes in each product: q @ k needs k transposed over "
                               "its last two axes, (..., d, N_k).")],
    difficulty=2,
    minutes=15,
    success="The max-shift is the same trick FlashAttention's online softmax uses to process keys "
            "in blocks.",
)


def _solution_score_matrix_bytes(N, batch_heads, itemsize):
    # one N x N score matrix per (batch, head) pair, itemsize bytes per entry
    return N * N * batch_heads * itemsize


def _ref_score_matrix_bytes(N, batch_heads, itemsize):
    return int(N) * int(N) * int(batch_heads) * int(itemsize)


def _cases_score_matrix_bytes() -> builtins.list:
    return [
        _Case("one token, one head, float32", (1, 1, 4)),
        _Case("N = 7, one head, float64", (7, 1, 8)),
        _Case("N = 1024, batch 1 x 12 heads, float32", (1024, 12, 4)),
        _Case("N = 4096, batch 8 x 32 heads, bfloat16", (4096, 256, 2)),
        _Case("N = 131072, batch 1 x 64 heads, float16 (over 2**31 bytes)", (131072, 64, 2)),
    ]


def _int32(x):
    return int(np.int64(x).astype(np.int32))


score_matrix_bytes = Exercise(
    name="score_matrix_bytes",
    chapter="softmax",
    title="How many bytes do the N x N score matrices take?",
    task="""
        Write `score_matrix_bytes(N, batch_heads, itemsize)` returning, as an int, the number of
        bytes needed to hold the attention score matrices of one layer: one N x N matrix for each
        of the `batch_heads` (batch x heads) pairs, `itemsize` bytes per entry (4 for float32, 2 for
        float16/bfloat16). check() tries N from 1 to 131072.
    """,
    arg_names=("N", "batch_heads", "itemsize"),
    cases=_cases_score_matrix_bytes,
    reference=_ref_score_matrix_bytes,
    solution_fn=_solution_score_matrix_bytes,
    hints=[
        "Count entries first: how many numbers are in one N x N matrix, and how many such "
        "matrices are there?",
        "entries = N * N * batch_heads; each entry takes itemsize bytes. Keep it an int "
        "(no `/`).",
    ],
    kind="int",
    mistakes=[
        _Mistake(lambda N, b, i: N * b * i,
                 "you counted N entries per matrix; a score matrix is N x N, so N**2."),
        _Mistake(lambda N, b, i: N * N * i,
                 "you counted one matrix; there is one per (batch, head) pair: multiply by "
                 "batch_heads."),
        _Mistake(lambda N, b, i: N * N * b,
                 "you counted entries, not bytes: multiply by itemsize."),
        _Mistake(lambda N, b, i: N * N * b * i * 8,
                 "you counted bits; the answer is in bytes (itemsize is already bytes)."),
        _Mistake(lambda N, b, i: N * (N + 1) // 2 * b * i,
                 "you counted only the causal lower triangle; the full N x N matrix is stored "
                 "(the masked entries are set to -inf, not skipped)."),
        _Mistake(lambda N, b, i: 2 * N * N * b * i,
                 "you counted two matrices (scores and weights) per head; count one."),
        _Mistake(lambda N, b, i: _int32(N * N * b * i),
                 "integer overflow: your arithmetic wrapped around at 2**31, which happens with "
                 "numpy int32 values. Use Python ints (int(N) * ...)."),
        _Mistake(lambda N, b, i: N * N * b * i / 2**20,
                 "you returned MiB; return bytes."),
        _Mistake(lambda N, b, i: N * N * b * i / 1e9,
                 "you returned GB; return bytes."),
    ],
    difficulty=1,
    minutes=5,
    success="At N = 131072 that is hundreds of GiB for a single layer: why long contexts cannot "
            "materialise the scores.",
)


# --------------------------------------------------------------------------------------------------
# associative.md
# --------------------------------------------------------------------------------------------------
def _solution_kernel_attention(q, k, v, phi, eps=1e-6):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    A = phi(q) @ np.swapaxes(phi(k), -1, -2)     # (..., N_q, N_k): A[i, j] = phi(q_i) . phi(k_j)
    den = A.sum(axis=-1)                         # (..., N_q): each row's total score
    return (A @ v) / np.maximum(den, eps)[..., None]


def _ref_kernel_attention(q, k, v, phi):
    from linattn_core import kernel_attention as lib_kernel_attention

    return lib_kernel_attention(q, k, v, feature_map=_lib_phi(phi))


def _kernel_mistakes() -> builtins.list:
    mistakes = [
        _Mistake(lambda q, k, v, phi: (phi(q) @ _t(phi(k))) @ v,
                 "you forgot the normaliser: your output is the numerator sum_j "
                 "(phi(q_i) . phi(k_j)) v_j. Divide each row by sum_j phi(q_i) . phi(k_j)."),
        _Mistake(lambda q, k, v, phi: (phi(q) @ _t(phi(k)))
                 / (phi(q) @ _t(phi(k))).sum(-2, keepdims=True) @ v,
                 "you normalised the columns (axis=-2); each query's row of scores must be divided "
                 "by its own sum (axis=-1)."),
        _Mistake(lambda q, k, v, phi: _row_normalise(q @ _t(k), v),
                 _NO_PHI),
        _Mistake(lambda q, k, v, phi: _row_normalise(q @ _t(k), v, eps=None),
                 _NO_PHI),
        _Mistake(lambda q, k, v, phi: _row_normalise(phi(q) @ _t(k), v),
                 "you applied phi to the queries only: the keys need it too (the kernel is "
                 "phi(q) . phi(k); S and z are built from phi(k))."),
        _Mistake(lambda q, k, v, phi: _row_normalise(q @ _t(phi(k)), v),
                 "you applied phi to the keys only: the queries need it too (the kernel is "
                 "phi(q) . phi(k); query S and z with phi(q))."),
        _Mistake(lambda q, k, v, phi: _row_normalise(phi(q @ _t(k)), v),
                 "you applied phi to the scores q k^T; phi maps each query and each key (its last "
                 "axis has size d), and the kernel is their dot product."),
        _Mistake(lambda q, k, v, phi: _softmax_rows(q @ _t(k) / np.sqrt(q.shape[-1])) @ v,
                 "that is softmax attention; here exp(q . k / sqrt(d)) is replaced by "
                 "phi(q) . phi(k)."),
        _Mistake(lambda q, k, v, phi: _row_normalise(
            np.where(_causal_mask(q.shape[-2]), phi(q) @ _t(phi(k)), 0.0), v),
                 "you applied a causal mask; this exercise is the non-causal form (every query "
                 "sees every key)."),
        _Mistake(lambda q, k, v, phi: (phi(q) @ _t(phi(k))) @ v / k.shape[-2],
                 "you divided by the number of keys N; the normaliser is each row's own sum of "
                 "scores, sum_j phi(q_i) . phi(k_j)."),
    ]
    return mistakes


kernel_attention = Exercise(
    name="kernel_attention",
    chapter="associative",
    title="Kernel attention, the direct quadratic form",
    task="""
        Write `kernel_attention(q, k, v, phi)` for q: (..., N_q, d), k: (..., N_k, d),
        v: (..., N_k, d_v) and a feature map phi (a callable: (..., N, d) -> (..., N, d_phi)).
        Build every score A[i, j] = phi(q_i) . phi(k_j), divide each row by its sum (clamped:
        max(sum, 1e-6)) and apply the result to v: output (..., N_q, d_v). Non-causal. check()
        compares with linattn_core.kernel_attention on one token, N = 7, cross-attention, batch
        dims (2, 3) and a feature map with d_phi != d.
    """,
    arg_names=("q", "k", "v", "phi"),
    cases=lambda: _attention_cases(seed=201),
    reference=_ref_kernel_attention,
    solution_fn=_solution_kernel_attention,
    hints=[
        "It is softmax attention with exp(q . k / sqrt(d)) replaced by phi(q) . phi(k): "
        "compute phi(q) and phi(k), then all pairwise dot products.",
        "A = phi(q) @ np.swapaxes(phi(k), -1, -2) has shape (..., N_q, N_k). The output row i is "
        "sum_j A[i, j] v_j / sum_j A[i, j].",
        "return (A @ v) / np.maximum(A.sum(axis=-1), 1e-6)[..., None]  - the [..., None] makes "
        "the (..., N_q) denominators broadcast over d_v.",
    ],
    mistakes=_kernel_mistakes(),
    exception_hints=[("matmul", "Check the shapes: phi(k) must be transposed over its last two "
                               "axes, np.swapaxes(phi(k), -1, -2).")],
    difficulty=1,
    minutes=10,
    success="This is the reference: correct, but it builds an N_q x N_k matrix. The next exercise "
            "computes the same numbers without it.",
)


def _solution_associative_attention(q, k, v, phi, eps=1e-6):
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    fq, fk = phi(q), phi(k)                      # (..., N_q, d_phi), (..., N_k, d_phi)
    S = np.swapaxes(fk, -1, -2) @ v              # (..., d_phi, d_v): S = sum_j phi(k_j) v_j^T
    z = fk.sum(axis=-2)                          # (..., d_phi):      z = sum_j phi(k_j)
    num = fq @ S                                 # (..., N_q, d_v)
    den = (fq * z[..., None, :]).sum(axis=-1)    # (..., N_q): phi(q_i) . z
    return num / np.maximum(den, eps)[..., None]


def _ref_associative_attention(q, k, v, phi):
    from linattn_core import linear_attention

    return linear_attention(q, k, v, feature_map=_lib_phi(phi))


def _memory_case_attention(seed: int) -> Callable:
    def make():
        rng = np.random.default_rng(seed)
        n = 1024
        q, k, v = _qkv(rng, n, n, d=4, d_v=4)
        return _Case(f"N = {n}", (q, k, v, _elu_phi())), n

    return make


associative_attention = Exercise(
    name="associative_attention",
    chapter="associative",
    title="Linear attention by associativity: S and z first",
    task="""
        Write `associative_attention(q, k, v, phi)` with the same inputs and output as
        kernel_attention, but without building any N x N matrix: first S = phi(K)^T V
        (shape (..., d_phi, d_v)) and z = sum_j phi(k_j) (shape (..., d_phi)), then
        y_i = phi(q_i)^T S / max(phi(q_i) . z, 1e-6). check() compares with
        linattn_core.linear_attention on the same inputs as kernel_attention, and measures (with
        tracemalloc) that a 1024-token input never allocates anything N x N.
    """,
    arg_names=("q", "k", "v", "phi"),
    cases=lambda: _attention_cases(seed=301),
    reference=_ref_associative_attention,
    solution_fn=_solution_associative_attention,
    hints=[
        "Write row i of the kernel form out: sum_j (phi(q_i) . phi(k_j)) v_j. The dot product is a "
        "scalar, so phi(q_i) can be pulled out of the sum: phi(q_i)^T (sum_j phi(k_j) v_j^T).",
        "S = np.swapaxes(phi(k), -1, -2) @ v has shape (..., d_phi, d_v); z = phi(k).sum(axis=-2) "
        "has shape (..., d_phi). Neither depends on the query.",
        "numerator = phi(q) @ S; denominator = phi(q) @ z[..., None] (then drop the last axis), "
        "clamped with np.maximum(den, 1e-6); divide with [..., None].",
    ],
    mistakes=_kernel_mistakes(),
    memory_case=_memory_case_attention(302),
    exception_hints=[("matmul", "Check the shapes: S = phi(K)^T V needs phi(k) transposed over its "
                               "last two axes; phi(q) @ S then has shape (..., N_q, d_v).")],
    difficulty=2,
    minutes=15,
    success="Same numbers as the quadratic form, in O(N d_phi d_v) time and O(d_phi d_v) extra "
            "memory: that re-bracketing is all of linear attention.",
)


# --------------------------------------------------------------------------------------------------
# feature_maps.md
# --------------------------------------------------------------------------------------------------
def _solution_elu_plus_one(x):
    # x: any shape  ->  same shape, every entry > 0 (or 0 after exp underflows)
    # elu(x) + 1 = x + 1 for x > 0, exp(x) for x <= 0.
    # np.where evaluates both branches everywhere, so feed exp only values <= 0: no overflow.
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def _ref_elu_plus_one(x):
    from linattn_core import get_feature_map

    return get_feature_map("elu+1")(x)


def _cases_elu_plus_one() -> builtins.list:
    rng = np.random.default_rng(401)
    return [
        _Case("nine values around 0", (np.array([-3.0, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0,
                                                  3.0]),)),
        _Case("a (7, 4) matrix", (rng.standard_normal((7, 4)),)),
        _Case(f"batch dims {_BATCH}", (rng.standard_normal((*_BATCH, 7, 4)),), batched=True),
        _Case("large magnitudes (|x| up to 1e3)",
              (np.array([[-1000.0, -50.0, 0.0, 50.0, 1000.0], [-710.0, -1.0, 1.0, 709.0, 710.0]]),),
              large=True),
    ]


elu_plus_one = Exercise(
    name="elu_plus_one",
    chapter="feature_maps",
    title="The elu + 1 feature map, without overflow",
    task="""
        Write `elu_plus_one(x)` returning elu(x) + 1 elementwise (x + 1 for x > 0, exp(x) for
        x <= 0), for an array of any shape. It must not overflow or make numpy warn for
        |x| up to 1e3. check() compares with linattn_core.get_feature_map("elu+1") on small
        values around 0, a matrix, batch dims (2, 3) and large magnitudes.
    """,
    arg_names=("x",),
    cases=_cases_elu_plus_one,
    reference=_ref_elu_plus_one,
    solution_fn=_solution_elu_plus_one,
    hints=[
        "elu(x) = x for x > 0 and exp(x) - 1 for x <= 0. Add 1 to both branches.",
        "np.where(x > 0, a, b) picks elementwise, but computes both a and b on every element. "
        "Which branch overflows for x = 1000?",
        "Use np.exp(np.minimum(x, 0)) in the negative branch: it equals exp(x) wherever it is "
        "selected and never sees a large positive number.",
    ],
    mistakes=[
        _Mistake(lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
                 "that is elu(x), without the + 1 (and it is negative for x < 0, which a feature "
                 "map for attention must not be)."),
        _Mistake(lambda x: np.where(x > 0, x + 1, np.expm1(np.minimum(x, 0))),
                 "you added 1 only on the positive branch; for x <= 0, elu(x) + 1 = exp(x)."),
        _Mistake(lambda x: np.maximum(x, 0) + 1,
                 "that is relu(x) + 1; for x <= 0 the map is exp(x), which tends to 0."),
        _Mistake(lambda x: np.exp(np.minimum(x, 700.0)), "you used exp(x) on both branches; for "
                 "x > 0 the map is x + 1."),
        _Mistake(lambda x: x + 1, "you used x + 1 on both branches; for x <= 0 it is exp(x)."),
        _Mistake(lambda x: np.logaddexp(0, x), "that is softplus, log(1 + exp(x)), another "
                 "positive feature map; this one is elu(x) + 1."),
    ],
    forbid_warnings=True,
    difficulty=1,
    minutes=10,
    success="np.where computes both branches: guarding the discarded one is a habit worth "
            "keeping in every numerical code.",
)


def _solution_performer_features(x, projection):
    # x: (..., N, d), projection W: (m, d)  ->  (..., N, m)
    m, d = projection.shape
    x = x * d ** -0.25                                  # x' = x / d^(1/4)
    wx = x @ projection.T                               # (..., N, m): w_r . x'
    half_sq = 0.5 * np.sum(x * x, axis=-1, keepdims=True)  # (..., N, 1): |x'|^2 / 2
    return np.exp(wx - half_sq) / np.sqrt(m)


def _ref_performer_features(x, projection):
    # The formula itself; tests/test_exercises.py checks it against the library's Performer map.
    m, d = projection.shape
    xs = x * d ** -0.25
    return np.exp(xs @ projection.T - 0.5 * np.sum(xs * xs, axis=-1, keepdims=True)) / np.sqrt(m)


def _cases_performer_features() -> builtins.list:
    rng = np.random.default_rng(501)

    def w(m, d):
        return rng.standard_normal((m, d))

    return [
        _Case("small, m = 6 features, d = 4", (rng.standard_normal((5, 4)), w(6, 4))),
        _Case("one token", (rng.standard_normal((1, 4)), w(6, 4))),
        _Case("odd length (N = 7), m = 16", (rng.standard_normal((7, 4)), w(16, 4))),
        _Case(f"batch dims {_BATCH}", (rng.standard_normal((*_BATCH, 7, 4)), w(6, 4)),
              batched=True),
        _Case("d = 8, m = 3", (rng.standard_normal((5, 8)), w(3, 8))),
    ]


def _perf_variant(x, W, *, xscale=None, norm_scale=None, m_div=None, half=0.5, sign=1.0,
                  stabilise=False):
    m, d = W.shape
    xscale = d ** -0.25 if xscale is None else xscale
    norm_scale = xscale if norm_scale is None else norm_scale
    xs, xn = x * xscale, x * norm_scale
    u = sign * (xs @ W.T) - half * np.sum(xn * xn, axis=-1, keepdims=True)
    if stabilise:
        u = u - u.max(axis=-1, keepdims=True)
    return np.exp(u) / (np.sqrt(m) if m_div is None else m_div)


performer_features = Exercise(
    name="performer_features",
    chapter="feature_maps",
    title="Positive random features (Performer / FAVOR+)",
    task="""
        Write `performer_features(x, projection)` for x: (..., N, d) and a projection matrix W of
        shape (m, d), returning (..., N, m): phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m) with
        x' = x d^(-1/4) (so that phi(q) . phi(k) estimates exp(q . k / sqrt(d))). No stabiliser.
        check() compares with the formula (which the test suite checks against
        linattn_core.get_feature_map("performer", ..., stabilize=False)) on one token, N = 7,
        batch dims (2, 3), and m both larger and smaller than d.
    """,
    arg_names=("x", "projection"),
    cases=_cases_performer_features,
    reference=_ref_performer_features,
    solution_fn=_solution_performer_features,
    hints=[
        "Three ingredients per token: the m projections w_r . x' (a matrix product), the squared "
        "norm |x'|^2 (one number per token), and the constant 1/sqrt(m).",
        "Scale first: x' = x * d ** -0.25 with d = projection.shape[1]. Then x' @ projection.T "
        "has shape (..., N, m).",
        "The norm term needs keepdims=True to broadcast: "
        "0.5 * np.sum(xp * xp, axis=-1, keepdims=True) has shape (..., N, 1).",
    ],
    mistakes=[
        _Mistake(lambda x, W: _perf_variant(x, W, xscale=1.0),
                 "you forgot to scale x by d^(-1/4): with x' = x / d^(1/4) for both q and k, "
                 "their dot product carries the 1/sqrt(d) of softmax attention."),
        _Mistake(lambda x, W: _perf_variant(x, W, xscale=W.shape[1] ** -0.5),
                 "you scaled x by d^(-1/2); each of q and k gets d^(-1/4), so that together they "
                 "give 1/sqrt(d)."),
        _Mistake(lambda x, W: _perf_variant(x, W, norm_scale=1.0),
                 "the projection uses x' but the norm term uses the unscaled x: use |x'|^2 with "
                 "x' = x d^(-1/4) in both places."),
        _Mistake(lambda x, W: _perf_variant(x, W, m_div=1.0),
                 "you forgot the 1/sqrt(m) factor (it makes phi(q) . phi(k) an average over the m "
                 "features)."),
        _Mistake(lambda x, W: _perf_variant(x, W, m_div=float(W.shape[0])),
                 "you divided by m; each of phi(q) and phi(k) gets 1/sqrt(m), so that their dot "
                 "product averages over the m features."),
        _Mistake(lambda x, W: _perf_variant(x, W, m_div=np.sqrt(W.shape[1])),
                 "you divided by sqrt(d); the factor is 1/sqrt(m), with m = projection.shape[0]."),
        _Mistake(lambda x, W: _perf_variant(x, W, half=0.0),
                 "you left out the -|x'|^2 / 2 term; without it the estimate is not of "
                 "exp(q . k / sqrt(d))."),
        _Mistake(lambda x, W: _perf_variant(x, W, half=1.0),
                 "you subtracted |x'|^2; the term is |x'|^2 / 2."),
        _Mistake(lambda x, W: _perf_variant(x, W, sign=-1.0),
                 "you used exp(-W x' ...); the sign is +."),
        _Mistake(lambda x, W: _perf_variant(x, W, stabilise=True),
                 "you stabilised (subtracted the row maximum); this exercise asks for the plain, "
                 "unstabilised features."),
    ],
    exception_hints=[("matmul", "The projection W has shape (m, d): use x' @ projection.T to get "
                               "(..., N, m).")],
    difficulty=2,
    minutes=15,
    success="Every feature is positive, so the denominators of linear attention never cancel to "
            "zero, unlike trigonometric random features.",
)


# --------------------------------------------------------------------------------------------------
# causal.md
# --------------------------------------------------------------------------------------------------
def _solution_causal_cumsum(q, k, v, phi, eps=1e-6):
    # q, k: (..., N, d), v: (..., N, d_v)  ->  (..., N, d_v); token t sees tokens 0..t
    fq, fk = phi(q), phi(k)                                       # (..., N, d_phi)
    S = np.cumsum(fk[..., :, None] * v[..., None, :], axis=-3)    # (..., N, d_phi, d_v): S_t
    z = np.cumsum(fk, axis=-2)                                    # (..., N, d_phi): z_t
    num = np.einsum("...nf,...nfv->...nv", fq, S)                 # phi(q_t)^T S_t
    den = np.einsum("...nf,...nf->...n", fq, z)                   # phi(q_t) . z_t
    return num / np.maximum(den, eps)[..., None]


def _ref_causal_cumsum(q, k, v, phi):
    from linattn_core import linear_attention

    return linear_attention(q, k, v, feature_map=_lib_phi(phi), causal=True, method="cumsum")


def _causal_variant(q, k, v, phi, *, shift=0, reverse=False, normalise=True, use_phi=True,
                    axis=None):
    fq, fk = (phi(q), phi(k)) if use_phi else (q, k)
    outer = fk[..., :, None] * v[..., None, :]
    if axis is not None:  # cumsum along a wrong axis
        S, z = np.cumsum(outer, axis=axis), np.cumsum(fk, axis=axis)
    elif reverse:
        S = np.flip(np.cumsum(np.flip(outer, -3), -3), -3)
        z = np.flip(np.cumsum(np.flip(fk, -2), -2), -2)
    else:
        S, z = np.cumsum(outer, axis=-3), np.cumsum(fk, axis=-2)
        if shift:  # exclusive prefix sums: token t sees 0..t-1
            S, z = S - outer, z - fk
    num = np.einsum("...nf,...nfv->...nv", fq, S)
    if not normalise:
        return num
    den = np.einsum("...nf,...nf->...n", fq, z)
    return num / np.maximum(den, _EPS)[..., None]


def _strict_unclamped(q, k, v, phi):
    fq, fk = phi(q), phi(k)
    outer = fk[..., :, None] * v[..., None, :]
    S, z = np.cumsum(outer, axis=-3) - outer, np.cumsum(fk, axis=-2) - fk
    return np.einsum("...nf,...nfv->...nv", fq, S) / np.einsum("...nf,...nf->...n", fq, z)[
        ..., None]


def _cases_causal_cumsum() -> builtins.list:
    return _attention_cases(seed=601, cross=False)


causal_cumsum = Exercise(
    name="causal_cumsum",
    chapter="causal",
    title="Causal linear attention with prefix sums",
    task="""
        Write `causal_cumsum(q, k, v, phi)` for q, k: (..., N, d), v: (..., N, d_v), returning
        (..., N, d_v) where token t attends to tokens 0..t (itself included, so y_0 = v_0):
        S_t = sum_{j<=t} phi(k_j) v_j^T, z_t = sum_{j<=t} phi(k_j),
        y_t = phi(q_t)^T S_t / max(phi(q_t) . z_t, 1e-6). Use prefix sums (np.cumsum), no N x N
        matrix. check() compares with linattn_core.linear_attention(..., causal=True) on one
        token, N = 7, batch dims (2, 3), a feature map with d_phi != d, and measures that a
        1024-token input allocates nothing N x N.
    """,
    arg_names=("q", "k", "v", "phi"),
    cases=_cases_causal_cumsum,
    reference=_ref_causal_cumsum,
    solution_fn=_solution_causal_cumsum,
    hints=[
        "The non-causal S and z are sums over all tokens. Causal attention needs, for every t, the "
        "sum over tokens 0..t: a running (prefix) sum, which is what np.cumsum computes.",
        "Stack the outer products phi(k_j) v_j^T into an array of shape (..., N, d_phi, d_v): "
        "phi(k)[..., :, None] * v[..., None, :]. Its cumsum over the token axis (axis=-3) gives "
        "every S_t; np.cumsum(phi(k), axis=-2) gives every z_t.",
        "Contract each phi(q_t) with its own S_t: np.einsum('...nf,...nfv->...nv', phi(q), S); "
        "the denominator is np.einsum('...nf,...nf->...n', phi(q), z), clamped with "
        "np.maximum(den, 1e-6). np.cumsum includes the current token, as it should.",
    ],
    mistakes=[
        _Mistake(lambda q, k, v, phi: _causal_variant(q, k, v, phi, shift=1),
                 "your output matches a strictly-causal version: token t does not see itself. Add "
                 "the current key/value pair before answering the query (np.cumsum already "
                 "includes it; y_0 must equal v_0)."),
        _Mistake(_strict_unclamped,
                 "your output matches a strictly-causal version without the clamp: token t does "
                 "not see itself, so token 0 sees nothing and gets 0/0 = NaN. Include the current "
                 "token (y_0 = v_0)."),
        _Mistake(lambda q, k, v, phi: _ref_associative_attention(q, k, v, phi),
                 "you computed non-causal attention (every token sees the whole sequence): use "
                 "running sums, not totals."),
        _Mistake(lambda q, k, v, phi: _causal_variant(q, k, v, phi, reverse=True),
                 "your sums run backwards: token t sees tokens t..N-1. Causal means 0..t."),
        _Mistake(lambda q, k, v, phi: _causal_variant(q, k, v, phi, normalise=False),
                 "you forgot the normaliser: divide by max(phi(q_t) . z_t, eps)."),
        _Mistake(lambda q, k, v, phi: _causal_variant(q, k, v, phi, use_phi=False),
                 "you left out phi: apply the feature map to q and k first."),
        _Mistake(lambda q, k, v, phi: _causal_variant(q, k, v, phi, axis=0),
                 "you took the prefix sums over axis 0, which is the token axis only when there "
                 "are no batch dimensions: use the token axis counted from the end (axis=-3 for "
                 "the outer products, axis=-2 for phi(k))."),
    ],
    memory_case=_memory_case_attention(602),
    difficulty=3,
    minutes=20,
    success="The cumsum form stores N states of size d_phi x d_v; the recurrent form keeps one, "
            "and the chunked form sits in between - the trade-off of the next chapters.",
)


def _solution_streaming_step(S, z, q_t, k_t, v_t, phi, eps=1e-6):
    # S: (d_phi, d_v), z: (d_phi,), q_t, k_t: (d,), v_t: (d_v,)
    fq = phi(q_t[None])[0]                    # (d_phi,)  phi works on (N, d) arrays
    fk = phi(k_t[None])[0]                    # (d_phi,)
    S_new = S + np.outer(fk, v_t)             # add the current token first ...
    z_new = z + fk
    y_t = fq @ S_new / max(fq @ z_new, eps)   # ... then answer the query
    return S_new, z_new, y_t


def _ref_streaming_step(S, z, q_t, k_t, v_t, phi):
    # The recurrence of CORE_API (update, then query); tests/test_exercises.py checks it against
    # linattn_core.LinearAttentionState and causal linear_attention.
    fq, fk = phi(q_t[None])[0], phi(k_t[None])[0]
    S_new = S + fk[:, None] * v_t[None, :]
    z_new = z + fk
    return S_new, z_new, (fq @ S_new) / max(float(fq @ z_new), _EPS)


def _cases_streaming_step() -> builtins.list:
    rng = np.random.default_rng(701)

    def state_after(n, d, d_v, phi):
        k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d_v))
        fk = phi(k)
        return fk.T @ v, fk.sum(0)

    def token(d, d_v):
        return rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal(d_v)

    elu = _elu_phi()
    perf = _performer_phi(4, 6, 702)
    return [
        _Case("first token: S = 0, z = 0", (np.zeros((4, 3)), np.zeros(4), *token(4, 3), elu)),
        _Case("after 5 tokens", (*state_after(5, 4, 3, elu), *token(4, 3), elu)),
        _Case("d = 7, d_v = 5, after 6 tokens", (*state_after(6, 7, 5, elu), *token(7, 5), elu)),
        _Case("a feature map with d_phi != d", (*state_after(4, 4, 3, perf), *token(4, 3), perf)),
    ]


def _step_variant(S, z, q_t, k_t, v_t, phi, *, query_first=False, normalise=True, phi_k=True,
                  phi_q=True, phi_z=True, transpose=False):
    fq = phi(q_t[None])[0] if phi_q else q_t
    fk = phi(k_t[None])[0] if phi_k else k_t
    fz = phi(k_t[None])[0] if phi_z else k_t
    S_new = S + (np.outer(v_t, fk) if transpose else np.outer(fk, v_t))
    z_new = z + fz
    S_q, z_q = (S, z) if query_first else (S_new, z_new)
    num = fq @ S_q
    y = num / max(float(fq @ z_q), _EPS) if normalise else num
    return S_new, z_new, y


def _stream_whole_sequence(ex: Exercise, fn: Callable) -> tuple[str | None, str]:
    """Step ``fn`` through a 7-token sequence from the empty state; compare with the library."""
    from linattn_core import linear_attention

    rng = np.random.default_rng(703)
    n, d, d_v = 7, 4, 3
    q, k, v = _qkv(rng, n, n, d=d, d_v=d_v)
    phi = _elu_phi()
    S, z = np.zeros((d, d_v)), np.zeros(d)
    ys = []
    for t in range(n):
        result, error, _, _ = ex._call(fn, (S, z, q[t], k[t], v[t], phi))
        if error is not None:
            return (f"Not yet. Stepping through a sequence of {n} tokens from S = 0, z = 0: at "
                    f"token {t} your function raised {type(error).__name__}: {error}"), ""
        S, z, y = result
        ys.append(np.asarray(y, dtype=np.float64))
    expected = linear_attention(q, k, v, feature_map=_lib_phi(phi), causal=True)
    problem = _array_difference(np.stack(ys), expected, what="the stacked outputs y_0..y_6")
    if problem is not None:
        return (f"Not yet. Stepping through a sequence of {n} tokens from S = 0, z = 0 and "
                f"comparing with causal linear_attention:\n  {problem}"), ""
    return None, (f" Stepped through {n} tokens from the empty state, it reproduces causal "
                  "linear_attention.")


streaming_step = Exercise(
    name="streaming_step",
    chapter="causal",
    title="One step of the recurrent (streaming) form",
    task="""
        Write `streaming_step(S, z, q_t, k_t, v_t, phi)` for the state S: (d_phi, d_v),
        z: (d_phi,) and one token q_t, k_t: (d,), v_t: (d_v,). Return (S_new, z_new, y_t):
        S_new = S + phi(k_t) v_t^T, z_new = z + phi(k_t), then
        y_t = phi(q_t)^T S_new / max(phi(q_t) . z_new, 1e-6). phi works on (N, d) arrays, so
        apply it as phi(x[None])[0]. Do not modify S or z in place. check() tries the empty
        state, states after a few tokens, d != d_v and a feature map with d_phi != d, then steps
        your function through a 7-token sequence and compares with causal linear_attention.
    """,
    arg_names=("S", "z", "q_t", "k_t", "v_t", "phi"),
    cases=_cases_streaming_step,
    reference=_ref_streaming_step,
    solution_fn=_solution_streaming_step,
    hints=[
        "Two moves, in this order: add the current token to the state, then answer the query "
        "from the new state.",
        "The token's contribution to S is the outer product np.outer(phi(k_t), v_t), shape "
        "(d_phi, d_v); to z it is phi(k_t).",
        "y_t = phi(q_t) @ S_new / max(phi(q_t) @ z_new, 1e-6). Return the three as a tuple.",
    ],
    kind="triple",
    mistakes=[
        _Mistake(lambda *a: _step_variant(*a, query_first=True),
                 "you answered the query before adding the current token (y_t comes from the old "
                 "S and z). Causal attention includes the token itself: update first, then "
                 "query. On the empty state the answer must be v_t."),
        _Mistake(lambda *a: _step_variant(*a, normalise=False),
                 "you forgot the normaliser: divide phi(q_t)^T S_new by max(phi(q_t) . z_new, "
                 "eps)."),
        _Mistake(lambda *a: _step_variant(*a, transpose=True),
                 "the outer product is the wrong way round: S is (d_phi, d_v), so add "
                 "np.outer(phi(k_t), v_t)."),
        _Mistake(lambda *a: _step_variant(*a, phi_k=False, phi_z=False),
                 "you added k_t to the state instead of phi(k_t)."),
        _Mistake(lambda *a: _step_variant(*a, phi_z=False),
                 "you added k_t to z instead of phi(k_t)."),
        _Mistake(lambda *a: _step_variant(*a, phi_q=False),
                 "you queried with q_t instead of phi(q_t)."),
    ],
    exception_hints=[("broadcast", "Check the shapes: S is (d_phi, d_v), so the token's outer "
                                   "product must be np.outer(phi(k_t), v_t); np.outer(v_t, ...) is "
                                   "the wrong way round. phi(k_t[None])[0] has shape (d_phi,).")],
    difficulty=2,
    minutes=15,
    success="A fixed-size state, updated once per token: this is what makes linear attention an "
            "RNN at inference time.",
    extra_check=_stream_whole_sequence,
)


# --------------------------------------------------------------------------------------------------
# tradeoffs.md
# --------------------------------------------------------------------------------------------------
def _solution_clamped_normalise(num, den, eps):
    # num: (..., N, d_v), den: (..., N)  ->  (..., N, d_v)
    # Clamp: denominators below eps become eps; those above are left exactly as they are.
    return num / np.maximum(den, eps)[..., None]


def _ref_clamped_normalise(num, den, eps):
    return num / np.maximum(den, eps)[..., None]


def _cases_clamped_normalise() -> builtins.list:
    rng = np.random.default_rng(801)
    return [
        _Case("denominators around 1", (rng.standard_normal((5, 3)), rng.uniform(0.5, 2.0, 5),
                                        1e-6)),
        _Case("one token", (rng.standard_normal((1, 3)), np.array([0.7]), 1e-6)),
        _Case("zero, tiny and negative denominators",
              (rng.standard_normal((6, 3)), np.array([2.0, 0.0, 1e-9, -0.5, 1e-3, 1e-6]), 1e-6)),
        _Case("N = d_v = 4", (rng.standard_normal((4, 4)), rng.uniform(0.5, 2.0, 4), 1e-6)),
        _Case(f"batch dims {_BATCH}, eps = 0.1",
              (rng.standard_normal((*_BATCH, 7, 3)), rng.uniform(-0.5, 2.0, (*_BATCH, 7)), 0.1),
              batched=True),
    ]


clamped_normalise = Exercise(
    name="clamped_normalise",
    chapter="tradeoffs",
    title="Normalising with a clamped denominator",
    task="""
        Write `clamped_normalise(num, den, eps)` for numerators num: (..., N, d_v) and
        denominators den: (..., N), returning num / max(den, eps), the denominator broadcast over
        d_v. A denominator at or above eps is used exactly as it is; one below (zero, tiny or
        negative) is replaced by eps. check() includes zero, tiny and negative denominators,
        N = d_v, batch dims (2, 3) and eps = 0.1.
    """,
    arg_names=("num", "den", "eps"),
    cases=_cases_clamped_normalise,
    reference=_ref_clamped_normalise,
    solution_fn=_solution_clamped_normalise,
    hints=[
        "np.maximum(den, eps) is the elementwise max of an array and a number.",
        "den has one value per row of num; den[..., None] has shape (..., N, 1) and broadcasts "
        "over the d_v columns.",
    ],
    mistakes=[
        _Mistake(lambda n, d, e: n / (d + e)[..., None],
                 "you added eps (den + eps) instead of clamping (max(den, eps)). Adding changes "
                 "every output a little, and does not protect a negative denominator near -eps; "
                 "the clamp changes nothing when den >= eps."),
        _Mistake(lambda n, d, e: n / d[..., None],
                 "you did not clamp: a zero denominator gives inf or NaN. Use max(den, eps)."),
        _Mistake(lambda n, d, e: n / np.minimum(d, e)[..., None],
                 "you used the minimum; the clamp is max(den, eps)."),
        _Mistake(lambda n, d, e: n / np.maximum(np.abs(d), e)[..., None],
                 "you took |den|: a negative denominator must be clamped up to eps, not flipped."),
        _Mistake(lambda n, d, e: n / np.maximum(d, e),
                 "you divided without [..., None], so numpy broadcast den along the d_v axis "
                 "(it only worked because N = d_v). Row i must be divided by den[i]."),
        _Mistake(lambda n, d, e: n / np.maximum(d, _EPS)[..., None],
                 "you used a fixed 1e-6; use the eps argument."),
        _Mistake(lambda n, d, e: np.where((d > e)[..., None], n / np.where(d > e, d, 1.0)[
            ..., None], 0.0),
                 "you set the rows with small denominators to 0; divide them by eps instead."),
    ],
    exception_hints=[("broadcast", "den has shape (..., N) and num (..., N, d_v): add an axis, "
                                   "den[..., None].")],
    difficulty=1,
    minutes=10,
    success="max(den, eps) leaves every healthy row bit-for-bit unchanged: that is why the "
            "quadratic and associative forms agree to rounding for any eps.",
)


def _solution_kv_cache_bytes(t, d, d_v, itemsize):
    # after t tokens the cache holds t keys (d numbers each) and t values (d_v numbers each)
    return t * (d + d_v) * itemsize


def _ref_kv_cache_bytes(t, d, d_v, itemsize):
    return int(t) * (int(d) + int(d_v)) * int(itemsize)


def _cases_kv_cache_bytes() -> builtins.list:
    return [
        _Case("one token, d = 4, d_v = 3, float64", (1, 4, 3, 8)),
        _Case("7 tokens, d = 64, d_v = 32, float16", (7, 64, 32, 2)),
        _Case("empty cache (t = 0)", (0, 64, 64, 2)),
        _Case("4096 tokens, d = d_v = 128, bfloat16", (4096, 128, 128, 2)),
        _Case("a million tokens, d = 128, d_v = 256, float32", (10**6, 128, 256, 4)),
    ]


kv_cache_bytes = Exercise(
    name="kv_cache_bytes",
    chapter="tradeoffs",
    title="How much memory does a KV cache hold after t tokens?",
    task="""
        Write `kv_cache_bytes(t, d, d_v, itemsize)` returning, as an int, the bytes that the KV
        cache of one attention head holds after t tokens: every key (d numbers) and every value
        (d_v numbers), itemsize bytes each. check() uses d != d_v, t = 0 and t = 10**6.
    """,
    arg_names=("t", "d", "d_v", "itemsize"),
    cases=_cases_kv_cache_bytes,
    reference=_ref_kv_cache_bytes,
    solution_fn=_solution_kv_cache_bytes,
    hints=[
        "What does the cache keep for each past token? (Softmax attention must look at all of "
        "them again for the next query.)",
        "Per token: a key with d entries and a value with d_v entries.",
    ],
    kind="int",
    mistakes=[
        _Mistake(lambda t, d, dv, i: t * d * i, "you counted only the keys; the cache keeps the "
                 "values too."),
        _Mistake(lambda t, d, dv, i: t * dv * i, "you counted only the values; the cache keeps the "
                 "keys too."),
        _Mistake(lambda t, d, dv, i: 2 * t * d * i,
                 "you assumed d_v = d (2 t d); keys have d entries and values d_v."),
        _Mistake(lambda t, d, dv, i: 2 * t * dv * i,
                 "you assumed d = d_v (2 t d_v); keys have d entries and values d_v."),
        _Mistake(lambda t, d, dv, i: t * (d + dv),
                 "you counted entries, not bytes: multiply by itemsize."),
        _Mistake(lambda t, d, dv, i: t * (d + dv) * i * 8, "you counted bits; return bytes."),
        _Mistake(lambda t, d, dv, i: (t + 1) * (d + dv) * i, "off by one: after t tokens the cache "
                 "holds t of them."),
        _Mistake(lambda t, d, dv, i: t * t * (d + dv) * i,
                 "you counted t**2; the cache grows linearly: one key and one value per token."),
        _Mistake(lambda t, d, dv, i: t * d * dv * i,
                 "you multiplied d and d_v; the key and the value are stored side by side, so add "
                 "them."),
        _Mistake(lambda t, d, dv, i: d * dv * i,
                 "that is the size of the linear-attention state S (d x d_v), which does not grow "
                 "with t; the KV cache stores every token."),
    ],
    difficulty=1,
    minutes=5,
    success="It grows by (d + d_v) * itemsize bytes per token, forever; the linear-attention "
            "state stays at d_phi * (d_v + 1) numbers.",
)


# --------------------------------------------------------------------------------------------------
# Index
# --------------------------------------------------------------------------------------------------
EXERCISES: dict[str, Exercise] = {
    ex.name: ex
    for ex in (softmax_attention, score_matrix_bytes, kernel_attention, associative_attention,
               elu_plus_one, performer_features, causal_cumsum, streaming_step,
               clamped_normalise, kv_cache_bytes)
}

_CHAPTER_ORDER = ("softmax", "associative", "feature_maps", "causal", "tradeoffs")


def _list_exercises() -> None:
    """Print every exercise, grouped by chapter, with its difficulty and time."""
    for chapter in _CHAPTER_ORDER:
        print(f"{chapter}.md")
        for ex in EXERCISES.values():
            if ex.chapter == chapter:
                stars = ("*" * ex.difficulty).ljust(3)
                print(f"  exercises.{ex.name:<22} {stars} ~{ex.minutes:>2} min  {ex.title}")
    print("Each has .check(fn), .hint(n) and .solution().")


list = _list_exercises  # the documented name is exercises.list() (shadows the builtin here only)
