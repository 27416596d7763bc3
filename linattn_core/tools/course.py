"""Teaching material built from the exercises: answer keys, typical wrong answers, exit tickets.

Everything here reads :mod:`linattn_core.tools.exercises`, so the answer key, the wrong answers a teacher
shows in class and the autograder (``scripts/make_assignments.py``) all use the same checks the
learners run. From a shell::

    python -m linattn_core.tools.course answers                      # every exercise's solution, checked
    python -m linattn_core.tools.course mistakes causal_cumsum_mine  # its typical wrong answers, feedback
    python -m linattn_core.tools.course mistakes                     # ... for every exercise
    python -m linattn_core.tools.course rubrics                      # the open exercises' rubrics
    python -m linattn_core.tools.course exit-tickets                 # every exit ticket, to print
    python -m linattn_core.tools.course exit-tickets --key causal    # ... with the answers marked

In a notebook, ``course.show_mistakes("causal_cumsum_mine")`` prints the same, and
``course.quiz("causal")`` shows that chapter's exit ticket (``quizzes/causal.json`` beside this
module, package data).

In graded work (``exercises.summative()``, which a released assignment calls in its locked first
cell) the answer keys and the rubrics answer nothing: :func:`answer_key`, :func:`rubric` and
:func:`model_answer` return an empty string. The open exercises' model answers are not in the
package at all: they live in the teacher's file ``teacher/model_answers.json`` of the repository
(or the file ``LINATTN_TEACHER_FILE`` names), read when it is there.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from . import exercises
from .exercises import CheckResult, Exercise, grading
from .exercises.grading import practice_mode

__all__ = ["LIBRARY_SHORTCUT", "QUIZ_CHAPTERS", "WrongAnswer", "answer_key", "exit_tickets", "load_quiz",
           "model_answer", "quiz", "rubric", "show_mistakes", "teacher_file", "wrong_answers"]

# The cause of the wrong answer that calls the library instead of computing the answer (the
# feedback names the function it called).
LIBRARY_SHORTCUT = ("you called the library's own function instead of computing the answer: check() "
                    "refuses it and names the function")

# The chapters with an exit ticket, in the book's order (one JSON file each in QUIZZES).
QUIZ_CHAPTERS = ("softmax", "associative", "feature_maps", "feature_maps_random", "causal", "tradeoffs",
                 "timing", "beyond_decay", "beyond_delta", "beyond_tour", "training")


@dataclass
class WrongAnswer:
    """One typical wrong answer run through ``check()``: the diagnosis it was built for, the feedback."""

    exercise: str
    expected_cause: str
    result: CheckResult

    @property
    def diagnosed(self) -> bool:
        """Whether the feedback names a cause.

        A "Likely cause" line, a list of candidate causes, or, for an answer that raises, the
        exercise's advice for that error.
        """
        text = " ".join(self.result.feedback.split())
        if "Likely cause" in text or "cannot tell these causes apart" in text:
            return True
        if "calls the library's own" in text:  # the library shortcut, named
            return True
        advice = [" ".join(a.split()) for _, a in _exercise(self.exercise).exception_hints]
        return "your function raised" in text and any(a in text for a in advice)


def _quiet_check(ex: Exercise, fn) -> CheckResult:
    """``ex.check(fn)`` without printing (the feedback stays in the result)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return ex.check(fn)


def _exercise(name: str | Exercise) -> Exercise:
    return name if isinstance(name, Exercise) else exercises.get(name)


def wrong_answers(name: str | Exercise) -> list[WrongAnswer]:
    """Run every typical mistake of an exercise through its ``check()``, silently.

    The mistakes are the exercise's own (the functions its feedback recognises), then, where the
    library has the answer, the shortcut that calls it; so what this returns is exactly what a
    learner who made that mistake would read.
    """
    ex = _exercise(name)
    with practice_mode():
        out = [WrongAnswer(ex.name, m.message, _quiet_check(ex, m.fn)) for m in ex.mistakes]
        if ex.library_answer is not None:
            out.append(WrongAnswer(ex.name, LIBRARY_SHORTCUT, _quiet_check(ex, ex.library_answer)))
    return out


