"""The autograder release (scripts/make_assignments.py): grades agree with check().

The fast tests run the generated source notebooks in-process: every solution cell passes its
graded cells, points are four a star split over the groups of inputs, open exercises carry their
chapter's statement and rubric and point at the chapter without solutions, and a summative release
switches solution() off and limits hints. The nbgrader test plays a learner in a summative release
(formative(), the flag cleared by hand, the kit's solution, the library's attention, printing the
solution, the key, the rubric and the model answer): autograde gives none of it a point, honest
answers all of them and a partly right one part of them. "Run all" on a notebook twin and on the
chapter copy runs no solution.
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
    """The nbgrader cells of a notebook (the capstone's template cells, the learner's own, have none)."""
    return [c for c in nbformat.read(path, as_version=4).cells if "nbgrader" in c.metadata]


def test_every_exercise_is_in_one_assignment(tmp_path):
    written = make_assignments.write_course(tmp_path)
    graded = []
    for path in written[1:]:
        graded += [c.metadata["nbgrader"]["grade_id"] for c in _cells(path)
                   if c.metadata["nbgrader"]["grade"]]
    assert sorted(graded) == sorted([f"check_{name}_{part}" for name, ex in exercises.EXERCISES.items()
                                     for part in ex.points()]
                                    + [f"answer_{label}" for label in exercises.OPEN])  # capstone: its own


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
                label = meta["grade_id"].removeprefix("answer_")
                ex = exercises.OPEN.get(label, exercises.capstone.LAB)
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
    capstone = ex is exercises.capstone.LAB  # an assignment of its own: its statement opens it
    (path,) = make_assignments.write_course(tmp_path, ["capstone" if capstone else ex.chapter])[1:]
    task_id = "capstone_intro" if capstone else f"{label}_task"
    task = next(c.source for c in _cells(path) if c.metadata["nbgrader"]["grade_id"] == task_id)
    first_words = " ".join(block.split()[:3])
    assert first_words in " ".join(task.split()), (first_words, task)
    assert "{eq}" not in task and "{ref}" not in task and "{doc}" not in task
    for _, criterion in ex.rubric:
        assert criterion in task
    assert course.model_answer(label)[:40] not in task  # the model answer is for the grader only
    if capstone:  # the learner works in the capstone notebook itself
        return
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


def test_the_capstone_is_an_assignment_of_its_own(tmp_path):
    import ast

    lab = exercises.capstone.LAB
    (path,) = make_assignments.write_course(tmp_path, ["capstone"], summative=True)[1:]
    assert path.parent.name == "capstone"
    cells = nbformat.read(path, as_version=4).cells
    intro = " ".join(cells[0].source.split())
    brief = " ".join(make_assignments.statement(lab).split()[:20])  # the chapter's statement
    assert brief in intro and "capstone_runs.json" in intro
    for _, criterion in lab.rubric:
        assert " ".join(criterion.split()) in intro
    assert "exercises.summative(max_hints=0)" in cells[1].source
    code = [c.source for c in cells if c.cell_type == "code"]
    for source in code:
        ast.parse(source)
    assert any("exercises.capstone.config(kind, seed)" in c for c in code)
    assert any("exercises.capstone.check_report(report)" in c for c in code)
    (answer,) = [c for c in cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert answer.cell_type == "markdown" and answer.metadata["nbgrader"]["points"] == lab.points == 10
    assert course.model_answer(lab.label)[:40] in answer.source  # the instructor's copy only
    assert course.model_answer(lab.label)[:40] not in intro


def test_summative_notebooks_switch_solutions_off_and_limit_hints(tmp_path, capsys):
    (path,) = make_assignments.write_course(tmp_path, ["causal"], summative=True, max_hints=1)[1:]
    cells = _cells(path)
    assert "This is graded work" in cells[0].source and "hint 1 of each exercise only" in cells[0].source
    assert "`chapter/causal.ipynb` beside this notebook" in cells[0].source  # the chapter, no solutions
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


def _insert_after_setup(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    """A learner's own cell, added right after the locked set-up cell (nbgrader keeps such cells)."""
    nb = nbformat.from_dict(nb)
    nb.cells.insert(2, nbformat.v4.new_code_cell(source))
    return nb


KIT_SOLUTION = ("def associative_attention(q, k, v, phi):\n"
                "    return exercises.get('associative_attention').solution_fn(q, k, v, phi)")
LIBRARY = ("import linattn_core\n\n"
           "def associative_attention(q, k, v, phi):\n"
           "    return linattn_core.linear_attention(q, k, v, phi)")
QUADRATIC = ("def associative_attention(q, k, v, phi):\n"
             "    A = phi(q) @ np.swapaxes(phi(k), -1, -2)       # N x N: right values, wrong memory\n"
             "    return (A @ v) / np.maximum(A.sum(-1), 1e-6)[..., None]")
LOOKS = ("from linattn_core.tools import course\n"
         "ex = exercises.get('associative_attention')\n"
         "ex.solution()\n"
         "print('SOURCE:', ex.solution_source())\n"
         "print('KEY:', course.answer_key('associative_attention'))\n"
         "print('RUBRIC:', course.rubric('ex-softmax-split'))\n"
         "print('MODEL:', course.model_answer('ex-softmax-split'))")


