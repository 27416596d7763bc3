"""Teaching material built from the exercises: answer keys, typical wrong answers, exit tickets.

Everything here reads :mod:`linattn_core.tools.exercises`, so the answer key, the wrong answers a teacher
shows in class and the autograder (``scripts/make_assignments.py``) all use the same checks the
learners run. From a shell::

    python -m linattn_core.tools.course answers                      # every exercise's solution, checked
    python -m linattn_core.tools.course mistakes causal_cumsum_mine  # its typical wrong answers, feedback
    python -m linattn_core.tools.course mistakes                     # ... for every exercise
    python -m linattn_core.tools.course rubrics                      # the open exercises' rubrics

In a notebook, ``course.show_mistakes("causal_cumsum_mine")`` prints the same, and
``course.quiz("causal")`` shows that chapter's exit ticket (``quizzes/causal.json`` beside this
module, package data).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from . import exercises
from .exercises import CheckResult, Exercise
from .exercises.checker import practice_mode

__all__ = ["LIBRARY_SHORTCUT", "QUIZ_CHAPTERS", "WrongAnswer", "answer_key", "load_quiz", "quiz",
           "rubric", "show_mistakes", "wrong_answers"]

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
    """The reference solution of an exercise, as text, after checking that it passes."""
    ex = _exercise(name)
    with practice_mode():
        result = _quiet_check(ex, ex.solution_fn)
    status = "passes check()" if result else "FAILS check(): report this as a bug"
    return (f"== {ex.path} ({ex.name}), {ex.chapter}.md, {'*' * ex.difficulty}, "
            f"~{ex.minutes} min, {ex.difficulty} point{'s' if ex.difficulty > 1 else ''}: "
            f"{ex.title}\n{ex.task}\n\n{ex.solution_source()}\n# {status}\n")


def rubric(label: str) -> str:
    """An open exercise's rubric and model answer, as text (``exercises.OPEN`` has the labels)."""
    try:
        ex = exercises.OPEN[label]
    except KeyError:
        raise KeyError(f"no open exercise labelled {label!r}; the labels are: "
                       f"{', '.join(exercises.OPEN)}") from None
    return (f"== {ex.label} ({ex.chapter}.md), {'*' * ex.difficulty}, ~{ex.minutes} min, "
            f"{ex.points} points: {ex.title}\n{ex.rubric_markdown()}\n"
            f"A full answer: {ex.model_answer}\n")


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


def quiz(chapter: str) -> None:
    """Display a chapter's exit ticket in a notebook (or on the site, when the book is built)."""
    from IPython.display import HTML, display

    display(HTML(quiz_html(chapter)))


# -- command line ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("answers", "mistakes", "rubrics"):
        print(__doc__.split("From a shell::", 1)[1].split("In a notebook", 1)[0].rstrip())
        return 2
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
