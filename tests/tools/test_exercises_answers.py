"""Whatever an answer returns, raises or changes, check() reports it and never passes it: odd return
values, exceptions, torch tensors of any dtype, inputs changed in place, global state, the
feedback's digits and positions, clamps, byte counts in floating point, numbers in any spelling.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from _exercises import (
    ALL,
    ARRAY,
    CAUSAL_FORMS,
    IDS,
    SOL,
    WITH_ARRAYS,
    WITH_PHI,
    run_check,
    sm_unstable,
    sw,
)

import linattn_core
from linattn_core.tools import exercises


# --------------------------------------------------------------------------------------------------
# Adversarial return values: check() never raises and never passes them
# --------------------------------------------------------------------------------------------------
class Hostile:
    """An object every operation of which raises."""

    def _boom(self, *args, **kwargs):
        raise RuntimeError("hostile object")

    __array__ = __len__ = __iter__ = __eq__ = __bool__ = __float__ = __int__ = __index__ = _boom
    __str__ = __repr__ = __format__ = __getitem__ = __hash__ = _boom
    __complex__ = _boom


class BadArray:
    def __array__(self, *args, **kwargs):
        raise ValueError("no array for you")


def _ragged(*args):
    return [[1.0, 2.0], [3.0]]


WEIRD = {
    "generator_expression": lambda *a: (x for x in range(3)),
    "iterator": lambda *a: iter([1.0, 2.0]),
    "object": lambda *a: object(),
    "hostile_object": lambda *a: Hostile(),
    "array_raises": lambda *a: BadArray(),
    "string": lambda *a: "the answer",
    "bytes": lambda *a: b"\x00\x01",
    "dict": lambda *a: {"y": 1.0},
    "set": lambda *a: {1.0, 2.0},
    "ellipsis": lambda *a: ...,
    "huge_int": lambda *a: 10**400,
    "int_beyond_str_limit": lambda *a: 10**5000,
    "huge_negative_int": lambda *a: -(10**400),
    "negative_int": lambda *a: -5,
    "nan": lambda *a: float("nan"),
    "inf": lambda *a: float("inf"),
    "complex": lambda *a: complex(1, 2),
    "true": lambda *a: True,
    "numpy_bool": lambda *a: np.bool_(False),
    "string_array": lambda *a: np.array(["a", "b"]),
    "object_array": lambda *a: np.array([object(), None]),
    "datetime": lambda *a: np.datetime64("2024-01-01"),
    "function": lambda *a: (lambda: 0),
    "class": lambda *a: int,
    "ragged_list": _ragged,
    "empty_array": lambda *a: np.empty((0,)),
    "empty_tuple": lambda *a: (),
    "tuple_of_hostiles": lambda *a: (Hostile(), Hostile(), Hostile()),
    "huge_uint64": lambda *a: np.uint64(2**64 - 1),
    "int8_overflowed": lambda *a: np.int8(-128),
}


@pytest.mark.parametrize("ex", ALL, ids=IDS)
@pytest.mark.parametrize("what", list(WEIRD))
def test_weird_return_values_never_raise(ex, what, capsys):
    ok, out = run_check(ex, WEIRD[what], capsys)
    assert not ok, out
    assert out.startswith("Not yet"), out
    assert "Traceback" not in out


def _gen_solution(ex):
    def fn(*args):
        yield ex.solution_fn(*args)
    return fn


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_yield_instead_of_return(ex, capsys):
    ok, out = run_check(ex, _gen_solution(ex), capsys)
    assert not ok
    assert "generator" in out and "yield" in out


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_list_and_tuple_answers(ex, capsys):
    ok, out = run_check(ex, lambda *a: ex.solution_fn(*a).tolist(), capsys)
    assert not ok and "Python list" in out and "np.asarray" in out
    ok, out = run_check(ex, lambda *a: (ex.solution_fn(*a), ex.solution_fn(*a)), capsys)
    assert not ok and "tuple of 2 items" in out


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
@pytest.mark.parametrize(("dtype", "message"), [(np.complex128, "complex values"),
                                                (np.bool_, "booleans"),
                                                (np.float16, "float16"),
                                                (object, "Python objects"),
                                                (np.int64, "Not yet")])
def test_numpy_dtypes_of_the_answer(ex, dtype, message, capsys):
    ok, out = run_check(ex, lambda *a: np.asarray(ex.solution_fn(*a)).astype(dtype), capsys)
    assert not ok and message in out, out


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_nan_answers(ex, capsys):
    ok, out = run_check(ex, lambda *a: np.full_like(ex.solution_fn(*a), np.nan), capsys)
    assert not ok and "NaN or inf" in out

    def one_nan(*a):
        y = ex.solution_fn(*a).copy()
        y.flat[-1] = np.nan
        return y

    ok, out = run_check(ex, one_nan, capsys)
    assert not ok and "NaN or inf in 1 of" in out


@pytest.mark.parametrize("ex", [e for e in ARRAY if e.name != "elu_plus_one"],
                         ids=[e.name for e in ARRAY if e.name != "elu_plus_one"])
def test_transposed_answer_is_named(ex, capsys):
    ok, out = run_check(ex, lambda *a: sw(ex.solution_fn(*a)), capsys)
    assert not ok and "transposed" in out, out


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_float32_answer_is_told_apart_from_a_wrong_formula(ex, capsys):
    ok, out = run_check(ex, lambda *a: ex.solution_fn(*a).astype(np.float32), capsys)
    assert not ok
    assert "float32" in out and "rounding" in out and "relative error" in out, out
    # the digits shown tell the two numbers apart
    m = re.search(r"expected (\S+), got (\S+) \(relative error", out)
    assert m and m.group(1) != m.group(2), out
    ok, out = run_check(ex, lambda *a: (ex.solution_fn(*a) * 1.5).astype(np.float32), capsys)
    assert not ok and "larger than float32 rounding explains" in out, out


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_small_systematic_error_is_not_called_a_mistake_it_is_not(ex, capsys):
    ok, out = run_check(ex, lambda *a: ex.solution_fn(*a) * (1 + 3e-7), capsys)
    assert not ok
    assert "the error is small (relative 3.0e-07)" in out, out
    assert "Likely cause: you" not in out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
@pytest.mark.parametrize("error", [ValueError("bad value"), ZeroDivisionError("division by zero"),
                                   MemoryError(), StopIteration(), GeneratorExit(),
                                   SystemExit(3), NotImplementedError("todo")],
                         ids=lambda e: type(e).__name__)
def test_every_exception_is_reported(ex, error, capsys):
    def fn(*args):
        raise error

    ok, out = run_check(ex, fn, capsys)
    assert not ok and f"raised {type(error).__name__}" in out, out
    if isinstance(error, SystemExit):
        assert "exit()" in out


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("cannot print me")


class NotAnException(BaseException):
    pass


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_odd_exceptions_are_reported(ex, capsys):
    def unprintable(*args):
        raise Unprintable()

    def base(*args):
        raise NotAnException("below Exception")

    def recursive(*args):
        return recursive(*args)

    for fn, name in [(unprintable, "Unprintable"), (base, "NotAnException"),
                     (recursive, "RecursionError")]:
        ok, out = run_check(ex, fn, capsys)
        assert not ok and f"raised {name}" in out, out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_keyboard_interrupt_stops_check(ex, capsys):
    def fn(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ex.check(fn)

# --------------------------------------------------------------------------------------------------
# torch answers: any dtype, grad, device-free
# --------------------------------------------------------------------------------------------------
try:
    import torch
except ImportError:  # the numpy checks still run without torch
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


TORCH_BAD = ["float32", "bfloat16", "float16", "complex128", "bool", "int64", "uint8"]


@needs_torch
@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_torch_answers_of_every_dtype(ex, capsys):
    def as_torch(dtype, grad=False):
        def fn(*args):
            y = torch.from_numpy(np.array(ex.solution_fn(*args), order="C")).to(dtype)
            return y.requires_grad_() if grad else y
        return fn

    ok, out = run_check(ex, as_torch(torch.float64, grad=True), capsys)
    assert ok, out  # the right numbers in float64, as a tensor that requires grad
    for name in TORCH_BAD:
        ok, out = run_check(ex, as_torch(getattr(torch, name)), capsys)
        assert not ok and out.startswith("Not yet"), (name, out)
    ok, out = run_check(ex, as_torch(torch.bfloat16), capsys)
    assert "bfloat16" in out, out


@needs_torch
def test_torch_answers_for_the_other_kinds(capsys):
    ex = exercises.tradeoffs.kv_cache_bytes
    ok, out = run_check(ex, lambda *a: torch.tensor(ex.solution_fn(*a)), capsys)
    assert not ok and "expected an int number of bytes" in out
    step = exercises.causal.streaming_step

    def triple(dtype):
        return lambda *a: tuple(torch.from_numpy(np.asarray(x)).to(dtype)
                                for x in step.solution_fn(*a))

    assert run_check(step, triple(torch.float64), capsys)[0]
    ok, out = run_check(step, triple(torch.bfloat16), capsys)
    assert not ok and "Not yet" in out


@needs_torch
def test_torch_quadratic_memory_is_seen(capsys):
    def torch_quadratic(q, k, v, phi):
        q, k, v = (torch.from_numpy(x) for x in (q, k, v))
        A = phi(q) @ phi(k).transpose(-1, -2)                  # (..., N, N) in torch
        return (A @ v / A.sum(-1, keepdim=True).clamp_min(1e-6)).numpy()

    def torch_mask(q, k, v, phi):
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool).tril()       # N x N booleans, unused
        return SOL["causal_cumsum_mine"](q, k, v, phi) + 0 * int(mask.sum())

    for ex, fn in [(exercises.associative.associative_form, torch_quadratic),
                   (exercises.causal.prefix_sums, torch_mask)]:
        ok, out = run_check(ex, fn, capsys)
        assert not ok and "Almost!" in out and "N x N" in out, out


def test_numpy_boolean_mask_is_seen(capsys):
    def with_mask(q, k, v, phi):
        mask = np.tril(np.ones((q.shape[-2], q.shape[-2]), dtype=bool))  # N x N, unused
        return SOL["causal_cumsum_mine"](q, k, v, phi) + 0 * mask.sum()

    ok, out = run_check(exercises.causal.prefix_sums, with_mask, capsys)
    assert not ok and "Almost!" in out and "N x N" in out


# --------------------------------------------------------------------------------------------------
# Nothing the function does changes what it is compared with
# --------------------------------------------------------------------------------------------------
def _mutate_all(args):
    for a in args:
        if isinstance(a, np.ndarray):
            a[...] = 0.0


@pytest.mark.parametrize("ex", WITH_ARRAYS, ids=[e.name for e in WITH_ARRAYS])
def test_mutating_inputs_after_answering_is_caught(ex, capsys):
    def fn(*args):
        out = ex.solution_fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        _mutate_all(args)
        return out

    ok, out = run_check(ex, fn, capsys)
    assert not ok and "changed its input" in out, out


@pytest.mark.parametrize("ex", WITH_ARRAYS, ids=[e.name for e in WITH_ARRAYS])
def test_mutating_inputs_then_answering_on_them_is_caught(ex, capsys):
    def fn(*args):
        for a in args:
            if isinstance(a, np.ndarray):
                a *= 2.0
        return ex.solution_fn(*args)

    ok, out = run_check(ex, fn, capsys)
    assert not ok and "changed its input" in out, out


@pytest.mark.parametrize("ex", WITH_PHI + [exercises.causal.streaming_step],
                         ids=[e.name for e in WITH_PHI] + ["streaming_step"])
def test_redrawing_the_performer_is_caught(ex, capsys):
    def fn(*args):
        phi = args[ex.arg_names.index("phi")]
        if hasattr(phi, "redraw"):
            phi.redraw(seed=12345)  # a new projection for this call
        return ex.solution_fn(*args)

    ok, out = run_check(ex, fn, capsys)
    assert not ok and "changed the feature map `phi`" in out, out


@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_reseeding_global_generators_changes_nothing(ex, capsys):
    def fn(*args):  # the legacy global generator is what a reader's code might reseed
        np.random.seed(0)  # noqa: NPY002
        np.random.standard_normal(100)  # noqa: NPY002
        if torch is not None:
            torch.manual_seed(0)
        return ex.solution_fn(*args)

    state = np.random.get_state()  # noqa: NPY002
    torch_state = None if torch is None else torch.random.get_rng_state()
    try:
        ok, out = run_check(ex, fn, capsys)
    finally:
        np.random.set_state(state)  # noqa: NPY002
        if torch is not None:
            torch.random.set_rng_state(torch_state)
    assert ok, out


LIBRARY = ["softmax_attention", "kernel_attention", "linear_attention", "get_feature_map"]


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_patching_the_library_does_not_change_the_expected_answer(ex, capsys, monkeypatch):
    def fn(*args):
        for name in LIBRARY:  # make the library agree with this wrong answer
            monkeypatch.setattr(linattn_core, name, lambda *a, **k: np.zeros(3))
        return np.zeros_like(ex.solution_fn(*args))

    ok, out = run_check(ex, fn, capsys)
    assert not ok and "Not yet" in out, out


@pytest.mark.parametrize("ex", ARRAY, ids=[e.name for e in ARRAY])
def test_views_of_the_inputs_are_not_answers(ex, capsys):
    ok, out = run_check(ex, lambda *a: a[-2] if ex.arg_names[-1] == "phi" else a[0], capsys)
    assert not ok and "Not yet" in out


def test_check_restores_nothing_global(capsys):
    # check() leaves numpy's error state, warning filters and tracemalloc as they were, even when
    # the function changes them
    import tracemalloc
    import warnings

    def rude(q, k, v):
        np.seterr(all="raise")
        warnings.simplefilter("error")
        return SOL["softmax_attention_mine"](q, k, v)

    before, filters = np.geterr(), list(warnings.filters)
    run_check(exercises.associative.associative_form, SOL["associative_attention"], capsys)
    run_check(exercises.softmax.stable_attention, sm_unstable, capsys)
    run_check(exercises.softmax.stable_attention, rude, capsys)
    assert np.geterr() == before
    assert list(warnings.filters) == filters
    assert not tracemalloc.is_tracing()


# --------------------------------------------------------------------------------------------------
# Feedback: digits, position, and no diagnosis a degenerate input cannot support
# --------------------------------------------------------------------------------------------------
def test_wrong_values_report_position_and_size(capsys):
    def off_in_one_place(q, k, v):
        out = SOL["softmax_attention_mine"](q, k, v)
        if out.shape[-2] >= 7:  # wrong only from the third input (N = 7) on
            out[..., 6, 1] += 0.25
        return out

    ok, out = run_check(exercises.softmax.stable_attention, off_in_one_place, capsys)
    assert not ok
    assert "Input #3 of 8" in out and "first at index [6, 1]" in out
    assert "largest error |got - expected| = 2.50e-01" in out
    assert re.search(r"expected -?\d\.\d{9}\d*, got -?\d\.\d{9}", out), out
    assert "Inputs #1 to #2 were right" in out
    assert "Likely cause" not in out  # a one-off error matches no typical mistake


def test_wrong_shape_names_both_shapes(capsys):
    def squeezed(q, k, v):
        return SOL["softmax_attention_mine"](q, k, v)[..., 0]

    ok, out = run_check(exercises.softmax.stable_attention, squeezed, capsys)
    assert not ok
    assert "expected (5, 3), got (5,)" in out


def test_one_token_ambiguity_lists_every_cause(capsys):
    # With one key, every weighting of the keys gives v: a softmax that is wrong only on one token
    # must not be blamed on any one softmax mistake.
    def wrong_on_one_token(q, k, v):
        out = SOL["softmax_attention_mine"](q, k, v)
        return out * 2 if q.shape[-2] == 1 else out

    ok, out = run_check(exercises.softmax.stable_attention, wrong_on_one_token, capsys)
    assert not ok and "Input #2 of 8 (one token" in out
    assert "Likely cause" not in out and "cannot tell" not in out


def test_batch_advice_only_when_a_slice_is_right(capsys):
    ex = exercises.softmax.stable_attention
    batched = next(c for c in ex.cases() if c.batch_ndim == 2)
    first = batched.args[0].flat[0]

    def wrong_on_its_first_slice(q, k, v):  # wrong on the batch and on its slice [0, 0]
        out = SOL["softmax_attention_mine"](q, k, v)
        return out + 1 if q.flat[0] == first else out

    ok, out = run_check(ex, wrong_on_its_first_slice, capsys)
    assert not ok and "batch dims (2, 3)" in out
    assert "right on one slice" not in out

    def wrong_only_batched(q, k, v):
        out = SOL["softmax_attention_mine"](q, k, v)
        return out + 1 if q.ndim > 2 else out

    ok, out = run_check(ex, wrong_only_batched, capsys)
    assert not ok and "right on one slice" in out

    def raises_on_its_first_slice(q, k, v):
        if q.flat[0] == first:
            raise ValueError("something unrelated to batches")
        return SOL["softmax_attention_mine"](q, k, v)

    ok, out = run_check(ex, raises_on_its_first_slice, capsys)
    assert not ok and "raised ValueError" in out
    assert "works without batch dimensions" not in out


def test_structured_arrays_are_not_numbers(capsys):
    ex = exercises.softmax.stable_attention
    ok, out = run_check(ex, lambda q, k, v: np.zeros((5, 3), dtype=[("a", "f8"), ("b", "i4")]),
                        capsys)
    assert not ok and "expected numbers" in out


# --------------------------------------------------------------------------------------------------
# Clamps: |den| is not den, and no clamp at all is caught wherever the task computes one
# --------------------------------------------------------------------------------------------------
CLAMPED = ["kernel_attention_mine", "associative_attention", "causal_cumsum_mine", "chunked_causal",
           "streaming_step", "decay_step"]


def _denominators(ex, case):
    """phi(q_t) . z_t of every query of a case (the state's z for the one-step exercises)."""
    a = dict(zip(ex.arg_names, case.args, strict=False))
    phi = a["phi"]
    if "q_t" in a:
        g = a.get("g", 1.0)
        z_new = g * a["z"] + phi(a["k_t"][None])[0]
        return np.array([phi(a["q_t"][None])[0] @ z_new])
    fq, fk = phi(a["q"]), phi(a["k"])
    if ex.name in CAUSAL_FORMS:
        return np.einsum("...nf,...nf->...n", fq, np.cumsum(fk, -2))
    return fq @ fk.sum(-2)[..., None]


@pytest.mark.parametrize("name", CLAMPED)
def test_clamp_cases_have_zero_tiny_and_negative_denominators(name):
    ex = exercises.get(name)
    dens = np.concatenate([_denominators(ex, c).ravel() for c in ex.cases()])
    assert (dens == 0).any() and ((dens > 0) & (dens < 1e-6)).any(), name
    negative = dens[dens < 0]
    assert negative.size and (negative <= -0.1).all(), name  # |den| clamps far from den
    assert not ((np.abs(dens - 1e-6) < 1e-9) & (dens != 0)).any()  # nothing on the clamp's edge


def _abs_clamp(name):
    """The task's solution with np.maximum(np.abs(den), eps): right wherever den >= 0."""
    def fn(*args):
        real_maximum = np.maximum
        builtin_max = max

        def abs_maximum(a, b, *rest, **kw):
            return real_maximum(np.abs(a), b, *rest, **kw)

        def abs_max(a, b):
            return builtin_max(abs(a), b)

        sol = SOL[name]
        saved = sol.__globals__["np"]

        class AbsNumpy:
            def __getattr__(self, attr):
                return abs_maximum if attr == "maximum" else getattr(saved, attr)

        sol.__globals__["np"], sol.__globals__["max"] = AbsNumpy(), abs_max
        try:
            return sol(*args)
        finally:
            sol.__globals__["np"] = saved
            del sol.__globals__["max"]
    return fn


@pytest.mark.parametrize("name", CLAMPED + ["clamped_normalize"])
def test_clamping_the_absolute_denominator_fails_and_is_named(name, capsys):
    ok, out = run_check(exercises.get(name), _abs_clamp(name), capsys)
    assert not ok, out
    assert "clamped |den| instead of den" in out or "you took |den|" in out, out


# --------------------------------------------------------------------------------------------------
# Byte counts: only exact integer arithmetic passes
# --------------------------------------------------------------------------------------------------
BYTES = ["score_matrix_bytes", "kv_cache_bytes", "model_state_bytes"]


def _float_product(dtype):
    def count(*args):
        out = dtype(1)
        for a in args[:-1]:
            out = out * dtype(a)
        return out
    return count


def float32_answer(name):
    count = _float_product(np.float32)
    return {"score_matrix_bytes": lambda N, b, i: int(count(N, N, b, i, None)),
            "kv_cache_bytes": lambda t, d, dv, i: int(count(t, d + dv, i, None)),
            "model_state_bytes": lambda L, H, f, dv, i: int(count(L, H, f, dv + 1, i, None))}[name]


def float64_answer(name):
    return {"score_matrix_bytes": lambda N, b, i: int(float(N) * N * b * i),
            "kv_cache_bytes": lambda t, d, dv, i: int(float(t) * (d + dv) * i),
            "model_state_bytes": lambda L, H, f, dv, i: int(float(L) * H * f * (dv + 1) * i)}[name]


@pytest.mark.parametrize("name", BYTES)
@pytest.mark.parametrize("answer", [float32_answer, float64_answer], ids=["float32", "float64"])
def test_byte_counts_in_floating_point_fail(name, answer, capsys):
    ex = exercises.get(name)
    assert any(answer(name)(*c.args) != ex.expected(c) for c in ex.cases())  # a case tells
    ok, out = run_check(ex, answer(name), capsys)
    assert not ok and "computed the count in floating point" in out, out


# --------------------------------------------------------------------------------------------------
# Numbers: one reading for every number exercise
# --------------------------------------------------------------------------------------------------
NUMBER = [ex for ex in ALL if ex.kind in ("int", "number")]

SPELLINGS = {
    "python": lambda x: x,
    "numpy_scalar": lambda x: np.int64(x) if isinstance(x, int) else np.float64(x),
    "zero_d_array": lambda x: np.array(x),
}


def _spelled(fn, how):
    def wrapped(*args):
        out = fn(*args)
        return SPELLINGS[how](out) if isinstance(out, (int, float)) and not isinstance(out, bool) \
            else out
    return wrapped


@pytest.mark.parametrize("ex", NUMBER, ids=[e.name for e in NUMBER])
@pytest.mark.parametrize("how", list(SPELLINGS))
def test_every_spelling_of_a_number_gets_the_same_verdict(ex, how, capsys):
    answers = [ex.solution_fn] + [m.fn for m in ex.mistakes]
    answers.append(lambda *a: float(ex.solution_fn(*a)))  # the right number as a float
    for fn in answers:
        plain = run_check(ex, fn, capsys)
        spelled = run_check(ex, _spelled(fn, how), capsys)
        assert spelled == plain, (how, plain[1], spelled[1])


@pytest.mark.parametrize("ex", NUMBER, ids=[e.name for e in NUMBER])
def test_arrays_with_axes_are_not_numbers(ex, capsys):
    ok, out = run_check(ex, lambda *a: np.array([ex.solution_fn(*a)]), capsys)
    assert not ok and "numpy array of shape (1,)" in out and "x.item()" in out, out
