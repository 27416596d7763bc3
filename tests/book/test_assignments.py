"""The autograder release (scripts/make_assignments.py): grades agree with check().

The fast tests run the generated source notebooks in-process: every solution cell passes its
graded cell. The nbgrader test runs the real cycle on the trade-offs assignment: generate the release, hand in
a correct notebook, one with a wrong ``kv_cache_bytes`` and a blank one, autograde, and read the
gradebook: full marks, one point less, and none.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from linattn_core.tools import exercises

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("make_assignments", ROOT / "scripts" / "make_assignments.py")
make_assignments = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_assignments)


def _run_cells(nb: nbformat.NotebookNode) -> dict[str, bool]:
    """Execute a notebook's code cells in one namespace; graded cell id -> passed."""
    ns: dict = {}
    passed = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata["nbgrader"]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(cell.source, ns)
            ok = True
        except (AssertionError, NotImplementedError):
            ok = False
        if meta["grade"]:
            passed[meta["grade_id"]] = ok
    return passed


def test_every_exercise_is_in_one_assignment(tmp_path):
    written = make_assignments.write_course(tmp_path)
    graded = []
    for path in written[1:]:
        nb = nbformat.read(path, as_version=4)
        graded += [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                   if c.metadata["nbgrader"]["grade"]]
    assert sorted(graded) == sorted(f"check_{name}" for name in exercises.EXERCISES)


@pytest.mark.parametrize("chapter", list(make_assignments.chapters()))
def test_source_notebook_passes_its_own_checks(tmp_path, chapter):
    (path,) = make_assignments.write_course(tmp_path, [chapter])[1:]
    passed = _run_cells(nbformat.read(path, as_version=4))
    assert passed and all(passed.values()), passed


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
def test_nbgrader_grades_right_wrong_and_blank(tmp_path):
    pytest.importorskip("nbgrader")
    if shutil.which("alembic", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("nbgrader's alembic command is not installed beside this Python")
    course = tmp_path / "course"
    make_assignments.write_course(course, ["tradeoffs"])
    _nbgrader(course, "generate_assignment", "tradeoffs")
    release = nbformat.read(course / "release" / "tradeoffs" / "tradeoffs.ipynb", as_version=4)
    names = [ex.name for ex in make_assignments.chapters()["tradeoffs"]]
    assert "kv_cache_bytes" in names
    right = {name: exercises.get(name).solution_source() for name in names}
    keys_only = "def kv_cache_bytes(t, d, d_v, itemsize):\n    return t * d * itemsize"
    submissions = {"right": right, "wrong": {**right, "kv_cache_bytes": keys_only}, "blank": {}}
    for learner, answers in submissions.items():
        folder = course / "submitted" / learner / "tradeoffs"
        folder.mkdir(parents=True)
        nbformat.write(_answer(release, answers), folder / "tradeoffs.ipynb")
    _nbgrader(course, "autograde", "tradeoffs")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission("tradeoffs", s).score for s in submissions}
        assert gb.find_assignment("tradeoffs").max_score == len(names)
    assert scores == {"right": len(names), "wrong": len(names) - 1, "blank": 0}
    graded = nbformat.read(course / "autograded" / "wrong" / "tradeoffs" / "tradeoffs.ipynb", as_version=4)
    feedback = "".join(o.get("text", "") + str(o.get("evalue", "")) for c in graded.cells
                       if c.cell_type == "code" for o in c.outputs)
    assert "Likely cause: you counted only the keys" in feedback  # check()'s feedback is kept
