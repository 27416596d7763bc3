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
        assert label in out and f"{ex.points} points" in out and course.model_answer(label)[:40] in out
    with pytest.raises(KeyError, match="no open exercise"):
        course.rubric("nope")
    assert course.main([]) == 2


@pytest.mark.parametrize("name", [n for n in NAMES if exercises.get(n).library_answer is not None])
def test_the_library_shortcut_is_a_listed_wrong_answer(name):
    shortcut = [w for w in course.wrong_answers(name) if w.expected_cause == course.LIBRARY_SHORTCUT]
    assert len(shortcut) == 1 and not shortcut[0].result.passed and shortcut[0].diagnosed
    assert "calls the library's own `linattn_core." in " ".join(shortcut[0].result.feedback.split())


def test_teacher_tools_answer_nothing_in_graded_work(capsys):
    assert "# passes check()" in course.answer_key("kv_cache_bytes")  # practice: the key
    assert course.model_answer("ex-beyond-lms") and "A full answer" in course.rubric("ex-beyond-lms")
    exercises.summative(max_hints=0)
    assert course.answer_key("kv_cache_bytes") == ""
    assert course.rubric("ex-beyond-lms") == "" and course.model_answer("ex-beyond-lms") == ""
    assert exercises.get("kv_cache_bytes").solution_source() == ""
    assert all(not w.result.passed for w in course.wrong_answers("kv_cache_bytes"))
    exercises.get("kv_cache_bytes").solution()  # still graded after the teacher's tools ran
    assert "switched off" in capsys.readouterr().out
    assert not exercises.formative() and exercises.is_summative()  # locked
    assert "stays on" in capsys.readouterr().out


def test_model_answers_live_in_the_teachers_file_not_in_the_package(tmp_path, monkeypatch):
    import linattn_core
    from linattn_core.tools.exercises import open as open_exercises

    answers = json.loads((ROOT / "teacher" / "model_answers.json").read_text(encoding="utf-8"))
    labels = set(exercises.OPEN)
    assert set(answers) == labels and all(a.strip() for a in answers.values())
    package = Path(linattn_core.__file__).parent
    for path in package.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".json", ".md", ".txt"):
            text = path.read_text(encoding="utf-8", errors="ignore")
            for answer in answers.values():
                assert answer[:60] not in text, path
    assert not any(hasattr(ex, "model_answer") for ex in open_exercises.OPEN.values())
    # an install without the teacher's file: the rubric still prints, the model answer does not
    monkeypatch.setattr(course, "TEACHER_FILE", tmp_path / "none.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LINATTN_TEACHER_FILE", raising=False)
    assert course.teacher_file() is None and course.model_answer("ex-beyond-lms") == ""
    assert "lacks" in course.rubric("ex-beyond-lms")
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"ex-beyond-lms": "my key"}), encoding="utf-8")
    monkeypatch.setenv("LINATTN_TEACHER_FILE", str(mine))
    assert course.model_answer("ex-beyond-lms") == "my key"


