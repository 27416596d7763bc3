"""The autograder release (scripts/make_assignments.py): grades agree with check().

The fast tests run the generated source notebooks in-process: every solution cell passes its
graded cell, points are the stars, open exercises carry their chapter's statement and rubric, and a
summative release switches solution() off and limits hints. The nbgrader test runs the real cycle
on the summative trade-offs assignment: generate the release, hand in a correct notebook, one with a
wrong ``kv_cache_bytes``, one whose ``clamped_normalize`` calls the library and a blank one,
autograde, and read the gradebook: full marks, a star's points less, and none.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from linattn_core.tools import course, exercises

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("make_assignments", ROOT / "scripts" / "make_assignments.py")
make_assignments = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_assignments)


def _run_cells(nb: nbformat.NotebookNode, answers: dict[str, str] | None = None) -> dict[str, bool]:
    """Execute a notebook's code cells in one namespace; graded code cell id -> passed.

    ``answers`` replaces solution cells (by grade id). The mode a summative setup cell switches on
    is switched off again afterwards.
    """
    ns: dict = {}
    passed = {}
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            meta = cell.metadata["nbgrader"]
            source = (answers or {}).get(meta["grade_id"], cell.source) if meta["solution"] \
                else cell.source
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(source, ns)
                ok = True
            except (AssertionError, NotImplementedError):
                ok = False
            if meta["grade"]:
                passed[meta["grade_id"]] = ok
    finally:
        exercises.grading._unlock_for_tests()
    return passed


def _cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def test_every_exercise_is_in_one_assignment(tmp_path):
    written = make_assignments.write_course(tmp_path)
    graded = []
    for path in written[1:]:
        graded += [c.metadata["nbgrader"]["grade_id"] for c in _cells(path)
                   if c.metadata["nbgrader"]["grade"]]
    assert sorted(graded) == sorted([f"check_{name}_{part}" for name, ex in exercises.EXERCISES.items()
                                     for part in ex.points()]
                                    + [f"answer_{label}" for label in exercises.OPEN])


@pytest.mark.parametrize("chapter", make_assignments.all_chapters())
@pytest.mark.parametrize("summative", [False, True], ids=["formative", "summative"])
def test_source_notebook_passes_its_own_checks(tmp_path, chapter, summative):
    (path,) = make_assignments.write_course(tmp_path, [chapter], summative=summative)[1:]
    passed = _run_cells(nbformat.read(path, as_version=4))
    assert all(passed.values()), passed
    assert passed or chapter not in make_assignments.chapters()  # only open exercises: none


def test_points_are_per_group_by_the_stars_and_the_rubrics(tmp_path):
    earned: dict[str, int] = {}
    for path in make_assignments.write_course(tmp_path)[1:]:
        for cell in _cells(path):
            meta = cell.metadata["nbgrader"]
            if meta["grade_id"].startswith("check_"):
                name, part = meta["grade_id"].removeprefix("check_").rsplit("_", 1)
                ex = exercises.get(name)
                assert meta["points"] == ex.points()[part] >= 1, (name, part)
                assert f"part={part!r}" in cell.source
                earned[name] = earned.get(name, 0) + meta["points"]
            elif meta["grade_id"].startswith("answer_"):
                ex = exercises.OPEN[meta["grade_id"].removeprefix("answer_")]
                assert cell.cell_type == "markdown" and meta["solution"] and meta["grade"]
                assert meta["points"] == ex.points == sum(p for p, _ in ex.rubric) >= 2
            else:
                assert meta["points"] == 0 and not meta["grade"]
    # four points a star, added up over the groups: the chapters' totals add up by difficulty
    assert earned == {n: exercises.grading.POINTS_PER_STAR * ex.difficulty
                      for n, ex in exercises.EXERCISES.items()}


@pytest.mark.parametrize("label", list(exercises.OPEN))
def test_open_exercise_carries_its_statement_and_rubric(tmp_path, label):
    ex = exercises.OPEN[label]
    chapter_text = (ROOT / "book" / f"{ex.chapter}.md").read_text(encoding="utf-8")
    block = chapter_text.split(f":label: {label}\n", 1)[1].split("```", 1)[0]
    after = chapter_text.split(f":label: {label}\n", 1)[1].split("```{exercise}", 1)[0]
    assert ".check(" not in after, f"{label} is auto-checked: it needs no rubric"
    assert f"```{{exercise}} {ex.title}\n:label: {label}" in chapter_text
    (path,) = make_assignments.write_course(tmp_path, [ex.chapter])[1:]
    task = next(c.source for c in _cells(path) if c.metadata["nbgrader"]["grade_id"] == f"{label}_task")
    first_words = " ".join(block.split()[:3])
    assert first_words in " ".join(task.split()), (first_words, task)
    assert "{eq}" not in task and "{ref}" not in task and "{doc}" not in task
    for _, criterion in ex.rubric:
        assert criterion in task
    assert course.model_answer(label)[:40] not in task  # the model answer is for the grader only
    assert f"chapter/{ex.chapter}.ipynb" in task  # work in the chapter without its solutions
    chapter_nb = nbformat.read(path.parent / "chapter" / f"{ex.chapter}.ipynb", as_version=4)
    assert chapter_nb.cells and not any(c.metadata.get("solution") for c in chapter_nb.cells)
    assert not any("<details>" in c.source for c in chapter_nb.cells)


def test_every_open_exercise_of_the_book_has_a_rubric():
    found = set()
    for path in (ROOT / "book").glob("*.md"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"```\{exercise\}[^\n]*\n:label: (\S+)\n", text):
            after = text[m.end():].split("```{exercise}", 1)[0]
            if ".check(" not in after:
                found.add(m.group(1))
    assert found == set(exercises.OPEN)


def test_summative_notebooks_switch_solutions_off_and_limit_hints(tmp_path, capsys):
    (path,) = make_assignments.write_course(tmp_path, ["causal"], summative=True, max_hints=1)[1:]
    cells = _cells(path)
    assert "This is graded work" in cells[0].source and "hint 1 of each exercise only" in cells[0].source
    assert "solution()` work here" not in cells[0].source
    setup = cells[1].source
    assert "exercises.summative(max_hints=1)" in setup
    ns: dict = {}
    try:
        exec(setup, ns)
        ex = exercises.causal.prefix_sums
        ex.solution()
        ex.hint(2)
        out = capsys.readouterr().out
        assert "switched off" in out and "allows hints 1 to 1" in out
        assert "def causal_cumsum_mine" not in out
    finally:
        exercises.formative()
    (formative,) = make_assignments.write_course(tmp_path / "f", ["causal"])[1:]
    assert "exercises.summative" not in _cells(formative)[1].source
    assert "`hint(n)` and `solution()` work here too" in _cells(formative)[0].source


def test_summative_grading_refuses_the_kits_solution_and_the_library(tmp_path):
    (path,) = make_assignments.write_course(tmp_path, ["tradeoffs"], summative=True)[1:]
    nb = nbformat.read(path, as_version=4)
    copied = ("def kv_cache_bytes(t, d, d_v, itemsize):\n"
              "    return exercises.get('kv_cache_bytes').solution_fn(t, d, d_v, itemsize)")
    library = ("from linattn_core.attention import normalized\n\n"
               "def clamped_normalize(num, den, eps):\n    return normalized(num, den, eps)")
    passed = _run_cells(nb, {"kv_cache_bytes": copied, "clamped_normalize": library})
    assert not any(ok for gid, ok in passed.items() if "clamped_normalize" in gid or "kv_cache" in gid)
    assert all(ok for gid, ok in passed.items() if "exact_capacity" in gid)


def test_options_are_checked(tmp_path, monkeypatch, capsys):
    with pytest.raises(ValueError, match="summative"):
        make_assignments.write_course(tmp_path, ["causal"], max_hints=1)
    with pytest.raises(ValueError, match="max_hints"):
        make_assignments.write_course(tmp_path, ["causal"], summative=True, max_hints=-1)
    with pytest.raises(SystemExit):
        make_assignments.main(["--out", str(tmp_path), "--hints", "1", "causal"])
    # make assignments ASSIGNMENTS="--summative --hints 2": the variable reaches the script
    monkeypatch.setenv("ASSIGNMENTS", "--summative --hints 2")
    assert make_assignments.main(["--out", str(tmp_path / "env"), "causal"]) == 0
    assert "summative" in capsys.readouterr().out
    setup = _cells(tmp_path / "env" / "source" / "causal" / "causal.ipynb")[1].source
    assert "exercises.summative(max_hints=2)" in setup


def test_unknown_chapter_is_refused(tmp_path):
    with pytest.raises(ValueError, match="nope"):
        make_assignments.write_course(tmp_path, ["nope"])


def _nbgrader(course: Path, *args: str) -> None:
    # nbgrader runs alembic and jupyter as commands: the environment's bin/ goes first on PATH
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def _answer(nb: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The released notebook with some solution cells filled in (by exercise name)."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        name = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and name in answers:
            cell.source = answers[name]
    return nb


@pytest.mark.slow
def test_nbgrader_grades_right_wrong_library_and_blank(tmp_path):
    pytest.importorskip("nbgrader")
    if shutil.which("alembic", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("nbgrader's alembic command is not installed beside this Python")
    course = tmp_path / "course"
    make_assignments.write_course(course, ["tradeoffs", "softmax"], summative=True)
    _nbgrader(course, "generate_assignment", "softmax")  # an open exercise: its answer cell
    handout = nbformat.read(course / "release" / "softmax" / "softmax.ipynb", as_version=4)
    answer = next(c for c in handout.cells
                  if c.metadata["nbgrader"]["grade_id"] == "answer_ex-softmax-split")
    assert "YOUR ANSWER HERE" in answer.source and "A full answer" not in answer.source
    _nbgrader(course, "generate_assignment", "tradeoffs")
    release = nbformat.read(course / "release" / "tradeoffs" / "tradeoffs.ipynb", as_version=4)
    assert "exercises.summative(max_hints=0)" in release.cells[1].source
    items = make_assignments.chapters()["tradeoffs"]
    names = [ex.name for ex in items]
    total = sum(ex.difficulty for ex in items)
    assert "kv_cache_bytes" in names and "clamped_normalize" in names
    right = {name: exercises.get(name).solution_source() for name in names}
    keys_only = "def kv_cache_bytes(t, d, d_v, itemsize):\n    return t * d * itemsize"
    library = ("import linattn_core.attention as la\n\n"
               "def clamped_normalize(num, den, eps):\n    return la.normalized(num, den, eps)")
    submissions = {"right": right, "wrong": {**right, "kv_cache_bytes": keys_only},
                   "library": {**right, "clamped_normalize": library}, "blank": {}}
    for learner, answers in submissions.items():
        folder = course / "submitted" / learner / "tradeoffs"
        folder.mkdir(parents=True)
        nbformat.write(_answer(release, answers), folder / "tradeoffs.ipynb")
    _nbgrader(course, "autograde", "tradeoffs")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission("tradeoffs", s).score for s in submissions}
        assert gb.find_assignment("tradeoffs").max_score == total
    kv, clamp = (exercises.get(n).difficulty for n in ("kv_cache_bytes", "clamped_normalize"))
    assert scores == {"right": total, "wrong": total - kv, "library": total - clamp, "blank": 0}

    def feedback(learner):
        graded = nbformat.read(course / "autograded" / learner / "tradeoffs" / "tradeoffs.ipynb",
                               as_version=4)
        return " ".join("".join(o.get("text", "") + str(o.get("evalue", "")) for c in graded.cells
                                if c.cell_type == "code" for o in c.outputs).split())

    assert "Likely cause: you counted only the keys" in feedback("wrong")  # check()'s feedback
    assert "calls the library's own `linattn_core.attention.normalized`" in feedback("library")


@pytest.mark.parametrize("summative", [False, True], ids=["formative", "summative"])
def test_every_assignment_opens_with_the_install_cell_of_the_books_home(tmp_path, summative):
    from scripts.sync_notebooks import BRANCH, REPOSITORY

    written = make_assignments.write_course(tmp_path, summative=summative)[1:]
    assert written
    for path in written:
        setup = _cells(path)[1]
        assert setup.metadata["nbgrader"]["grade_id"].endswith("_setup"), path.name
        # a class on Colab opens the notebook without the package: the first code cell installs it
        assert f"linattn_core[course] @ git+{REPOSITORY}@{BRANCH}" in setup.source, path.name
        assert setup.source.index("import linattn_core") < setup.source.index("from linattn_core.tools")
