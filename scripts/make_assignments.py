"""Write an nbgrader course of the book's exercises: one assignment per chapter.

The graded cells call the same ``check()`` the chapters call, so a learner's grade and the feedback
in the book can never disagree; the solution cells are the exercises' own reference solutions,
between nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` markers (the released notebook
gets ``raise NotImplementedError()`` there instead). Each auto-checked exercise is graded in one
cell per group of its inputs (plain values, batch dimensions, edge cases, memory), each worth its
points (``Exercise.points()``: four per star in all), so a partly right answer gets part of them.
The capstone lab of the training chapter (``exercises.capstone``) is an assignment of its own,
``capstone``: its brief, the runs (kept in ``capstone_runs.json``, handed in with the notebook, so
that grading does not train again), the report, ``check_report`` and an answer graded by hand.
Each open exercise (``exercises.OPEN``) comes with its statement, read from the chapter, its rubric
and an answer cell graded by hand for the rubric's points; the model answer in the instructor's copy
comes from the teacher's file (``teacher/model_answers.json``), never from the package. Beside each
assignment, ``chapter/<chapter>.ipynb`` is the chapter's notebook without its solutions: the one the
assignment tells learners to work in.

    python scripts/make_assignments.py                    # into _build/assignments/
    python scripts/make_assignments.py --out DIR causal   # only some chapters
    python scripts/make_assignments.py --release          # and nbgrader's release/ (make assignments)
    python scripts/make_assignments.py --summative --hints 1   # graded work: no solution(), 1 hint

``--summative`` writes notebooks whose first cell calls ``exercises.summative(max_hints=N)``:
``solution()`` is off, ``hint(n)`` answers only ``n <= N`` (``--hints``, default 0: none), and
``check()`` also refuses the kit's own solutions. The mode is locked (``formative()`` in a learner's
cell does nothing) and every graded cell calls ``summative`` again before its ``check()``.
``make assignments ASSIGNMENTS="--summative --hints 1"`` passes the options through make (the
variable ``ASSIGNMENTS`` is read as extra options).

Then, in the output folder (nbgrader reads its nbgrader_config.py): ``nbgrader generate_assignment
causal``, collect the learners' notebooks into ``submitted/<learner>/causal/``, ``nbgrader
autograde causal``, grade the open answers in formgrader, ``nbgrader export``. Generated files
only: nothing here is committed.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from linattn_core.tools import course, exercises  # noqa: E402  (the repository's package, not an installed copy)
from scripts.sync_notebooks import BOOK, build_notebook, setup_cell_source  # noqa: E402  (_config.yml)

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
    """nbgrader's cell metadata: a read-only cell, a solution cell, a graded test cell, or an
    answer cell graded by hand (``"manual"``)."""
    return {"nbgrader": {"grade": kind in ("test", "manual"), "grade_id": grade_id,
                         "locked": kind not in ("solution", "manual"), "points": points,
                         "schema_version": 3, "solution": kind in ("solution", "manual"),
                         "task": False}}


def book_order() -> list[str]:
    """The chapter files in the book's order (from _toc.yml)."""
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    return re.findall(r"file:\s*book/([\w-]+)", toc)


def _ordered(groups: dict[str, list]) -> dict[str, list]:
    order = book_order()
    rank = {chapter: i for i, chapter in enumerate(order)}
    return dict(sorted(groups.items(), key=lambda item: rank.get(item[0], len(order))))


def chapters() -> dict[str, list[exercises.Exercise]]:
    """The auto-checked exercises grouped by chapter, in the book's order."""
    out: dict[str, list[exercises.Exercise]] = {}
    for ex in exercises.EXERCISES.values():
        out.setdefault(ex.chapter, []).append(ex)
    return _ordered(out)


