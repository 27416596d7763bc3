"""Cross-references of the book: every {doc} link names a page of the book, every {ref} a label.

Pages get split and renamed (``beyond`` became ``beyond_decay``, ``beyond_delta`` and
``beyond_tour``); a link to the old name builds with only a warning, so these tests name the page and
the link instead. A page counts when its file is in book/ and _toc.yml lists it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
PAGES = sorted(BOOK.glob("*.md"))
ROLE = re.compile(r"\{(doc|ref|numref)\}`([^`]+)`")
LABEL = re.compile(r"^\(([\w-]+)\)=\s*$|^:(?:label|name):\s*(\S+)\s*$", flags=re.M)


def toc_pages() -> set[str]:
    """Every page _toc.yml lists, as its file's stem under book/ (``book/causal`` -> ``causal``)."""
    def files(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("file", "root") and isinstance(value, str):
                    yield value
                else:
                    yield from files(value)
        elif isinstance(node, list):
            for item in node:
                yield from files(item)

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    return {Path(f).with_suffix("").name for f in files(toc) if f.startswith("book/")}


def targets(role: str) -> list[tuple[str, str]]:
    """(page, target) of every use of ``{role}`` in book/*.md; ``Text <target>`` gives the target."""
    out = []
    for path in PAGES:
        for kind, body in ROLE.findall(path.read_text(encoding="utf-8")):
            if kind == role or (role == "ref" and kind == "numref"):
                m = re.fullmatch(r"(?s).*<([^<>]+)>\s*", body)
                out.append((path.stem, (m.group(1) if m else body).strip()))
    return out


def labels() -> set[str]:
    return {a or b for path in PAGES for a, b in LABEL.findall(path.read_text(encoding="utf-8"))}


def test_the_book_is_read():
    # the checks below mean something only if they see the pages, the links and the labels
    assert {"intro", "softmax", "beyond_decay", "beyond_tour", "instructors"} <= toc_pages()
    assert ("instructors", "beyond_delta") in targets("doc")
    assert ("instructors", "sec-instructors-grading") in targets("ref")
    assert {"sec-instructors-grading", "ex-causal-cumsum"} <= labels()
    assert targets("ref")


def _page_of(target: str) -> str:
    """The page a {doc} target names: relative to book/ (``causal``) or from the root (``/book/causal``)."""
    return target.lstrip("/").removeprefix("book/").removesuffix(".md")


@pytest.mark.parametrize("page", [p.stem for p in PAGES])
def test_every_doc_link_names_a_page_in_the_toc(page):
    pages = toc_pages()
    for source, target in targets("doc"):
        if source != page:
            continue
        name = _page_of(target)
        assert (BOOK / f"{name}.md").is_file(), f"{page}.md links {{doc}}`{target}`: no book/{name}.md"
        assert name in pages, f"{page}.md links {{doc}}`{target}`, which _toc.yml does not list"


def test_every_ref_names_a_label():
    known = labels()
    missing = sorted({f"{page}.md: {{ref}}`{target}`" for page, target in targets("ref")
                      if target not in known})
    assert not missing, "references to labels no page defines:\n" + "\n".join(missing)


def test_every_page_is_in_the_toc():
    # a page left out of _toc.yml builds, unlinked, with only a warning
    assert {p.stem for p in PAGES} == toc_pages()
