"""The course material: answer keys and wrong answers, and the instructors page held to the code.

The wrong answers a teacher shows in class must each fail ``check()`` with a diagnosis (else the
demonstration shows nothing), every reference solution must pass, and the instructors page may
name only explorers and controls that exist, in session blocks long enough for what they hold.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from linattn_core.tools import course, exercises

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTORS = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
NAMES = list(exercises.EXERCISES)


@pytest.mark.parametrize("name", NAMES)
def test_every_wrong_answer_fails_with_a_diagnosis(name):
    wrong = course.wrong_answers(name)
    assert wrong, f"{name} has no typical wrong answer to show"
    for w in wrong:
        assert not w.result.passed, f"{name}: the wrong answer '{w.expected_cause}' passes check()"
        assert w.diagnosed, f"{name}: '{w.expected_cause}' fails without a diagnosis:\n{w.result.feedback}"


@pytest.mark.parametrize("name", NAMES)
def test_answer_key_passes_its_check(name):
    key = course.answer_key(name)
    ex = exercises.get(name)
    assert "# passes check()" in key
    assert f"def {ex.fn_name}(" in key


def test_command_line_prints_key_mistakes_and_rubrics(capsys):
    assert course.main(["answers", "kv_cache_bytes"]) == 0
    assert "passes check()" in capsys.readouterr().out
    for name in ("kv_cache_bytes", "softmax_attention_mine"):
        assert course.main(["mistakes", name]) == 0
        out = capsys.readouterr().out
        ex = exercises.get(name)
        assert out.count("-- wrong answer") == len(ex.mistakes) + (ex.library_answer is not None)
    assert course.main(["rubrics"]) == 0
    out = capsys.readouterr().out
    for label, ex in exercises.OPEN.items():
        assert label in out and f"{ex.points} points" in out and ex.model_answer[:40] in out
    with pytest.raises(KeyError, match="no open exercise"):
        course.rubric("nope")
    assert course.main([]) == 2


@pytest.mark.parametrize("name", [n for n in NAMES if exercises.get(n).library_answer is not None])
def test_the_library_shortcut_is_a_listed_wrong_answer(name):
    shortcut = [w for w in course.wrong_answers(name) if w.expected_cause == course.LIBRARY_SHORTCUT]
    assert len(shortcut) == 1 and not shortcut[0].result.passed and shortcut[0].diagnosed
    assert "calls the library's own `linattn_core." in " ".join(shortcut[0].result.feedback.split())


def test_teacher_tools_run_in_practice_mode_even_after_a_summative_cell(capsys):
    try:
        exercises.summative(max_hints=0)
        assert "# passes check()" in course.answer_key("kv_cache_bytes")
        assert all(not w.result.passed for w in course.wrong_answers("kv_cache_bytes"))
        exercises.get("kv_cache_bytes").solution()  # still summative outside the teacher's tools
        assert "switched off" in capsys.readouterr().out
    finally:
        exercises.formative()


# -- the instructors page ---------------------------------------------------------------------------
def _table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| ---")]


def _section(anchor: str) -> str:
    start = INSTRUCTORS.index(f"({anchor})=")
    end = INSTRUCTORS.find("\n(sec-", start + 1)
    return INSTRUCTORS[start:end if end > 0 else None]


def _live_controls() -> dict[str, set[str]]:
    """Each explorer's controls, as their labels read on screen (without the trailing colon)."""
    from linattn_core.tools import widgets

    out = {}
    for name in (n for n in dir(widgets) if n.endswith("_explorer")):
        box = getattr(widgets, name)(static=False)
        row = box.children[-2]  # the row of controls above the figure
        out[name] = {c.description.rstrip(": ").strip() for c in row.children if c.description}
    return out


@pytest.mark.slow
def test_explorers_and_controls_on_the_page_exist():
    live = _live_controls()
    table = {}
    for row in _table_rows(_section("sec-instructors-explorers")):
        m = re.fullmatch(r"`(\w+_explorer)`", row[0])
        if m:
            table[m.group(1)] = set(re.findall(r"\*([^*]+)\*", row[2]))
    assert table, "no table of explorers found on the instructors page"
    for name, controls in table.items():
        assert name in live, f"the instructors page lists {name}, which linattn_core.tools.widgets lacks"
        assert controls == live[name], f"{name}: the page says {sorted(controls)}, has {sorted(live[name])}"
    mentioned = set(re.findall(r"`(\w+_explorer)`", INSTRUCTORS))
    assert mentioned <= set(table), f"explorers named but missing from the table: {mentioned - set(table)}"
    assert set(live) <= set(table), f"explorers missing from the table: {set(live) - set(table)}"