def open_chapters() -> dict[str, list[exercises.OpenExercise]]:
    """The open exercises (graded by hand) grouped by chapter, in the book's order."""
    out: dict[str, list[exercises.OpenExercise]] = {}
    for ex in exercises.OPEN.values():
        if ex is not exercises.capstone.LAB:  # the capstone lab is an assignment of its own
            out.setdefault(ex.chapter, []).append(ex)
    return _ordered(out)


def all_chapters() -> list[str]:
    """Every chapter with an exercise of either kind, in the book's order."""
    return list(_ordered({c: [] for c in [*chapters(), *open_chapters()]}))


_ROLES = [
    (re.compile(r"\{(?:ref|doc|numref)\}`([^<`]+?)\s*<[^>`]+>`"), r"\1"),   # {ref}`text <label>`
    (re.compile(r"\{eq\}`([^`]+)`"), r"equation `\1` of the chapter"),
    (re.compile(r"\{ref\}`([^`]+)`"), r"the chapter's section `\1`"),
    (re.compile(r"\{doc\}`([^`]+)`"), r"the chapter `\1`"),
]


def statement(ex: exercises.OpenExercise) -> str:
    """The open exercise's statement as its chapter states it, with MyST roles spelt out."""
    path = ROOT / "book" / f"{ex.chapter}.md"
    text = path.read_text(encoding="utf-8")
    m = re.search(r"```\{exercise\}[^\n]*\n:label: " + re.escape(ex.label) + r"\n(.*?)\n```",
                  text, flags=re.S)
    if m is None:
        raise ValueError(f"{path} has no exercise labelled {ex.label}: update "
                         "linattn_core/tools/exercises/open.py")
    body = m.group(1).strip()
    for pattern, replacement in _ROLES:
        body = pattern.sub(replacement, body)
    return body


def solution_cell(ex: exercises.Exercise) -> str:
    """The reader's function: its signature, then the reference body between nbgrader's markers."""
    # read from the kit's source, whatever the mode of this process (solution_source() says nothing
    # in graded work): the instructor's copy; nbgrader takes it out of the learner's
    source = textwrap.dedent(inspect.getsource(ex.solution_fn)).rstrip()
    source = source.replace(f"def {ex.solution_fn.__name__}(", f"def {ex.fn_name}(", 1)
    signature, body = source.split("\n", 1)
    indent = " " * (len(body) - len(body.lstrip(" ")))
    return f"{signature}\n{indent}### BEGIN SOLUTION\n{body}\n{indent}### END SOLUTION"


def test_cell(ex: exercises.Exercise, part: str, summative: bool = False, max_hints: int = 0) -> str:
    """One graded cell: one group of the exercise's inputs, for that group's points.

    In graded work it re-asserts the (locked) summative mode first, so that whatever a learner's
    cell did to the mode is undone before the grade is taken.
    """
    points = ex.points()[part]
    lines = [f"# graded, {_points(points)}: {exercises.grading.GROUP_TITLES[part]} "
             "(check()'s feedback is printed above the result)"]
    if summative:
        lines.append(f"exercises.summative(max_hints={max_hints})  # graded work, re-asserted")
    lines.append(f"assert {ex.path}.check({ex.fn_name}, part={part!r})")
    return "\n".join(lines)


def total_points(ex: exercises.Exercise) -> int:
    return sum(ex.points().values())


def _points(n: int) -> str:
    return f"{n} point{'s' if n != 1 else ''}"


