"""The exit tickets (book/quizzes.md) on the built site, offline: rendered, answerable, self-contained.

The page is loaded with every host but 127.0.0.1 blocked. Each chapter's quiz must show all its
questions (from linattn_core/tools/quizzes/<chapter>.json); clicking the right answer of one question says so
with that answer's feedback, a wrong answer of another says it is wrong, and a typed number is
checked on Enter. Answers are found by their text in the JSON, not by the page's own markup of
which is right.

Run: ``.venv/bin/pytest tests/book/browser/test_quizzes.py -q`` after ``make build`` (or with
``LINATTN_SITE_DIR`` pointing at a build that has ``book/quizzes.html``).
"""

from __future__ import annotations

import json

import pytest
from _browser import SITE, missing

from linattn_core.tools import course

pytestmark = pytest.mark.browser

PAGE = "book/quizzes.html"


def _questions(chapter: str) -> list[dict]:
    return json.loads((course.QUIZZES / f"{chapter}.json").read_text(encoding="utf-8"))


@pytest.fixture
def quiz_page(server, new_page):
    if not (SITE / PAGE).is_file():
        missing(f"no {PAGE} in {SITE} (run `make build` first)")
    page, log = new_page()
    page.goto(server + PAGE, wait_until="load")
    page.wait_for_selector(".Quiz", timeout=15_000)
    return page, log


def _container(page, chapter: str):
    """The quiz of ``chapter`` alone: its id is ``quiz_<chapter>_`` and six letters, so a prefix would
    also match a chapter whose name extends this one (feature_maps, feature_maps_random)."""
    ids = page.eval_on_selector_all(f"[id^=quiz_{chapter}_]", "els => els.map(e => e.id)")
    mine = [i for i in ids if i[len(f"quiz_{chapter}_"):].isalpha()]
    assert len(mine) == 1, (chapter, ids)
    return page.locator(f"#{mine[0]}")


def _question_box(page, chapter: str, text: str):
    return _container(page, chapter).locator(".Quiz", has=page.locator(f"text={text}"))


def _choose(page, chapter: str, index: int, correct: bool):
    """Click an answer of question ``index`` of ``chapter`` (right or wrong, by its JSON text)."""
    q = _questions(chapter)[index]
    answer = next(a for a in q["answers"] if a["correct"] == correct)
    box = _question_box(page, chapter, q["question"])
    box.locator("label.MCButton", has_text=answer["answer"]).click()
    feedback = box.locator(".Feedback")
    return feedback, answer["feedback"]


def _verdict(feedback) -> str:
    """'correct', 'incorrect' or '' (not answered yet), from the feedback box's classes."""
    classes = set((feedback.get_attribute("class") or "").split())
    assert not {"correct", "incorrect"} <= classes, classes
    return "correct" if "correct" in classes else "incorrect" if "incorrect" in classes else ""


def test_every_quiz_renders_all_its_questions_offline(quiz_page):
    page, log = quiz_page
    for chapter in course.QUIZ_CHAPTERS:
        shown = _container(page, chapter).locator(".Quiz").count()
        assert shown == len(_questions(chapter)), f"{chapter}: {shown} questions shown"
    assert not log.problems(), log.problems()


def test_right_and_wrong_answers_get_their_feedback(quiz_page):
    page, log = quiz_page
    right, text = _choose(page, "causal", 0, correct=True)
    assert _verdict(right) == "correct"
    assert right.inner_text().strip() == text
    wrong, text = _choose(page, "causal", 2, correct=False)
    assert _verdict(wrong) == "incorrect"
    assert wrong.inner_text().strip() == text
    assert not log.problems(), log.problems()


def test_a_typed_number_is_checked(quiz_page):
    page, _ = quiz_page
    q = next(q for q in _questions("tradeoffs") if q["type"] == "numeric")
    box = _question_box(page, "tradeoffs", q["question"])
    field = box.locator("input.Input-text")
    field.fill(str(q["answers"][0]["value"] + 1))
    field.press("Enter")
    assert _verdict(box.locator(".Feedback")) == "incorrect"
    field.fill(str(q["answers"][0]["value"]))
    field.press("Enter")
    assert _verdict(box.locator(".Feedback")) == "correct"