def test_exit_tickets_print_with_and_without_their_key(capsys):
    assert course.main(["exit-tickets"]) == 0
    blank = capsys.readouterr().out
    assert course.main(["exit-tickets", "--key"]) == 0
    key = capsys.readouterr().out
    for chapter in course.QUIZ_CHAPTERS:
        assert f"== Exit ticket: {chapter}.md" in blank and f"{chapter}.md (key)" in key
        for q in course.load_quiz(chapter):
            assert q["question"] in blank and q["question"] in key
            for a in q["answers"]:
                if a.get("correct") and q["type"] == "numeric":
                    assert f"KEY: {a['value']}" in key and f"KEY: {a['value']}" not in blank
                elif a.get("correct"):
                    assert "] " in key and a["answer"] in key
    assert "[x]" in key and "[x]" not in blank
    assert course.main(["exit-tickets", "--key", "causal"]) == 0
    assert "softmax.md" not in capsys.readouterr().out


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
    plans = INSTRUCTORS.split("### One session of 90 minutes", 1)[1].split("(sec-instructors-explorers)=")[0]
    tables, current = [], []
    for line in plans.splitlines() + [""]:
        if line.startswith("| ") and not line.startswith("| ---") and not line.startswith("| Minutes"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current and not line.startswith("|"):
            tables.append(current)
            current = []
    return tables


def _needed(block: str) -> int:
    """Minutes the in-class exercises and explorers of a block need (those "started in class", those
    of a round-up of last week's work and those after "Homework" do not count)."""
    in_class = block.split("Homework")[0]
    if "started in class" in in_class or in_class.startswith("round-up"):
        return 5 * len(re.findall(r"`\w+_explorer`", in_class))
    names = [n for n in re.findall(r"`(\w+)`", in_class) if n in exercises.EXERCISES]
    return sum(exercises.get(n).minutes for n in names) + 5 * len(re.findall(r"`\w+_explorer`", in_class))


def test_session_plans_are_timed_honestly():
    """The one-session plan: blocks contiguous to 90 minutes, holding their exercises and explorers."""
    tables = _plan_tables()
    assert len(tables) == 1
    for table in tables:
        end = 0
        for span, block in table:
            a, b = (int(x) for x in span.split("-"))
            assert a == end, f"block {span} does not start where the last ended ({end})"
            end = b
            assert _needed(block) <= b - a, f"block {span} holds {_needed(block)} minutes: {block[:80]}"
        assert end == 90


def _course_rows() -> list[list[str]]:
    section = _section("sec-instructors-course")
    return [row for row in _table_rows(section) if row[0].isdigit()]


def test_ten_weeks_of_90_minutes_timed_honestly():
    rows = _course_rows()
    assert [int(r[0]) for r in rows] == list(range(1, 11))
    for week, reading, in_class, _, _ in rows:
        assert "{doc}`" in reading, week
        end = 0
        for m in re.finditer(r"(\d+)-(\d+) ([^;]*)", in_class):
            a, b, block = int(m.group(1)), int(m.group(2)), m.group(3)
            assert a == end, f"week {week}: block {a}-{b} does not start where the last ended ({end})"
            end = b
            assert _needed(block) <= b - a, f"week {week}, {a}-{b} holds {_needed(block)} minutes"
        assert end == 90, f"week {week} ends at {end}"


def test_ten_weeks_place_every_exercise_once_with_its_points():
    from linattn_core.tools.exercises import capstone

    titles = {ex.title: ex for ex in exercises.OPEN.values()}
    placed: list[str] = []
    total = 0
    for week, _, _, lab, _ in _course_rows():
        points = 0
        for name, value in re.findall(r"`(\w+)` (\d+)", lab):
            assert sum(exercises.get(name).points().values()) == int(value), (week, name)
            placed.append(name)
            points += int(value)
        for title, value in re.findall(r"\*([^*]+)\* (\d+)", lab):
            assert titles[title].points == int(value), (week, title)
            placed.append(titles[title].label)
            points += int(value)
        if "capstone" in lab:
            points += capstone.LAB.points
            placed.append(capstone.LAB.label)
        assert lab.endswith(f"**{points}**"), (week, lab)
        total += points
    assert sorted(placed) == sorted([*exercises.EXERCISES, *exercises.OPEN])  # the capstone among them
    tickets = {c.strip() for row in _course_rows() for c in row[4].split(",")}
    assert set(course.QUIZ_CHAPTERS) <= tickets
    weights = _words(_section("sec-instructors-course"))
    assert f"give {total - capstone.LAB.points} points" in weights and "the capstone 10" in weights


def test_capstone_brief_and_rubric_are_the_kits():
    from linattn_core.tools.exercises import capstone

    section = _words(_section("sec-instructors-capstone"))
    assert _words(capstone.BRIEF) in section
    assert "weeks 9-10" in INSTRUCTORS and f"{capstone.LAB.points} points" in section
    for points, criterion in capstone.LAB.rubric:
        assert f"- {points}: {_words(criterion)}" in section, criterion


def test_exercise_table_matches_the_exercises():
    rows = {m.group(1): row for row in _table_rows(_section("sec-instructors-exercises"))
            if (m := re.fullmatch(r"`(\w+)`", row[0]))}
    assert set(rows) == set(exercises.EXERCISES)
    for name, row in rows.items():
        ex = exercises.get(name)
        assert f"<{ex.chapter}>" in row[1], name
        assert row[2].count("★") == ex.difficulty, name
        assert row[3] == str(sum(ex.points().values())) == str(4 * ex.difficulty), name
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


def test_instructors_page_counts_the_questions_as_they_are():
    counts = [len(course.load_quiz(c)) for c in course.QUIZ_CHAPTERS]
    words = {3: "three", 4: "four", 5: "five"}
    low, high = words[min(counts)], words[max(counts)]
    said = f"{low} to {high}" if max(counts) - min(counts) > 1 else f"{low} or {high}"
    assert f"has {said} conceptual questions per chapter" in _words(INSTRUCTORS)


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
                  "four points per star", "graded by hand", "names the function called",
                  "cannot stop a learner", "locked", "teacher/model_answers.json",
                  "answer nothing", "part=", "chapter/<chapter>.ipynb"):
        assert words in section, words


@pytest.mark.parametrize("label", [k for k in exercises.OPEN if k != exercises.capstone.LAB.label])
def test_grading_section_shows_every_rubric(label):  # the capstone's: its own section, tested below
    ex = exercises.OPEN[label]
    section = _words(_section("sec-instructors-grading"))
    head = f"*{ex.title}* ({{doc}}`{ex.chapter}`, {'★' * ex.difficulty}, {ex.points} points):"
    assert head in section, head
    rubric = section.split(head, 1)[1]
    for points, criterion in ex.rubric:
        assert f"- {points}: {_words(criterion)}" in rubric, criterion