def _intro(chapter: str, items: list, open_items: list, summative: bool, max_hints: int) -> str:
    total = sum(total_points(ex) for ex in items) + sum(ex.points for ex in open_items)
    text = f"# Exercises of the chapter `{chapter}` ({_points(total)})\n\n"
    text += (f"The chapter itself, without its solutions, is `chapter/{chapter}.ipynb` beside this "
             "notebook: read and run it there.\n\n")
    if items:
        text += ("Write each function where it says `# YOUR CODE HERE`, then run the cell below it: "
                 "it prints the same feedback as the book's `check()`, one cell per group of "
                 "inputs (plain values, batch dimensions, edge cases, memory), each worth its "
                 "points: four points per star in all, so a partly right answer earns part of them. "
                 "Compute each answer yourself: `check()` refuses an answer that calls the "
                 "library's attention code. ")
    if open_items:
        text += ("The open exercises are graded by hand, against the rubric shown with each; "
                 "write your answer, with your own numbers, in the cell below it. ")
    if summative and items:
        hints = ("no hints" if max_hints == 0 else "hint 1 of each exercise only" if max_hints == 1
                 else f"hints 1 to {max_hints} of each exercise (`hint(n)`)")
        text = text.rstrip() + (
            f"\n\n**This is graded work.** `solution()` is switched off and there are {hints}; "
            "`check()` still says what is wrong with each input, and also refuses answers that "
            "call the exercises' own solutions.")
    elif summative:
        text = text.rstrip() + "\n\n**This is graded work.**"
    elif items:
        text += (f"`hint(n)` and `solution()` work here too, e.g. `{items[0].path}.hint(1)`.")
    return text.rstrip()


def _setup(summative: bool, max_hints: int) -> str:
    source = setup_cell_source() + "\n\nimport numpy as np\n\nfrom linattn_core.tools import exercises"
    if summative:
        source += f"\n\nexercises.summative(max_hints={max_hints})  # graded work: no solution()"
    return source


def notebook(chapter: str, items: list[exercises.Exercise],
             open_items: list[exercises.OpenExercise] = (), *, summative: bool = False,
             max_hints: int = 0) -> nbformat.NotebookNode:
    """One chapter's assignment: its auto-checked exercises, then its open ones."""
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({"kernelspec": {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}})
    cells = [nbformat.v4.new_markdown_cell(_intro(chapter, items, list(open_items), summative,
                                                  max_hints),
                                           metadata=_meta("read", f"{chapter}_intro")),
             nbformat.v4.new_code_cell(_setup(summative, max_hints),
                                       metadata=_meta("read", f"{chapter}_setup"))]
    for ex in items:
        stars = "★" * ex.difficulty
        parts = ", ".join(f"{exercises.grading.GROUP_TITLES[g].split(' (')[0]} {p}"
                          for g, p in ex.points().items())
        task = (f"## {ex.title} ({stars}, about {ex.minutes} min, {_points(total_points(ex))}: "
                f"{parts})\n\n{ex.task}")
        cells += [nbformat.v4.new_markdown_cell(task, metadata=_meta("read", f"{ex.name}_task")),
                  nbformat.v4.new_code_cell(solution_cell(ex), metadata=_meta("solution", ex.name))]
        cells += [nbformat.v4.new_code_cell(test_cell(ex, part, summative, max_hints), metadata=_meta(
                      "test", f"check_{ex.name}_{part}", points=points))
                  for part, points in ex.points().items()]
    for ex in open_items:
        stars = "★" * ex.difficulty
        task = (f"## {ex.title} ({stars}, about {ex.minutes} min, {_points(ex.points)}, graded by "
                f"hand)\n\n{statement(ex)}\n\nWork in `chapter/{chapter}.ipynb` beside this "
                f"notebook (the chapter without its solutions), then answer in the cell below, with "
                f"your numbers.\n\n**Rubric** ({_points(ex.points)}):\n\n{ex.rubric_markdown()}")
        model = course.model_answer(ex.label) or "(see teacher/model_answers.json)"
        answer = f"### BEGIN SOLUTION\nA full answer: {model}\n### END SOLUTION"
        cells += [nbformat.v4.new_markdown_cell(task, metadata=_meta("read", f"{ex.label}_task")),
                  nbformat.v4.new_markdown_cell(answer, metadata=_meta(
                      "manual", f"answer_{ex.label}", points=ex.points))]
    nb.cells = cells
    return nb