def show_mistakes(name: str | Exercise) -> None:
    """Print each typical wrong answer of an exercise and what ``check()`` tells the learner."""
    ex = _exercise(name)
    print(f"== {ex.path} ({ex.name}): {ex.title}")
    wrong = wrong_answers(ex)
    for number, answer in enumerate(wrong, start=1):
        print(f"\n-- wrong answer {number} of {len(wrong)}: {answer.expected_cause}")
        print(answer.result.feedback)
    print()


def answer_key(name: str | Exercise) -> str:
    """The reference solution of an exercise, as text, after checking that it passes ("" in graded work)."""
    ex = _exercise(name)
    with practice_mode() as practice:
        if not practice:
            return ""
        result = _quiet_check(ex, ex.solution_fn)
        source = ex.solution_source()
    status = "passes check()" if result else "FAILS check(): report this as a bug"
    return (f"== {ex.path} ({ex.name}), {ex.chapter}.md, {'*' * ex.difficulty}, "
            f"~{ex.minutes} min, {ex.difficulty} point{'s' if ex.difficulty > 1 else ''}: "
            f"{ex.title}\n{ex.task}\n\n{source}\n# {status}\n")


def _open(label: str) -> exercises.OpenExercise:
    known = {**exercises.OPEN, exercises.capstone.LAB.label: exercises.capstone.LAB}
    try:
        return known[label]
    except KeyError:
        raise KeyError(f"no open exercise labelled {label!r}; the labels are: "
                       f"{', '.join(known)}") from None


# The teacher's file: the open exercises' model answers, kept out of the package (a learner's install
# and a released notebook never carry it). A checkout has it at teacher/model_answers.json.
TEACHER_FILE = Path(__file__).resolve().parents[2] / "teacher" / "model_answers.json"


def teacher_file() -> Path | None:
    """Where the model answers are: ``LINATTN_TEACHER_FILE``, else the checkout's ``teacher/`` (or None)."""
    named = os.environ.get("LINATTN_TEACHER_FILE")
    here = Path.cwd() / "teacher" / "model_answers.json"
    for path in ([Path(named)] if named else []) + [TEACHER_FILE, here]:
        if path.is_file():
            return path
    return None


def model_answer(label: str) -> str:
    """What a full answer to an open exercise says, from the teacher's file ("" in graded work or
    where the file is not there)."""
    _open(label)
    if grading.is_summative():
        return ""
    path = teacher_file()
    if path is None:
        return ""
    return str(json.loads(path.read_text(encoding="utf-8")).get(label, ""))


def rubric(label: str) -> str:
    """An open exercise's rubric and model answer, as text ("" in graded work)."""
    ex = _open(label)
    if grading.is_summative():
        return ""
    answer = model_answer(label) or ("(the model answer is in the teacher's file, "
                                     "teacher/model_answers.json, which this installation lacks)")
    return (f"== {ex.label} ({ex.chapter}.md), {'*' * ex.difficulty}, ~{ex.minutes} min, "
            f"{ex.points} points: {ex.title}\n{ex.rubric_markdown()}\n"
            f"A full answer: {answer}\n")


# -- exit tickets ---------------------------------------------------------------------------------
# The questions travel with the package (package data), so a notebook finds them wherever it runs:
# in a checkout, on Colab, on Binder, offline.
QUIZZES = Path(__file__).resolve().parent / "quizzes"


def load_quiz(chapter: str) -> list[dict]:
    """The exit-ticket questions of a chapter, in jupyterquiz's JSON format."""
    if chapter not in QUIZ_CHAPTERS:
        raise ValueError(f"chapter must be one of {', '.join(QUIZ_CHAPTERS)}; got {chapter!r}")
    path = QUIZZES / f"{chapter}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: linattn_core was installed without its package data; "
                                "the questions are also on the book's 'Exit tickets' page")
    return json.loads(path.read_text(encoding="utf-8"))


# jupyterquiz loads MathJax from a CDN when the page has a MathJax without `typeset`; the site serves
# its own MathJax and the questions need none (they are plain text), so that load is cut.
_CDN_MATHJAX = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-svg.js"


