"""Reading what the reader's function returned, and comparing it with the expected answer.

Nothing here may raise on any value a function can return: every conversion that could fail is
guarded, and a value that cannot be read becomes a sentence saying why.
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any

import numpy as np

# Inputs are float64 and every correct answer differs from the library only by rounding (relative
# 1e-15 or so), while every typical mistake is off by far more than this.
RTOL = 1e-8
ATOL = 1e-10
# Relative errors below this are the size of float32 (or half-precision) rounding, not a mistake
# in the formula: the feedback says so instead of guessing a cause.
SMALL_REL = 1e-3
LOW_PRECISION = ("float16", "bfloat16", "float32")


def safe_str(obj: Any, limit: int = 300) -> str:
    """str(obj), shortened, that never raises (an exception's __str__ may itself raise)."""
    try:
        text = str(obj)
    except BaseException:
        text = f"<{type(obj).__name__} that cannot be printed>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def type_name(obj: Any) -> str:
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    if module.startswith("torch"):
        return "torch tensor" if cls.__name__ == "Tensor" else f"torch {cls.__name__}"
    if module == "numpy" and cls.__name__ == "ndarray":
        return "numpy array"
    return cls.__name__


def _is_torch(obj: Any) -> bool:
    return (type(obj).__module__ or "").startswith("torch") and hasattr(obj, "detach")


def dtype_label(obj: Any) -> str | None:
    """'float32', 'bfloat16', ... for an array or tensor (torch's without the prefix)."""
    try:
        dtype = getattr(obj, "dtype", None)
        return None if dtype is None else str(dtype).removeprefix("torch.")
    except BaseException:
        return None


def _torch_to_numpy(t: Any) -> tuple[np.ndarray | None, str | None]:
    import torch

    t = t.detach()
    if t.is_complex():
        return None, f"your function returned a complex tensor ({dtype_label(t)}); the answer is real"
    if t.dtype == torch.bool:
        return None, "your function returned a tensor of booleans, expected numbers"
    if t.layout != torch.strided:
        t = t.to_dense()
    return t.to(device="cpu", dtype=torch.float64).numpy(), None


GENERATOR = ("your function returned a generator (or iterator), not an answer: did you write "
             "`yield` instead of `return`, or return a generator expression?")


def is_generator(got: Any) -> bool:
    """A generator or iterator (never iterated here: it could be endless)."""
    try:
        return inspect.isgenerator(got) or (hasattr(got, "__next__") and hasattr(got, "__iter__")
                                            and not hasattr(got, "shape"))
    except BaseException:  # hasattr on a hostile object
        return False


def to_array(got: Any) -> tuple[np.ndarray | None, str | None]:
    """The reader's return value as a float64 array, or (None, why it cannot be used)."""
    try:
        return _to_array(got)
    except BaseException as exc:
        return None, (f"check() could not read the {type_name(got)} your function returned "
                      f"({type(exc).__name__}: {safe_str(exc, 120)}); return a numpy array")


def _to_array(got: Any) -> tuple[np.ndarray | None, str | None]:
    if got is None:
        return None, "your function returned None"
    if isinstance(got, (bool, np.bool_)):
        return None, f"your function returned a bool ({got}), expected an array of numbers"
    if is_generator(got):
        return None, GENERATOR
    if isinstance(got, tuple):
        return None, (f"your function returned a tuple of {len(got)} items; return only the "
                      "output array")
    if isinstance(got, numbers.Number) and not isinstance(got, np.generic):
        return None, f"your function returned a single number ({type(got).__name__}), not an array"
    if _is_torch(got):
        return _torch_to_numpy(got)
    if isinstance(got, list):
        arr = np.asarray(got, dtype=np.float64)  # raises for ragged or non-numeric lists
        return None, (f"your function returned a Python list (shape {arr.shape} as an array); "
                      "return a numpy array, e.g. np.asarray(...), or keep numpy operations "
                      "throughout")
    arr = np.asarray(got)
    kind = arr.dtype.kind
    if kind == "c":
        return None, (f"your function returned complex values ({arr.dtype}); the answer is real "
                      "(a square root or power of a negative number?)")
    if kind == "b":
        return None, "your function returned an array of booleans, expected numbers"
    if kind == "O":
        return None, ("your function returned a numpy array of Python objects (dtype=object): "
                      "arrays of different shapes stacked together, or numbers too large for "
                      "numpy?")
    if kind == "V":  # an extension float type (ml_dtypes' bfloat16) converts, a record does not
        try:
            return arr.astype(np.float64), None
        except (TypeError, ValueError):
            pass
    if kind not in "iuf":
        return None, f"your function returned an array of dtype {arr.dtype}, expected numbers"
    return arr.astype(np.float64), None


def fmt_index(idx: tuple) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """max |got - expected| / max |expected| over the finite entries (inf if nothing to scale)."""
    err = np.abs(got - expected)
    err = err[np.isfinite(err)]
    scale = np.abs(expected[np.isfinite(expected)])
    if err.size == 0:
        return math.inf
    top = float(scale.max()) if scale.size else 0.0
    return float(err.max()) / top if top > 0 else (0.0 if float(err.max()) == 0 else math.inf)


def array_difference(got: np.ndarray, expected: np.ndarray, what: str = "output") -> str | None:
    """None if ``got`` matches ``expected``; otherwise a precise description of the difference."""
    if got.shape != expected.shape:
        text = f"wrong shape of {what}: expected {tuple(expected.shape)}, got {tuple(got.shape)}"
        if got.ndim >= 2 and got.shape == expected.shape[:-2] + expected.shape[:-3:-1] \
                and np.allclose(got, np.swapaxes(expected, -1, -2), rtol=RTOL, atol=ATOL):
            text += " - it is the right answer transposed (last two axes swapped)"
        return text
    bad_finite = ~np.isfinite(got) & np.isfinite(expected)
    if bad_finite.any():
        idx = tuple(np.argwhere(bad_finite)[0])
        kind = "NaN" if np.isnan(got[idx]) else "inf"
        return (f"{what} contains NaN or inf in {int(bad_finite.sum())} of {got.size} entries "
                f"(first at index {fmt_index(idx)}: {kind}, expected {expected[idx]:.10g})")
    close = np.isclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    if close.all():
        return None
    idx = tuple(np.argwhere(~close)[0])
    err = np.abs(got - expected)
    err = np.where(np.isfinite(err), err, 0.0)
    rel_here = abs(got[idx] - expected[idx]) / abs(expected[idx]) if expected[idx] != 0 \
        else math.inf
    text = (f"wrong values in {what}: {int((~close).sum())} of {got.size} entries differ; "
            f"first at index {fmt_index(idx)}: expected {expected[idx]:.10g}, got {got[idx]:.10g}"
            f" (relative error {rel_here:.1e}); largest error |got - expected| = {err.max():.2e}, "
            f"{relative_error(got, expected):.1e} of the largest |expected|")
    if got.ndim >= 2 and got.shape[-1] == got.shape[-2] \
            and np.allclose(got, np.swapaxes(expected, -1, -2), rtol=RTOL, atol=ATOL):
        text += ". It is the right answer transposed (last two axes swapped)"
    return text


def small_error_note(got: Any, got_arr: np.ndarray, expected: np.ndarray) -> str | None:
    """A diagnosis for an answer that is off only by rounding-sized amounts, else None."""
    if got_arr.shape != expected.shape or not np.isfinite(got_arr).all():
        return None
    rel = relative_error(got_arr, expected)
    label = dtype_label(got)
    if label in LOW_PRECISION:
        if rel < SMALL_REL:
            return (f"your output is {label}, and it agrees with the answer to relative "
                    f"{rel:.1e}: that is {label} rounding. The check needs float64 accuracy "
                    "(relative 1e-8): keep the inputs' float64 throughout.")
        return (f"your output is {label} (keep the inputs' float64), and its error "
                f"(relative {rel:.1e}) is larger than {label} rounding explains: there is "
                "another mistake too.")
    if rel < SMALL_REL:
        return (f"the error is small (relative {rel:.1e}). If part of your computation ran in "
                "float32 (np.float32, torch's default dtype), keep float64 throughout; if not, "
                "look for a small systematic change (an eps added instead of clamped, a "
                "constant slightly off).")
    return None


def same_array(a: Any, b: Any) -> bool:
    """Loose match used to recognise a typical mistake (NaN matches NaN)."""
    a_arr, _ = to_array(a)
    b_arr, _ = to_array(b)
    if a_arr is None or b_arr is None or a_arr.shape != b_arr.shape:
        return False
    return bool(np.allclose(a_arr, b_arr, rtol=RTOL, atol=ATOL, equal_nan=True))


def compare_array(got: Any, expected: np.ndarray) -> str | None:
    arr, problem = to_array(got)
    if problem:
        return problem
    return array_difference(arr, expected)


TRIPLE = ("S_new", "z_new", "y_t")


def compare_triple(got: Any, expected: tuple) -> str | None:
    if got is None:
        return "your function returned None"
    if is_generator(got):
        return GENERATOR
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        what = (f"a {type(got).__name__} of length {len(got)}" if isinstance(got, (tuple, list))
                else f"a {type_name(got)}")
        return f"expected a tuple (S_new, z_new, y_t) of three arrays, got {what}"
    for name, g, e in zip(TRIPLE, got, expected, strict=True):
        arr, problem = to_array(g)
        if problem:
            return f"{name}: {problem}"
        diff = array_difference(arr, e, what=name)
        if diff:
            return diff
    return None


def same_triple(a: Any, b: Any) -> bool:
    if not isinstance(a, (tuple, list)) or len(a) != 3:
        return False
    return all(same_array(x, y) for x, y in zip(a, b, strict=True))


def read_number(got: Any, expected: str) -> tuple[int | float | None, str | None]:
    """The reader's number as a Python ``int`` or ``float``, or ``(None, why it is not one)``.

    The one reading every number exercise uses, so that an answer gets the same verdict whatever
    spelling of a number it comes in: Python ints and floats, numpy integer and float scalars and
    0-d numpy arrays of them. Integer types give an ``int``, float types a ``float``; a bool, an
    array with axes, a tensor or anything else is refused, ``expected`` saying what was wanted.
    """
    if got is None:
        return None, "your function returned None"
    if is_generator(got):
        return None, GENERATOR
    if isinstance(got, (bool, np.bool_)):
        return None, f"your function returned a bool ({got}), expected {expected}"
    if isinstance(got, np.ndarray):
        if got.ndim == 0 and got.dtype.kind in "iuf":
            got = got[()]
        else:
            text = (f"your function returned a numpy array of shape {tuple(got.shape)} (dtype "
                    f"{got.dtype}), expected {expected}")
            if got.size == 1 and got.dtype.kind in "iuf":
                text += ": `x.item()` is the number in a one-element array"
            return None, text
    if isinstance(got, (int, np.integer)):
        return int(got), None
    if isinstance(got, (float, np.floating)):
        return float(got), None
    return None, f"your function returned a {type_name(got)}, expected {expected}"


def _as_float(value: int | float) -> float:
    """A number as a float (an int too large for one as inf)."""
    if isinstance(value, int) and abs(value).bit_length() >= 1000:
        return math.inf if value > 0 else -math.inf
    return float(value)


def compare_int(got: Any, expected: int, unit: str = "bytes") -> str | None:
    """None if ``got`` is the int ``expected``, else what is wrong (``unit``: what is counted)."""
    value, problem = read_number(got, f"an int number of {unit}")
    if problem:
        return problem
    if isinstance(value, float):
        if math.isfinite(value) and value == expected:
            return (f"right number ({value!r}) but a float: return an int "
                    "(use integer arithmetic: `*` and `//`, not `/`; or wrap it in int(...))")
        return f"expected {expected:,} {unit} (an int), got the float {value!r}"
    if value == expected:
        return None
    if value < 0:
        return (f"expected {expected:,} {unit}, got a negative number ({_int_text(value)}): a "
                f"count of {unit} cannot be negative (an integer that wrapped around?)")
    text = f"expected {expected:,} {unit}, got {_int_text(value)}"
    if expected and value.bit_length() < 1000:
        text += f" ({value / expected:.4g} times the right number)"
    return text


def right_number_as_float(got: Any, expected: Any) -> bool:
    """Whether ``got`` is the expected int in a float type: a problem of type, not of formula."""
    value, _ = read_number(got, "")
    return isinstance(value, float) and isinstance(expected, int) and value == expected


def _int_text(value: int) -> str:
    """An int with thousands separators; a huge one by its size (str() refuses 4300+ digits)."""
    if abs(value).bit_length() <= 200:
        return f"{value:,}"
    return f"an integer of about {int(abs(value).bit_length() * math.log10(2))} digits"


def same_int(a: Any, b: Any) -> bool:
    """Whether two answers are the same number (read as :func:`read_number` reads them)."""
    va, _ = read_number(a, "")
    vb, _ = read_number(b, "")
    if va is None or vb is None:
        return False
    if isinstance(va, int) and isinstance(vb, int):
        return va == vb
    return _as_float(va) == _as_float(vb)


def compare_number(got: Any, expected: float) -> str | None:
    """A real number (int or float, numpy scalars included) equal to ``expected`` to rounding."""
    value, problem = read_number(got, "a number (a float)")
    if problem:
        return problem
    value = _as_float(value)
    if math.isfinite(value) and math.isclose(value, expected, rel_tol=RTOL, abs_tol=ATOL):
        return None
    text = f"expected {expected:.10g}, got {value:.10g}"
    if expected and math.isfinite(value):
        text += f" ({value / expected:.4g} times the right number)"
    return text


def same_number(a: Any, b: Any) -> bool:
    """Whether two answers are the same number to rounding (read as :func:`read_number` reads them)."""
    va, _ = read_number(a, "")
    vb, _ = read_number(b, "")
    if va is None or vb is None:
        return False
    return math.isclose(_as_float(va), _as_float(vb), rel_tol=RTOL, abs_tol=ATOL)
