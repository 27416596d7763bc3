"""Tests of linattn_core.tools.exercises that hold for every exercise: every solution passes, every
registered mistake fails with its diagnosis, adversarial answers never make check() raise or mislead,
answers that call the library (or, in graded work, the kit) are refused, graded mode holds, and the
chapters' exercise cells and the instructors page agree with the kit. Each chapter's own wrong
answers and references are in test_exercises_<chapter>.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from _exercises import (
    ALL,
    ARRAY,
    ATTENTION,
    BOOK,
    CAUSAL_FORMS,
    CHAPTER_PATHS,
    IDS,
    NO_DENOMINATOR,
    ROOT,
    SOL,
    WITH_ARRAYS,
    WITH_PHI,
    cc_strict,
    resolve,
    run_check,
    sm_unstable,
    sw,
)

import linattn_core
from linattn_core import (
    get_feature_map,
    linear_attention,
)
from linattn_core.tools import exercises


# --------------------------------------------------------------------------------------------------
# Names, the package layout and the solutions
# --------------------------------------------------------------------------------------------------
def test_paths_by_chapter():
    found = {}
    for ex in ALL:
        found.setdefault(ex.chapter, set()).add(ex.path)
        assert resolve(ex.path) is ex
        assert exercises.get(ex.name) is ex
    assert found == CHAPTER_PATHS



def toc_pages() -> set[str]:
    """Every page _toc.yml lists, as its file's stem under book/ (``book/causal`` -> ``causal``)."""
    def files(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("file", "root") and isinstance(value, str):
                    yield value
                else:
                    yield from files(value)
        elif isinstance(node, list):
            for item in node:
                yield from files(item)

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return {Path(f).with_suffix("").name for f in files(toc) if f.startswith("book/")}



def test_toc_pages_are_the_book():
    # the checks below mean something only if the table of contents was read
    assert {"intro", "softmax", "causal", "beyond_decay", "beyond_delta", "beyond_tour", "training",
            "kernel", "instructors"} <= toc_pages()
    assert "beyond" not in toc_pages()



@pytest.mark.parametrize("ex", [*ALL, *exercises.OPEN.values()],
                         ids=[*IDS, *exercises.OPEN])
def test_every_exercise_names_a_page_of_the_book(ex):
    """``Exercise.chapter`` and ``OpenExercise.chapter`` are pages that exist and are in the book."""
    assert (BOOK / f"{ex.chapter}.md").is_file(), f"{ex.chapter}.md is no file in book/"
    assert ex.chapter in toc_pages(), f"{ex.chapter} is not listed in _toc.yml"



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_every_exercise_is_checked_in_its_chapter(ex):
    text = (BOOK / f"{ex.chapter}.md").read_text(encoding="utf-8")
    assert f"{ex.path}.check({ex.fn_name})" in text, f"{ex.chapter}.md does not check {ex.path}"



@pytest.mark.parametrize("label", list(exercises.OPEN))
def test_every_open_exercise_is_in_its_chapter(label):
    ex = exercises.OPEN[label]
    text = (BOOK / f"{ex.chapter}.md").read_text(encoding="utf-8")
    block = re.search(rf"```{{exercise}} ([^\n]*)\n:label: {re.escape(label)}\n", text)
    assert block, f"{ex.chapter}.md has no exercise labelled {label}"
    assert block.group(1).strip() == ex.title, f"{label}: the chapter calls it {block.group(1)!r}"
    assert ex.rubric and ex.points > 0, f"{label} has no rubric"
    from linattn_core.tools import course

    assert course.model_answer(label).strip(), f"{label} has no model answer in the teacher's file"



def test_package_docstring_lists_every_exercise():
    for ex in ALL:
        assert re.search(rf"{re.escape(ex.path)}\s+{ex.name}\n", exercises.__doc__), ex.path



def _load_drawing():
    spec = importlib.util.spec_from_file_location("draw_imports", ROOT / "scripts" / "draw_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module



def library_names() -> tuple[set[str], set[str]]:
    """What a reader can import from the library: its core API, and every module's name.

    The core API is the package's ``__all__``, each core module's ``__all__`` and every public
    function and class a core module defines (``linear.causal_cumsum`` too, which ``__all__``
    leaves out); the modules are every module and subpackage of ``linattn_core``, tools included.
    """
    draw = _load_drawing()
    api = set(linattn_core.__all__)
    for name, tier in draw.tiers().items():
        if tier != "core":
            continue
        module = importlib.import_module(name)
        api |= set(module.__all__)
        api |= {n for n, obj in vars(module).items() if not n.startswith("_")
                and (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == name}
    modules = {part for name in draw.modules() for part in name.split(".")[1:]}  # folders too
    return api, modules



def test_library_names_see_the_core_api_and_the_modules():
    # the check below means something only if these sets hold what a reader imports
    api, modules = library_names()
    assert {"softmax_attention", "kernel_attention", "linear_attention", "LinearAttentionState",
            "decayed_linear_attention", "causal_cumsum", "recall_errors"} <= api
    assert {"attention", "linear", "feature_maps", "performer", "decay", "streaming", "fast", "lm",
            "tools", "exercises", "softmax"} <= modules



def test_no_exercise_is_named_like_the_library_a_module_or_a_builtin():
    """Neither an exercise's name (``get(name)``, the function the reader writes) nor its attribute
    (``exercises.<chapter>.<attribute>``) hides a name the reader imports."""
    import builtins

    api, modules = library_names()
    taken = api | modules | set(dir(builtins))
    for ex in ALL:
        attribute = ex.path.rsplit(".", 1)[-1]
        assert ex.name not in taken, f"the exercise {ex.name} is named like the library's {ex.name}"
        assert attribute not in taken, f"{ex.path} is named like the library's {attribute}"
        assert ex.name == ex.fn_name, f"{ex.path}: get({ex.name!r}) checks {ex.fn_name}"



def test_star_import_shadows_no_library_function_and_no_builtin():
    import builtins

    namespace: dict = {}
    exec("from linattn_core.tools.exercises import *", namespace)
    names = set(namespace) - {"__builtins__"}
    assert names == set(exercises.__all__)
    api, modules = library_names()
    assert not names & (set(dir(builtins)) | api | modules)
    for ex in ALL:
        assert ex.name not in names



def test_exercises_are_reached_by_chapter_or_by_name(capsys):
    assert exercises.get("causal_cumsum_mine") is exercises.causal.prefix_sums
    assert "softmax_attention" not in exercises.__all__ and "list" not in exercises.__all__
    exercises.catalogue()
    assert "exercises.causal.prefix_sums" in capsys.readouterr().out
    with pytest.raises(AttributeError):
        exercises.causal_cumsum  # noqa: B018  (no second spelling at the top)
    with pytest.raises(KeyError, match="no exercise named"):
        exercises.get("no_such_exercise")



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_solution_passes(ex, capsys):
    ok, out = run_check(ex, ex.solution_fn, capsys)
    assert ok, out
    assert out.startswith("Correct!"), out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_solution_printed_is_the_tested_function(ex, capsys):
    ex.solution()
    src = capsys.readouterr().out
    assert src.startswith(f"def {ex.fn_name}("), src[:80]
    namespace = {"np": np}
    exec(src, namespace)  # the printed text is a working solution on its own
    ok, out = run_check(ex, namespace[ex.fn_name], capsys)
    assert ok, out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_calling_the_exercise_is_check(ex, capsys):
    assert ex(ex.solution_fn)
    assert "Correct!" in capsys.readouterr().out



def test_check_result_is_truthy_only_when_right_and_displays_nothing_more(capsys):
    ex = exercises.tradeoffs.kv_cache_bytes
    good, bad = ex.check(ex.solution_fn), ex.check(lambda t, d, d_v, i: 0)
    capsys.readouterr()
    assert good and not bad
    assert good.passed is True and bad.passed is False
    assert "True" not in repr(good) and "False" not in repr(bad)
    assert good._ipython_display_() is None  # the notebook shows the printed feedback only
    with pytest.raises(AssertionError):
        assert bad



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_stub_gets_a_friendly_message(ex, capsys):
    def stub(*args):
        ...  # the unsolved template cell

    ok, out = run_check(ex, stub, capsys)
    assert not ok
    assert f"{ex.fn_name} returns None" in out and "in place of the `...` line" in out
    assert "False" not in out and "Traceback" not in out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_exception_is_caught_and_reported(ex, capsys):
    def broken(*args):
        raise KeyError("oops in my code")

    ok, out = run_check(ex, broken, capsys)
    assert not ok
    assert "raised KeyError" in out and "oops in my code" in out
    assert f"{ex.fn_name}({', '.join(ex.arg_names)})" in out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_not_a_function(ex, capsys):
    for value in (None, 3, "softmax", ex.solution_fn(*ex.cases()[0].args)):
        ok, out = run_check(ex, value, capsys)
        assert not ok
        assert "needs your function itself" in out and f"{ex.path}.check({ex.fn_name})" in out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_hints_are_progressive_and_bounded(ex, capsys):
    assert len(ex.hints) >= 2
    texts = []
    for n in range(1, len(ex.hints) + 1):
        ex.hint(n)
        out = capsys.readouterr().out
        assert out.startswith(f"Hint {n} of {len(ex.hints)}:"), out
        texts.append(out)
    assert len(set(texts)) == len(texts)
    ex.hint(len(ex.hints) + 5)
    out = capsys.readouterr().out
    assert "here is the last one" in out and f"{ex.path}.solution()" in out
    for bad in (0, -1, 1.5, True, "1"):
        ex.hint(bad)
        assert "hint(n) takes n = 1 to" in capsys.readouterr().out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_feedback_is_deterministic(ex, capsys):
    def wrong(*args):
        out = ex.solution_fn(*args)
        if isinstance(out, tuple):
            return (out[0], out[1], out[2] * 1.5)
        return out * 3 + 1

    first = run_check(ex, wrong, capsys)
    second = run_check(ex, wrong, capsys)
    assert first == second
    assert not first[0]
    assert "Not yet" in first[1]



def test_catalogue_prints_every_exercise_by_chapter(capsys):
    exercises.catalogue()
    out = capsys.readouterr().out
    for chapter, paths in CHAPTER_PATHS.items():
        assert f"{chapter}.md" in out
        for path in paths:
            assert path in out
    positions = [out.index(f"{c}.md") for c in ["softmax", "associative", "feature_maps", "causal",
                                                "tradeoffs", "beyond_delta", "beyond_tour"]]
    assert positions == sorted(positions)



def test_markdown_repr_describes_the_task():
    md = exercises.associative.associative_form._repr_markdown_()
    assert "exercises.associative.associative_form" in md and "S = phi(K)^T V" in md



MISTAKES = [(ex, i) for ex in ALL for i in range(len(ex.mistakes))]



@pytest.mark.parametrize(("ex", "i"), MISTAKES, ids=[f"{ex.name}-{i}" for ex, i in MISTAKES])
def test_every_registered_mistake_fails_and_is_named(ex, i, capsys):
    # no typical mistake is dead (right on every input), and each one gets its own diagnosis, or,
    # where numpy refuses its shapes, the advice for that exception
    mistake = ex.mistakes[i]
    ok, out = run_check(ex, mistake.fn, capsys)
    assert not ok, out
    assert " ".join(mistake.message.split()) in out or (
        "raised" in out and any(" ".join(advice.split()) in out
                                for _, advice in ex.exception_hints)), out



# --------------------------------------------------------------------------------------------------
# Every rule a task states is exercised: an answer that breaks only that rule fails
# --------------------------------------------------------------------------------------------------
def test_the_cases_contain_what_the_tasks_promise():
    for ex in ATTENTION:
        titles = [c.title for c in ex.cases()]
        assert any(c.args[0].shape[-2] == 1 for c in ex.cases()), (ex.name, titles)  # one token
        assert any(c.args[0].shape[-1] not in (4, 8, 16, 32, 64) for c in ex.cases()), ex.name
        if ex.name not in CAUSAL_FORMS:  # causal forms: N_q = N_k
            assert any(c.args[0].shape[-2] != c.args[1].shape[-2] for c in ex.cases()), ex.name
    for ex in WITH_PHI:
        if ex.name in NO_DENOMINATOR:
            continue
        # relu features with a denominator exactly 0 and one in (0, eps)
        dens = []
        for case in ex.cases():
            q, k, phi = case.args[0], case.args[1], case.args[ex.arg_names.index("phi")]
            dens.append(phi(q) @ phi(k).sum(-2)[..., None] if ex.name not in CAUSAL_FORMS
                        else np.einsum("...nf,...nf->...n", phi(q), np.cumsum(phi(k), -2)))
        assert any((d == 0).any() for d in dens), ex.name
        assert any(((d > 0) & (d < 1e-6)).any() for d in dens), ex.name



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
# The chapters' exercise cells: stubs show feedback, solutions assert, every name resolves
# --------------------------------------------------------------------------------------------------
CALL = re.compile(r"(exercises(?:\.\w+)+)\.(check|hint|solution)\(")



def _code_cells(text):
    return re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", text, flags=re.S)



def _solution_blocks(text):
    return re.findall(r"````\{solution-start\}.*?````\{solution-end\}", text, flags=re.S)



CHAPTERS = sorted({ex.chapter for ex in ALL})



@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_exercise_cells(chapter):
    text = (BOOK / f"{chapter}.md").read_text(encoding="utf-8")
    paths = {m.group(1) for m in CALL.finditer(text)}
    expected = {ex.path for ex in ALL if ex.chapter == chapter}
    assert expected <= paths, (chapter, expected - paths)
    for path in paths:
        assert isinstance(resolve(path), exercises.Exercise), path
    solutions = _solution_blocks(text)
    for cell in _code_cells(text):
        for line in cell.splitlines():
            if ".check(" not in line:
                continue
            in_solution = any(cell in block for block in solutions)
            if in_solution:  # a wrong solution must fail the build
                assert line.startswith("assert ") and line.split("(")[0].endswith(".check"), line
            else:  # a stub's check shows feedback; asserting it would fail the build
                assert not line.startswith("assert") and not line.rstrip().endswith(";"), line



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_the_chapters_own_solution_passes_check(ex, capsys):
    """The solution a chapter shows passes the same check (the book's build asserts it too)."""
    import ast

    text = (BOOK / f"{ex.chapter}.md").read_text(encoding="utf-8")
    cells = [cell for block in _solution_blocks(text) for cell in _code_cells(block)
             if f"def {ex.fn_name}(" in cell]
    assert cells, f"{ex.chapter}.md shows no solution defining {ex.fn_name}"
    tree = ast.parse(cells[-1])
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    namespace = {"np": np}
    exec(compile(ast.Module(body=defs, type_ignores=[]), f"{ex.chapter}.md", "exec"), namespace)
    ok, out = run_check(ex, namespace[ex.fn_name], capsys)
    assert ok, out



# --------------------------------------------------------------------------------------------------
# book/instructors.md quotes the checker; keep the quote and the exercise table true
# --------------------------------------------------------------------------------------------------
INSTRUCTORS = BOOK / "instructors.md"



@pytest.mark.skipif(not INSTRUCTORS.exists(), reason="book/instructors.md not written yet")
def test_instructors_page_quotes_real_feedback(capsys):
    text = INSTRUCTORS.read_text(encoding="utf-8")
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    ok, out = run_check(exercises.causal.prefix_sums, cc_strict, capsys)
    assert not ok
    for line in block.splitlines():
        quoted = " ".join(line.split())
        if quoted and "..." not in quoted:
            assert quoted in out, f"instructors.md quotes {quoted!r}, check() prints {out!r}"
    for m in CALL.finditer(text):
        assert isinstance(resolve(m.group(1)), exercises.Exercise), m.group(1)



@pytest.mark.skipif(not INSTRUCTORS.exists(), reason="book/instructors.md not written yet")
def test_instructors_table_matches_the_exercises():
    rows = {}
    for line in INSTRUCTORS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[0].strip("`") in exercises.EXERCISES:
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(exercises.EXERCISES)
    for name, (_, chapter, stars, points, minutes, _) in rows.items():
        ex = exercises.EXERCISES[name]
        assert chapter.endswith(f"<{ex.chapter}>`"), (name, chapter)
        assert stars == "★" * ex.difficulty, (name, stars)
        assert points == str(sum(ex.points().values())), (name, points)  # nbgrader's, all groups
        assert minutes == f"{ex.minutes} min", (name, minutes)



# --------------------------------------------------------------------------------------------------
# An answer must compute its result: calls into the library's attention code are refused
# --------------------------------------------------------------------------------------------------
SHORTCUTS = [ex for ex in ALL if ex.library_answer is not None]

LIBRARY_MESSAGE = "calls the library's own"



@pytest.fixture
def practice():
    """Formative mode around a test that switches to summative (the mode is global)."""
    exercises.grading._unlock_for_tests()
    yield
    exercises.grading._unlock_for_tests()



@pytest.mark.parametrize("ex", SHORTCUTS, ids=[e.name for e in SHORTCUTS])
def test_library_shortcut_has_the_right_numbers_and_is_refused(ex, capsys):
    # the shortcut's numbers are right on every input, so only the watch for library calls fails it
    import warnings

    for case in ex.cases():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the library says so when it clamps a denominator
            got = ex.library_answer(*case.fresh_args())
        assert ex._compare(got, ex.expected(case)) is None, case.title
    ok, out = run_check(ex, ex.library_answer, capsys)
    assert not ok and LIBRARY_MESSAGE in out and "Input #1" in out, out



def test_at_least_the_attention_exercises_have_a_shortcut():
    assert {"softmax_attention_mine", "kernel_attention_mine", "associative_attention", "causal_cumsum_mine",
            "streaming_step", "chunked_causal", "decay_step", "delta_loop",
            "normed_numerator"} <= {ex.name for ex in SHORTCUTS}



def la_alias(q, k, v, phi):
    import linattn_core as la

    return la.linear_attention(q, k, v, phi)



def la_from_module(q, k, v, phi):
    from linattn_core.linear import linear_attention as mine

    return mine(q, k, v, phi)



BOUND_EARLY = linear_attention  # a name bound before check() ran, as a notebook's import does



def la_bound_early(q, k, v, phi):
    return BOUND_EARLY(q, k, v, phi)



def la_through_helper(q, k, v, phi):
    helpers = {"attend": lambda *a: linattn_core.kernel_attention(*a)}
    return helpers["attend"](q, k, v, phi)



def la_in_a_thread(q, k, v, phi):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(linear_attention, q, k, v, phi).result()



def la_internal(q, k, v, phi):
    from linattn_core import linear

    fq, fk = phi(q), phi(k)
    out, _ = linear.noncausal(fq, fk, v, 1e-6)
    return out



@pytest.mark.parametrize("fn", [la_alias, la_from_module, la_bound_early, la_through_helper,
                                la_in_a_thread, la_internal], ids=lambda f: f.__name__)
def test_library_calls_are_seen_however_they_are_reached(fn, capsys):
    ok, out = run_check(exercises.associative.associative_form, fn, capsys)
    assert not ok and LIBRARY_MESSAGE in out, out
    assert "linattn_core." in out.split(LIBRARY_MESSAGE, 1)[1]  # names what it called



def softmax_via_method(q, k, v):
    from linattn_core import KVCache as Cache

    out = []
    for b in np.ndindex(q.shape[:-2]):
        cache = Cache(q.shape[-1], v.shape[-1])
        for k_t, v_t in zip(k[b], v[b], strict=True):
            cache.append(k_t, v_t)
        out.append(np.stack([cache.attend(q_t) for q_t in q[b]]))
    return np.stack(out).reshape(q.shape[:-1] + v.shape[-1:])



def decay_via_decayed(S, z, q_t, k_t, v_t, g, phi):
    from linattn_core.decay import decayed_linear_attention

    decayed_linear_attention(q_t[None], k_t[None], v_t[None], phi, decay=g)
    return SOL["decay_step"](S, z, q_t, k_t, v_t, g, phi)



@pytest.mark.parametrize(("name", "fn", "called"), [
    ("softmax_attention_mine", softmax_via_method, "linattn_core.KVCache"),
    ("decay_step", decay_via_decayed, "decayed_linear_attention`"),
])
def test_states_and_decays_are_library_calls_too(name, fn, called, capsys):
    ok, out = run_check(exercises.get(name), fn, capsys)
    assert not ok and LIBRARY_MESSAGE in out and called in out, out



def test_feature_maps_are_allowed_where_phi_is_given_and_refused_where_they_are_the_task(capsys):
    def with_library_map(q, k, v, phi):  # get_feature_map is no attention: allowed here
        fq, fk = phi(q), phi(k)
        assert get_feature_map("elu+1")(np.zeros((1, 2))).shape == (1, 2)
        return SOL["associative_attention"](q, k, v, lambda x: phi(x)) + 0 * fq.sum() * fk.sum()

    assert run_check(exercises.associative.associative_form, with_library_map, capsys)[0]
    ok, out = run_check(exercises.feature_maps.elu_plus_one,
                        lambda x: linattn_core.EluPlusOne()(x), capsys)
    assert not ok and "linattn_core.EluPlusOne.__call__" in out, out



def test_switching_off_the_watch_is_refused_and_the_watch_is_restored(capsys):
    import sys

    def unwatched(q, k, v, phi):
        sys.setprofile(None)
        return linear_attention(q, k, v, phi)

    def other_profiler(frame, event, arg):
        return None

    sys.setprofile(other_profiler)
    try:
        ok, out = run_check(exercises.associative.associative_form, unwatched, capsys)
        assert sys.getprofile() is other_profiler  # check() puts back what was there
    finally:
        sys.setprofile(None)
    assert not ok and "switched off check()'s watch" in out, out



def test_deep_recursion_is_reported_as_such_not_as_tampering(capsys):
    def recursive(*args):
        return recursive(*args)

    ok, out = run_check(exercises.softmax.stable_attention, recursive, capsys)
    assert not ok and "raised RecursionError" in out and "watch" not in out, out



# --------------------------------------------------------------------------------------------------
# Summative mode: no solution(), limited hints, the kit's own solutions refused
# --------------------------------------------------------------------------------------------------
def test_summative_mode_switches_solution_off_and_limits_hints(practice, capsys):
    ex = exercises.causal.prefix_sums
    exercises.summative(max_hints=1)
    ex.solution()
    out = capsys.readouterr().out
    assert "switched off" in out and "def causal_cumsum_mine" not in out
    ex.hint(1)
    assert capsys.readouterr().out.startswith(f"Hint 1 of {len(ex.hints)}:")
    ex.hint(3)
    out = capsys.readouterr().out
    assert "allows hints 1 to 1" in out and ex.hints[2][:30] not in " ".join(out.split())
    assert "solution()" not in out and "More:" not in out
    exercises.summative(max_hints=0)
    ex.hint(1)
    assert "no hints" in capsys.readouterr().out
    ok, out = run_check(ex, cc_strict, capsys)
    assert not ok and "Stuck?" not in out  # no pointer to hints that are off
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_hints"):
            exercises.summative(max_hints=bad)
    exercises.grading._unlock_for_tests()  # what no learner's notebook calls
    ex.solution()
    assert capsys.readouterr().out.startswith("def causal_cumsum_mine(")


def test_graded_mode_is_locked_for_the_session(practice, capsys):
    ex = exercises.causal.prefix_sums
    exercises.summative(max_hints=1)
    assert exercises.formative() is False  # a learner's cell cannot switch grading back
    assert "stays on" in capsys.readouterr().out and exercises.is_summative()
    ex.solution()
    assert "switched off" in capsys.readouterr().out
    assert ex.solution_source() == ""
    with exercises.grading.practice_mode() as practice_on:  # nor can the teacher's switch
        assert practice_on is False and exercises.is_summative()
        ex.solution()
        assert "switched off" in capsys.readouterr().out
    exercises.summative(max_hints=5)  # a second call can lower the hints, never raise them
    assert exercises.grading.max_hints() == 1
    exercises.summative(max_hints=0)
    assert exercises.grading.max_hints() == 0
    # a learner who clears the flag by hand: the graded cell's own summative() call sets it again
    exercises.grading._MODE.summative = False
    exercises.grading._MODE.max_hints = None
    exercises.summative(max_hints=0)
    assert exercises.is_summative() and exercises.grading.max_hints() == 0
    ok, out = run_check(ex, lambda *a: SOL["causal_cumsum_mine"](*a), capsys)
    assert not ok and "exercises' own solutions" in out


def test_partial_credit_groups_and_points(capsys):
    for ex in ALL:
        points = ex.points()
        assert sum(points.values()) == exercises.grading.POINTS_PER_STAR * ex.difficulty, ex.name
        assert list(points) == ex.groups() and points["values"] >= ex.difficulty, ex.name
        for part in points:  # the solution earns every group
            assert ex.check(ex.solution_fn, part=part)
            assert "Correct on" in capsys.readouterr().out
    assert exercises.causal.prefix_sums.groups() == ["values", "batch", "edge", "memory"]
    with pytest.raises(ValueError, match="no group"):
        exercises.causal.prefix_sums.check(SOL["causal_cumsum_mine"], part="nope")


def test_partial_credit_right_on_values_wrong_on_memory(capsys):
    from _exercises import aa_quadratic

    ex = exercises.associative.associative_form
    verdicts = {part: bool(ex.check(aa_quadratic, part=part)) for part in ex.groups()}
    capsys.readouterr()
    assert verdicts == {"values": True, "batch": True, "edge": True, "memory": False}
    earned = sum(p for part, p in ex.points().items() if verdicts[part])
    assert 0 < earned < sum(ex.points().values())  # part of the points


def test_partial_credit_right_without_batches(capsys):
    def no_batches(q, k, v, phi):  # x.T on a 2-d array only
        fq, fk = phi(q), phi(k)
        S, z = fk.T @ v, fk.sum(0)
        return (fq @ S) / np.maximum(fq @ z, 1e-6)[:, None]

    ex = exercises.associative.associative_form
    verdicts = {part: bool(ex.check(no_batches, part=part)) for part in ex.groups()}
    out = capsys.readouterr().out
    assert verdicts["values"] and not verdicts["batch"], out



@pytest.mark.parametrize("ex", ALL, ids=IDS)
def test_summative_mode_refuses_the_kits_own_solution(ex, practice, capsys):
    def copied(*args):
        return ex.solution_fn(*args)

    assert run_check(ex, copied, capsys)[0]  # in practice it is one solution() away anyway
    exercises.summative(max_hints=2)
    ok, out = run_check(ex, copied, capsys)
    assert not ok and LIBRARY_MESSAGE in out and "exercises' own solutions" in out, out
    assert "linattn_core.tools.exercises." in out



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