def _plan_tables() -> list[list[list[str]]]:
    plans = _section("sec-instructors-plans").split("(sec-instructors-explorers)=")[0]
    tables, current = [], []
    for line in plans.splitlines() + [""]:
        if line.startswith("| ") and not line.startswith("| ---") and not line.startswith("| Minutes"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current and not line.startswith("|"):
            tables.append(current)
            current = []
    return tables


def test_session_plans_are_timed_honestly():
    """Blocks are contiguous to 90 minutes and hold their in-class exercises and explorers.

    An in-class exercise needs the time the exercise table gives; an explorer at least five
    minutes. Exercises named after "Homework" are not counted.
    """
    tables = _plan_tables()
    assert len(tables) >= 2
    for table in tables:
        end = 0
        for span, block in table:
            a, b = (int(x) for x in span.split("-"))
            assert a == end, f"block {span} does not start where the last ended ({end})"
            end = b
            in_class = block.split("Homework")[0]
            names = [n for n in re.findall(r"`(\w+)`", in_class) if n in exercises.EXERCISES]
            needed = sum(exercises.get(n).minutes for n in names if "started in class" not in in_class)
            needed += 5 * len(re.findall(r"`\w+_explorer`", in_class))
            assert needed <= b - a, f"block {span} holds {needed} minutes of work: {block[:80]}"
        assert end == 90


def test_exercise_table_matches_the_exercises():
    rows = {m.group(1): row for row in _table_rows(_section("sec-instructors-exercises"))
            if (m := re.fullmatch(r"`(\w+)`", row[0]))}
    assert set(rows) == set(exercises.EXERCISES)
    for name, row in rows.items():
        ex = exercises.get(name)
        assert f"<{ex.chapter}>" in row[1], name
        assert row[2].count("★") == ex.difficulty, name
        assert row[3] == str(ex.difficulty), name  # points in the assignments: the stars
        assert row[4] == f"{ex.minutes} min", name


# -- exit tickets -------------------------------------------------------------------------------
@pytest.mark.parametrize("chapter", course.QUIZ_CHAPTERS)
def test_quiz_files_are_well_formed(chapter):
    questions = json.loads((course.QUIZZES / f"{chapter}.json").read_text(encoding="utf-8"))
    assert 3 <= len(questions) <= 5
    for q in questions:
        assert q["type"] in ("multiple_choice", "many_choice", "numeric"), q
        assert q["question"].strip()
        if q["type"] == "numeric":
            assert any(a["type"] in ("value", "range") and a.get("correct") for a in q["answers"]), q
        else:
            correct = [a for a in q["answers"] if a["correct"]]
            assert correct and len(correct) < len(q["answers"]), q
            assert all(a.get("feedback") for a in q["answers"]), "every answer explains itself"
            if q["type"] == "multiple_choice":
                assert len(correct) == 1, q


def test_quiz_html_is_self_contained():
    html = course.quiz_html("causal")
    assert "<script>" in html and "Question" in html
    assert "cdn." not in html and "https://" not in html.replace("https://pypi", "")
    with pytest.raises(ValueError, match="chapter"):
        course.load_quiz("nope")


def test_quiz_page_shows_every_quiz():
    page = (ROOT / "book" / "quizzes.md").read_text(encoding="utf-8")
    shown = re.findall(r'^course\.quiz\("(\w+)"\)$', page, flags=re.M)  # the code cells
    assert shown == list(course.QUIZ_CHAPTERS)
    files = sorted(p.stem for p in course.QUIZZES.glob("*.json"))
    assert files == sorted(course.QUIZ_CHAPTERS)


def _words(text: str) -> str:
    return " ".join(text.split())


def test_grading_section_says_which_uses_and_how():
    section = _words(_section("sec-instructors-grading"))
    for words in ("Formative use", "Summative use", "--summative", "--hints",
                  "exercises.summative(max_hints=1)", 'ASSIGNMENTS="--summative --hints 1"',
                  "one per star", "graded by hand", "names the function called",
                  "cannot stop a learner"):
        assert words in section, words


@pytest.mark.parametrize("label", list(exercises.OPEN))
def test_grading_section_shows_every_rubric(label):
    ex = exercises.OPEN[label]
    section = _words(_section("sec-instructors-grading"))
    head = f"*{ex.title}* ({{doc}}`{ex.chapter}`, {'★' * ex.difficulty}, {ex.points} points):"
    assert head in section, head
    rubric = section.split(head, 1)[1]
    for points, criterion in ex.rubric:
        assert f"- {points}: {_words(criterion)}" in rubric, criterion