CAPSTONE = "capstone"  # the assignment of the training chapter's lab (exercises.capstone)

CAPSTONE_RUNS = """\
import json
from pathlib import Path

from linattn_core.lm.data import load_corpus
from linattn_core.lm.train import train

corpus = load_corpus()
pair = ("gla", "simple_gla")  # YOUR PAIR: two layers of linattn_core.lm.model.KINDS
seeds = (0, 1, 2)             # at least three, the same for both layers
saved = Path("capstone_runs.json")  # hand it in with this notebook: grading reuses your runs
if saved.exists():
    runs = json.loads(saved.read_text())
else:
    runs = {kind: [] for kind in pair}
    for kind in pair:
        for seed in seeds:
            run = train(exercises.capstone.config(kind, seed), corpus, progress=False)
            run.pop("model")
            runs[kind].append(run)
    saved.write_text(json.dumps(runs))
"""

CAPSTONE_REPORT = """\
from linattn_core.lm import compare

# YOUR ANALYSIS: the paired difference of the final validation losses, its interval and its verdict
gap, interval, verdict = None, None, None
report = {"pair": pair, "runs": runs, "gap": gap, "interval": interval, "verdict": verdict,
          "cannot_show": "YOUR WORDS: what these runs cannot show"}
"""


def capstone_notebook(*, summative: bool = False, max_hints: int = 0) -> nbformat.NotebookNode:
    """The capstone lab as an assignment: the brief and rubric, the runs (kept in
    ``capstone_runs.json``, so that grading does not train again), the report, check_report, and an
    answer cell graded by hand for the rubric's points."""
    lab = exercises.capstone.LAB
    nb = nbformat.v4.new_notebook()
    nb.metadata.update({"kernelspec": {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}})
    try:  # the statement as its chapter states it, where the chapter has it; else the kit's brief
        brief = statement(lab) + "\n"
    except ValueError:
        brief = exercises.capstone.BRIEF
    intro = (f"# {lab.title} ({_points(lab.points)}, graded by hand)\n\n{brief}\n"
             f"Hand in this notebook with `capstone_runs.json`, which the first cell below writes.\n\n"
             f"**Rubric** ({_points(lab.points)}):\n\n{lab.rubric_markdown()}")
    if summative:
        intro += "\n\n**This is graded work.**"
    model = course.model_answer(lab.label) or "(see teacher/model_answers.json)"
    nb.cells = [
        nbformat.v4.new_markdown_cell(intro, metadata=_meta("read", "capstone_intro")),
        nbformat.v4.new_code_cell(_setup(summative, max_hints), metadata=_meta("read", "capstone_setup")),
        # the learner's own cells: no nbgrader metadata, so the release keeps the template as it is
        nbformat.v4.new_code_cell(CAPSTONE_RUNS.rstrip()),
        nbformat.v4.new_code_cell(CAPSTONE_REPORT.rstrip()),
        nbformat.v4.new_code_cell("exercises.capstone.check_report(report)  # the mechanics; the rubric "
                                  "grades the reading", metadata=_meta("read", "capstone_check")),
        nbformat.v4.new_markdown_cell("## Your verdict, its numbers, and what the runs cannot show",
                                      metadata=_meta("read", "capstone_answer_head")),
        nbformat.v4.new_markdown_cell(f"### BEGIN SOLUTION\nA full answer: {model}\n### END SOLUTION",
                                      metadata=_meta("manual", f"answer_{lab.label}", points=lab.points)),
    ]
    return nb


