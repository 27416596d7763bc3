"""Tests of linattn_core.tools.exercises that hold for every exercise: names and layout, every solution
passes and prints itself, every registered mistake fails with its diagnosis, the cases hold what the
tasks promise, and the chapters' exercise cells and the instructors page agree with the kit.

The rest, by concern: test_exercises_answers.py (whatever an answer returns, raises or changes,
check() reports it and never passes it), test_exercises_graded.py (answers that call the library or
the kit, the locked graded mode, partial credit), test_exercises_<chapter>.py (each chapter's own
wrong answers and references).
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
    ATTENTION,
    BOOK,
    CAUSAL_FORMS,
    CHAPTER_PATHS,
    IDS,
    NO_DENOMINATOR,
    ROOT,
    WITH_PHI,
    cc_strict,
    resolve,
    run_check,
)

import linattn_core
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