def quiz_html(chapter: str, seed: int = 0) -> str:
    """One self-contained HTML block (markup, style, script) showing a chapter's exit ticket.

    The script is jupyterquiz's own, inlined, with the questions embedded: nothing is fetched, so
    the quiz works on the static site offline and in any notebook. ``seed`` fixes the element id
    (answers are shuffled in the browser).
    """
    from jupyterquiz.dynamic.loader import load_questions_script
    from jupyterquiz.dynamic.renderer import build_script, build_styles, render_div

    # jupyterquiz uses the id as a JavaScript identifier too: letters and underscores only
    div_id = f"quiz_{chapter}_" + "".join(
        random.Random(f"{chapter}:{seed}").choices("abcdefghijklmnopqrstuvwxyz", k=6))
    prefix, static, url = load_questions_script(load_quiz(chapter), div_id)
    colours = {"--jq-multiple-choice-bg": "#345995", "--jq-mc-button-bg": "#fafafa",
               "--jq-mc-button-border": "#e0e0e0e0", "--jq-mc-button-inset-shadow": "#555555",
               "--jq-many-choice-bg": "#8a4f7d", "--jq-numeric-bg": "#345995",
               "--jq-numeric-input-bg": "#1f3a66", "--jq-numeric-input-label": "#101010",
               "--jq-numeric-input-shadow": "#999999", "--jq-string-bg": "#4c1a57",
               "--jq-incorrect-color": "#c80202", "--jq-correct-color": "#009113",
               "--jq-text-color": "#fafafa", "--jq-link-color": "#9abafa"}
    div = render_div(div_id, False, True, False, 1_000_000, 700, 10, "left")
    script = build_script(prefix, static, url, div_id, True).replace(_CDN_MATHJAX, "")
    # One scope per quiz, in which MathJax is undefined: the questions are plain text, and
    # jupyterquiz's typesetting calls fail on JupyterLab's MathJax, which has no `version`.
    script = f"(function () {{\nvar MathJax;\n{script}{_label_inputs(div_id)}}})();"
    return f"{div}</div>{build_styles(div_id, colours)}<script>{script}</script>"


def _label_inputs(div_id: str) -> str:
    """JavaScript naming jupyterquiz's number fields for screen readers (its own label is not tied
    to the field), once the questions are drawn."""
    return ("\nfunction label_" + div_id + "() { document.querySelectorAll('#" + div_id +
            " input.Input-text').forEach(function (el) { el.setAttribute('aria-label', "
            "'your answer (a number; press Enter to check)'); }); }\n"
            "label_" + div_id + "(); setTimeout(label_" + div_id + ", 500);\n")


def exit_tickets(chapters: list[str] | None = None, *, key: bool = False) -> str:
    """The exit tickets as plain text, to print: each question with its choices (a box each), and
    with ``key`` the right answer marked and the feedback a learner gets."""
    lines = []
    for chapter in chapters or QUIZ_CHAPTERS:
        lines.append(f"== Exit ticket: {chapter}.md" + (" (key)" if key else ""))
        for number, q in enumerate(load_quiz(chapter), start=1):
            lines.append(f"{number}. {q['question']}")
            if q["type"] == "numeric":
                right = [a for a in q["answers"] if a.get("correct")]
                lines.append("   Answer (a number): ______")
                if key:
                    lines += [f"   KEY: {a['value']}  ({a.get('feedback', '')})" for a in right]
            else:
                for letter, a in zip("abcdefgh", q["answers"], strict=False):
                    mark = ("[x]" if a.get("correct") else "[ ]") if key else "[ ]"
                    lines.append(f"   {mark} {letter}) {a['answer']}")
                    if key and a.get("correct"):
                        lines.append(f"          {a.get('feedback', '')}")
        lines.append("")
    return "\n".join(lines)


def quiz(chapter: str) -> None:
    """Display a chapter's exit ticket in a notebook (or on the site, when the book is built)."""
    from IPython.display import HTML, display

    display(HTML(quiz_html(chapter)))


# -- command line ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("answers", "mistakes", "rubrics", "exit-tickets"):
        print(__doc__.split("From a shell::", 1)[1].split("In a notebook", 1)[0].rstrip())
        return 2
    if args[0] == "exit-tickets":
        rest = [a for a in args[1:] if a != "--key"]
        print(exit_tickets(rest or None, key="--key" in args[1:]))
        return 0
    if args[0] == "rubrics":
        for label in args[1:] or list(exercises.OPEN):
            print(rubric(label))
        return 0
    names = args[1:] or list(exercises.EXERCISES)
    for name in names:
        if args[0] == "answers":
            print(answer_key(name))
        else:
            show_mistakes(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
