"""Running the reader's function on the inputs: copies, the watch for library calls, memory.

- ``fn`` runs on its own deep copies of each input; afterwards they are compared with the
  originals to report an input changed in place;
- every expected answer is computed *before* ``fn`` first runs, from deep copies of the arguments
  (feature-map objects included), so nothing ``fn`` does (changing its inputs, redrawing a
  Performer, reseeding a global generator) can change what it is compared with;
- ``fn`` must compute the answer itself: while it runs, a profile hook records every call into the
  library's attention code (and, in graded work, the kit's own solutions), however it was imported;
- where an exercise measures memory, ``fn`` runs on two lengths and fails if its peak grows like N^2.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
import tracemalloc
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import compare, grading
from .feedback import wrap
from .inputs import Case

# The library's attention code: an answer that calls any of it has not computed the answer itself.
# (The feature maps are not here: every exercise with a `phi` argument is meant to call it.)
LIBRARY = ("linattn_core.attention", "linattn_core.linear", "linattn_core.linear_grad",
           "linattn_core.decay", "linattn_core.delta", "linattn_core.streaming", "linattn_core.recall",
           "linattn_core.fast", "linattn_core.lm")
# In summative mode the kit's own solutions and references are refused too (in practice they are one
# solution() away anyway) ...
KIT = ("linattn_core.tools.exercises",)
# ... except the checker itself and the feature-map wrapper it hands to fn.
_ALLOWED = tuple(f"linattn_core.tools.exercises.{m}"
                 for m in ("inputs", "checker", "compare", "running", "feedback", "grading"))


# The two lengths of the memory check: the longer one twice the shorter.
MEMORY_LENGTHS = (1024, 2048)


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



class Running:
    """Calling the reader's function (a mixin of :class:`~.checker.Exercise`)."""

    def expected(self, case: Case) -> Any:
        """The reference answer, from deep copies of the case's arguments, warnings silenced."""
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return self.reference(*case.fresh_args())

    def call(self, fn: Callable, args: tuple) -> _Call:
        """Call ``fn`` on deep copies of ``args``: result, exception, numeric warnings, changes."""
        copies = copy.deepcopy(args)
        out = _Call()
        forbidden = LIBRARY + self.forbidden + (KIT if grading.is_summative() else ())
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


