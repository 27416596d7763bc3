"""Write an nbgrader course of the book's auto-checked exercises: one assignment per chapter.

The graded cells call the same ``check()`` the chapters call, so a learner's grade and the feedback
in the book can never disagree; the solution cells are the exercises' own reference solutions,
between nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers (the released notebook
gets ``raise NotImplementedError()`` there instead).

    python scripts/make_assignments.py                    # into _build/assignments/
    python scripts/make_assignments.py --out DIR causal   # only some chapters
    python scripts/make_assignments.py --release          # and nbgrader's release/ (make assignments)

Then, in the output folder (nbgrader reads its nbgrader_config.py): ``nbgrader generate_assignment
causal``, collect the learners' notebooks into ``submitted/<learner>/causal/``, ``nbgrader
autograde causal``, ``nbgrader export``. Generated files only: nothing here is committed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from linattn_core.tools import exercises  # noqa: E402  (the repository's package, not an installed copy)
from scripts.sync_notebooks import setup_cell_source  # noqa: E402  (the book's home, _config.yml)

DEFAULT_OUT = ROOT / "_build" / "assignments"

CONFIG = """\
# nbgrader's configuration for the linattn exercises (written by scripts/make_assignments.py)
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "linattn"
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = "sqlite:///" + {db!r}
c.ExecutePreprocessor.timeout = 300
"""


def _meta(kind: str, grade_id: str, points: int = 0) -> dict:
    """nbgrader's cell metadata: a read-only cell, a solution cell or a graded test cell."""
    return {"nbgrader": {"grade": kind == "test", "grade_id": grade_id, "locked": kind != "solution",
                         "points": points, "schema_version": 3, "solution": kind == "solution",
                         "task": False}}


def chapters() -> dict[str, list[exercises.Exercise]]:
    """The auto-checked exercises grouped by chapter, in the book's order."""
    out: dict[str, list[exercises.Exercise]] = {}
    for ex in exercises.EXERCISES.values():
        out.setdefault(ex.chapter, []).append(ex)
    return out


def solution_cell(ex: exercises.Exercise) -> str:
    """The reader's function: its signature, then the reference body between nbgrader's markers."""
    signature, body = ex.solution_source().split("\n", 1)
    indent = " " * (len(body) - len(body.lstrip(" ")))
    return f"{signature}\n{indent}### BEGIN SOLUTION\n{body}\n{indent}### END SOLUTION"


def test_cell(ex: exercises.Exercise) -> str:
    return (f"# graded: passes when check() passes (its feedback is printed above the result)\n"
            f"assert {ex.path}.check({ex.fn_name})")


def notebook(chapter: str, items: list[exercises.Exercise]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({"kernelspec": {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}})
    head = (f"# Exercises of the chapter `{chapter}`\n\nWrite each function where it says "
            "`# YOUR CODE HERE`, then run the cell below it: it prints the same feedback as "
            "the book's `check()` and counts one point when it passes. `hint(n)` works here "
            f"too, e.g. `{items[0].path}.hint(1)`.")
    cells = [nbformat.v4.new_markdown_cell(head, metadata=_meta("read", f"{chapter}_intro")),
             nbformat.v4.new_code_cell(setup_cell_source() + "\n\nimport numpy as np\n\n"
                                       "from linattn_core.tools import exercises",
                                       metadata=_meta("read", f"{chapter}_setup"))]
    for ex in items:
        stars = "★" * ex.difficulty
        task = f"## {ex.title} ({stars}, about {ex.minutes} min)\n\n{ex.task}"
        cells += [nbformat.v4.new_markdown_cell(task, metadata=_meta("read", f"{ex.name}_task")),
                  nbformat.v4.new_code_cell(solution_cell(ex), metadata=_meta("solution", ex.name)),
                  nbformat.v4.new_code_cell(test_cell(ex),
                                            metadata=_meta("test", f"check_{ex.name}", points=1))]
    nb.cells = cells
    return nb


def write_course(out: Path, only: list[str] | None = None) -> list[Path]:
    """Write ``out/nbgrader_config.py`` and ``out/source/<chapter>/<chapter>.ipynb``; return them."""
    groups = chapters()
    unknown = sorted(set(only or ()) - set(groups))
    if unknown:
        raise ValueError(f"no exercises in chapter(s) {', '.join(unknown)}; "
                         f"the chapters are: {', '.join(groups)}")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = out / "nbgrader_config.py"
    config.write_text(CONFIG.format(root=str(out), db=str(out / "gradebook.db")), encoding="utf-8")
    written = [config]
    for chapter, items in groups.items():
        if only and chapter not in only:
            continue
        path = out / "source" / chapter / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook(chapter, items), path)
        written.append(path)
    return written


def release(out: Path, chapter: str) -> None:
    """``nbgrader generate_assignment``: the learners' notebook, in ``out/release/<chapter>/``."""
    # nbgrader runs alembic as a command: this environment's bin/ goes first on PATH
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter, "--force"],
                   cwd=out, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapters to write (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the course folder")
    parser.add_argument("--release", action="store_true",
                        help="also run nbgrader generate_assignment for each chapter written")
    args = parser.parse_args(argv)
    written = write_course(args.out, args.chapters or None)
    if args.release:
        for path in written[1:]:
            release(args.out.resolve(), path.parent.name)
    step = "collect submissions into submitted/<learner>/<chapter>/" if args.release else \
        "nbgrader generate_assignment <chapter>"
    print(textwrap.dedent(f"""\
        wrote {len(written) - 1} assignment(s) and nbgrader_config.py into {args.out}
        next, in that folder: {step}, then nbgrader autograde <chapter>, nbgrader export"""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
