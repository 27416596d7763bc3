"""Every name the book prints and every path the repository names exists, as printed.

A reader copies ``linattn_core.delta_rule_attention`` from a page or an exercise, or opens
``tests/book/test_binder.py`` because a comment names it: each must be there. The names are read from the
chapters and from the package's own text (docstrings, messages, exercises); the paths from every tracked
text file except the tests' fixtures.
"""

from __future__ import annotations

import importlib
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"linattn_core(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
PATH = re.compile(r"(?<![\w./-])((?:linattn_core|tests|scripts|book|notebooks|binder)/[\w./-]*\w)")
# copied at build time
NOT_TRACKED = {"book/_assets/plotly.min.js"}


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / p for p in out.stdout.split()]


def names_in(paths: list[Path]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in paths:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in NAME.findall(line):
                found.setdefault(name.rstrip("."), f"{path.relative_to(ROOT)}:{i}")
    return found


def resolves(name: str) -> bool:
    """``linattn_core.a.b.c``: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_the_name_finder_finds_a_missing_name():
    assert resolves("linattn_core.delta_rule_attention") and resolves("linattn_core.tools.timing.flops")
    assert not resolves("linattn_core.viz") and not resolves("linattn_core.delta.no_such_thing")


def test_every_name_the_book_and_the_package_print_is_importable_as_printed():
    sources = tracked("book/*.md", "linattn_core/*.py", "linattn_core/**/*.py", "*.md")
    names = names_in([p for p in sources if "results" not in p.parts])
    missing = {n: where for n, where in names.items() if not n.startswith("linattn_core.lm.results")
               and not resolves(n)}
    assert not missing, f"printed but not importable (name: where): {missing}"


def test_every_path_the_repository_names_exists():
    files = [p for p in tracked() if p.suffix not in (".ipynb", ".json", ".png", ".svg", ".gz", ".bib")
             and not p.relative_to(ROOT).parts[0] == "tests" and p.is_file()]
    missing = {}
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            for named in PATH.findall(line):
                named = named.rstrip(".")
                if named in NOT_TRACKED or "*" in named or re.search(r"[A-Z]{2,}", named):
                    continue  # a pattern (``epoch-NAME-lrRATE-seedS.json``), not a path
                if not any((ROOT / f"{named}{ext}").exists() for ext in ("", ".md")):  # _toc.yml omits .md
                    missing[named] = f"{path.relative_to(ROOT)}:{i}"
    assert not missing, f"named but not there (path: where): {missing}"


@pytest.mark.parametrize("name", ["delta_rule_attention", "decayed_linear_attention", "DecayedState",
                                  "DeltaRuleState"])
def test_the_rules_are_at_the_top_level(name):
    import linattn_core

    assert name in linattn_core.__all__ and resolves(f"linattn_core.{name}")