@pytest.mark.slow
def test_a_learner_in_a_graded_release(tmp_path):
    """A learner plays every trick on a summative release and gets nothing for it; honest answers get
    their points, partly right ones part of them; nothing of a solution or a model answer shows.

    The attempts: a cell calling ``exercises.formative()`` then the kit's own solution; a cell that
    clears the mode's flag by hand, then the kit's solution; an answer calling the library's own
    attention; a cell printing the solution, the answer key, the rubric and the model answer (and a
    blank answer); running every cell of the chapter copy the assignment points at.
    """
    pytest.importorskip("nbgrader")
    if shutil.which("alembic", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("nbgrader's alembic command is not installed beside this Python")
    course_dir = tmp_path / "course"
    make_assignments.write_course(course_dir, ["associative"], summative=True)
    make_assignments.release(course_dir, "associative")  # nbgrader generate_assignment, and the chapter copy
    released = course_dir / "release" / "associative"
    handout = nbformat.read(released / "associative.ipynb", as_version=4)
    text = " ".join(c.source for c in handout.cells)
    assert "exercises.summative(max_hints=0)" in handout.cells[1].source
    graded = [c for c in handout.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all(c.source.count("exercises.summative(max_hints=0)") == 1 for c in graded)
    for name in ("associative_attention", "kernel_attention_mine"):
        body = exercises.get(name).solution_source().split("\n", 2)[2]
        assert body.strip().splitlines()[0] not in text  # the solution cells are emptied
    chapter_copy = released / "chapter" / "associative.ipynb"
    assert chapter_copy.is_file()  # the chapter without its solutions travels with the release

    items = make_assignments.chapters()["associative"]
    right = {ex.name: exercises.get(ex.name).solution_source() for ex in items}
    points = {ex.name: ex.points() for ex in items}
    total = sum(sum(p.values()) for p in points.values())
    aa = points["associative_attention"]
    submissions = {
        "honest": (_answer(handout, right), total),
        "partial": (_answer(handout, {**right, "associative_attention": QUADRATIC}), total - aa["memory"]),
        "formative": (_insert_after_setup(_answer(handout, {**right, "associative_attention": KIT_SOLUTION}),
                                          "exercises.formative()"), total - sum(aa.values())),
        "flag": (_insert_after_setup(_answer(handout, {**right, "associative_attention": KIT_SOLUTION}),
                                     "exercises.grading._MODE.summative = False\n"
                                     "exercises.grading._MODE.locked = False\n"
                                     "exercises.grading._MODE.max_hints = None"), total - sum(aa.values())),
        "library": (_answer(handout, {**right, "associative_attention": LIBRARY}), total - sum(aa.values())),
        "looks": (_insert_after_setup(_answer(handout, {}), LOOKS), 0),
    }
    for learner, (nb, _) in submissions.items():
        folder = course_dir / "submitted" / learner / "associative"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "associative.ipynb")
    _nbgrader(course_dir, "autograde", "associative")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        assert gb.find_assignment("associative").max_score == total
        scores = {learner: gb.find_submission("associative", learner).score for learner in submissions}
    assert scores == {learner: expected for learner, (_, expected) in submissions.items()}

    def outputs(learner):
        nb = nbformat.read(course_dir / "autograded" / learner / "associative" / "associative.ipynb",
                           as_version=4)
        return " ".join("".join(o.get("text", "") + str(o.get("evalue", "")) for o in c.get("outputs", []))
                        for c in nb.cells if c.cell_type == "code")

    looks = " ".join(outputs("looks").split())
    assert "switched off" in looks
    assert all(word in looks for word in ("SOURCE:", "KEY:", "RUBRIC:", "MODEL:"))  # it ran, printing ""
    assert "def associative_attention" not in looks and "passes check()" not in looks
    assert course.model_answer("ex-softmax-split")[:40] not in looks  # read in practice mode: there
    assert "stays on" in " ".join(outputs("formative").split())
    for learner in ("formative", "flag"):
        assert "exercises' own solutions" in " ".join(outputs(learner).split()), learner
    assert "calls the library's own" in " ".join(outputs("library").split())
    assert "grows like N^2" in " ".join(outputs("partial").split())


@pytest.mark.slow
def test_the_capstone_release_keeps_its_template(tmp_path):
    pytest.importorskip("nbgrader")
    if shutil.which("alembic", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("nbgrader's alembic command is not installed beside this Python")
    make_assignments.write_course(tmp_path, ["capstone"])
    make_assignments.release(tmp_path, "capstone")
    cells = nbformat.read(tmp_path / "release" / "capstone" / "capstone.ipynb", as_version=4).cells
    code = " ".join(c.source for c in cells if c.cell_type == "code")
    assert "exercises.capstone.config(kind, seed)" in code and "check_report(report)" in code
    answer = next(c for c in cells if c.metadata.get("nbgrader", {}).get("grade"))
    assert "YOUR ANSWER HERE" in answer.source
    assert course.model_answer(exercises.capstone.LAB.label)[:40] not in " ".join(c.source for c in cells)


@pytest.mark.slow
def test_run_all_runs_no_solution(tmp_path):
    """"Run all" on a notebook twin and on an assignment's chapter copy: every exercise cell runs the
    learner's stub (check() says "Not yet"), never a solution ("Correct!" is never printed)."""
    from nbclient import NotebookClient

    make_assignments.write_course(tmp_path, ["associative"])
    for path in (ROOT / "notebooks" / "associative.ipynb",
                 tmp_path / "source" / "associative" / "chapter" / "associative.ipynb"):
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        printed = " ".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                           for o in c.get("outputs", []))
        checks = [c for c in nb.cells if c.cell_type == "code" and ".check(" in c.source]
        assert checks, path
        assert "Correct!" not in printed and printed.count("Not yet") >= len(checks), path


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