def write_course(out: Path, only: list[str] | None = None, *, summative: bool = False,
                 max_hints: int = 0) -> list[Path]:
    """Write ``out/nbgrader_config.py`` and ``out/source/<chapter>/<chapter>.ipynb``; return them.

    ``summative``: graded work, no ``solution()`` and at most ``max_hints`` hints per exercise.
    """
    if not isinstance(max_hints, int) or isinstance(max_hints, bool) or max_hints < 0:
        raise ValueError(f"max_hints must be an int >= 0 (0: no hints), got {max_hints!r}")
    if max_hints and not summative:
        raise ValueError("max_hints limits the hints of summative assignments only: add "
                         "summative=True (--summative), or leave max_hints at 0")
    groups, open_groups, names = chapters(), open_chapters(), all_chapters()
    unknown = sorted(set(only or ()) - set(names) - {CAPSTONE})
    if unknown:
        raise ValueError(f"no exercises in chapter(s) {', '.join(unknown)}; "
                         f"the chapters are: {', '.join(names)}")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = out / "nbgrader_config.py"
    config.write_text(CONFIG.format(root=str(out), db=str(out / "gradebook.db")), encoding="utf-8")
    written = [config]
    for chapter in names:
        if only and chapter not in only:
            continue
        path = out / "source" / chapter / f"{chapter}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = notebook(chapter, groups.get(chapter, []), open_groups.get(chapter, []),
                      summative=summative, max_hints=max_hints)
        nbformat.write(nb, path)
        written.append(path)
        chapter_nb = path.parent / "chapter" / f"{chapter}.ipynb"  # supplementary: no nbgrader cells
        chapter_nb.parent.mkdir(exist_ok=True)
        nbformat.write(build_notebook(BOOK / f"{chapter}.md", solutions=False), chapter_nb)
    if not only or CAPSTONE in only:
        path = out / "source" / CAPSTONE / f"{CAPSTONE}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(capstone_notebook(summative=summative, max_hints=max_hints), path)
        written.append(path)
    return written


def release(out: Path, chapter: str) -> None:
    """``nbgrader generate_assignment``: the learners' notebook, in ``out/release/<chapter>/``, with the
    chapter copy without solutions beside it (``chapter/<chapter>.ipynb``)."""
    # nbgrader runs alembic as a command: this environment's bin/ goes first on PATH
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter, "--force"],
                   cwd=out, env=env, check=True)
    # nbgrader copies no notebook it does not grade: the chapter copy goes to the release here
    copy = out / "source" / chapter / "chapter"
    if copy.is_dir():
        shutil.copytree(copy, out / "release" / chapter / "chapter", dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapters to write (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the course folder")
    parser.add_argument("--release", action="store_true",
                        help="also run nbgrader generate_assignment for each chapter written")
    parser.add_argument("--summative", action="store_true",
                        help="graded work: solution() off, hints limited by --hints, the kit's own "
                             "solutions refused by check()")
    parser.add_argument("--hints", type=int, default=0, metavar="N",
                        help="with --summative: hints 1 to N of each exercise stay available "
                             "(default 0: none)")
    extra = shlex.split(os.environ.get("ASSIGNMENTS", ""))  # `make assignments ASSIGNMENTS=...`
    args = parser.parse_args(extra + list(sys.argv[1:] if argv is None else argv))
    if args.hints and not args.summative:
        parser.error("--hints limits the hints of --summative assignments; add --summative")
    if args.hints < 0:
        parser.error(f"--hints takes a number >= 0, got {args.hints}")
    written = write_course(args.out, args.chapters or None, summative=args.summative,
                           max_hints=args.hints)
    if args.release:
        for path in written[1:]:
            release(args.out.resolve(), path.parent.name)
    step = "collect submissions into submitted/<learner>/<chapter>/" if args.release else \
        "nbgrader generate_assignment <chapter>"
    mode = (f"summative (no solution(), {args.hints} hint(s) per exercise)" if args.summative
            else "formative (hints and solution() available)")
    print(textwrap.dedent(f"""\
        wrote {len(written) - 1} {mode} assignment(s) and nbgrader_config.py into {args.out}
        next, in that folder: {step}, then nbgrader autograde <chapter>, grade the open answers
        (nbgrader formgrader), nbgrader export"""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
