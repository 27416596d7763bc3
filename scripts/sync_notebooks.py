#!/usr/bin/env python
"""Generate the Colab notebooks, notebooks/<chapter>.ipynb, from the MyST Markdown chapters in book/.

Colab (and plain Jupyter without jupytext) cannot open a MyST ``.md`` file, so every chapter of book/
that is a notebook (its front matter has jupytext's ``format_name: myst`` and a ``kernelspec``) gets an
``.ipynb`` twin here. The chapters stay the source: never edit notebooks/ by hand.

    python scripts/sync_notebooks.py            # (re)write notebooks/ from book/
    python scripts/sync_notebooks.py --check    # exit 1 and list the notebooks that have drifted

The book's public home is one setting, ``repository: url / branch`` in ``_config.yml``: the launch
buttons (sphinx-book-theme reads it), the install cell that opens every chapter and notebook, the
links to the sources and the nbgrader notebooks (``scripts/make_assignments.py``) all come from it.
Writing also brings each chapter's install cell (its first code cell) in line with that setting;
``--check`` reports a chapter whose install cell differs.

What the conversion does, so that the result is the same on every machine and readable in Colab:

- cells come from jupytext; outputs and execution counts are empty; cell ids are ``<chapter>-<nnn>``;
  notebook metadata is only the kernelspec and the language; code cells keep only their tags (the
  Colab set-up cell keeps ``remove-cell``, which Colab ignores and the website uses);
- Markdown cells are turned from MyST into plain Jupyter Markdown: section labels are dropped,
  ``{ref}``/``{doc}`` become the linked title, ``{eq}`` becomes the equation's number (the display
  math gets a matching ``\\tag``), ``{cite}`` becomes "Author et al., year" linked to the paper, a
  pasted value (``{glue:text}``) names the line ``name = value`` that the cell measuring it prints
  (``viz.glue`` prints it outside the book build), and directives become Markdown (exercises and
  admonitions as quoted blocks with a bold title);
- every solution (a gated ``solution-start`` ... ``solution-end`` block, prose and code cells) becomes
  one Markdown cell, a collapsed ``<details>`` block with the code as text: "Run all" never runs a
  solution, and Colab shows it only when clicked, as the website's dropdown;
- a first Markdown cell says where the notebook comes from and links to its source.
"""

from __future__ import annotations

import argparse
import ast
import codecs
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import latexcodec  # noqa: F401 - registers the "ulatex" codec used to decode author names
import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTEBOOKS = ROOT / "notebooks"
BIB = BOOK / "references.bib"
CONFIG = ROOT / "_config.yml"
COLAB = "https://colab.research.google.com"


def home(config: Path = CONFIG) -> tuple[str, str]:
    """The book's public home, ``(repository url, branch)``, from ``repository:`` in ``_config.yml``."""
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    repository = data.get("repository") or {}
    url, branch = str(repository.get("url", "")).rstrip("/"), str(repository.get("branch", ""))
    if not url.startswith("https://") or not branch:
        raise ValueError(f"{config}: `repository:` needs `url: https://...` and `branch:`, "
                         f"got {repository!r}")
    return url, branch


REPOSITORY, BRANCH = home()


def setup_cell_source(url: str | None = None, branch: str | None = None) -> str:
    """The install cell that opens every chapter, notebook and assignment: the package from the home.

    Plain Python (no ``%pip``), so that it also runs where cells are executed without IPython; pip is
    the kernel's own (``sys.executable``), as ``%pip`` would choose.
    """
    url, branch = url or REPOSITORY, branch or BRANCH
    return ("# On Colab or a fresh kernel: install linattn_core from the repository if it is missing.\n"
            "try:\n"
            "    import linattn_core\n"
            "except ImportError:\n"
            "    import subprocess\n"
            "    import sys\n"
            "\n"
            '    subprocess.run([sys.executable, "-m", "pip", "install", "-q",\n'
            f'                    "linattn_core[course] @ git+{url}@{branch}"], check=True)\n'
            "    import linattn_core")


KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
ADMONITIONS = {
    "note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
    "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
    "seealso": "See also",
}
DROPPED_DIRECTIVES = {"bibliography", "tableofcontents", "nb-exec-table", "glossary", "solution-end"}


# --------------------------------------------------------------------------------------------------
# Which files are notebooks
# --------------------------------------------------------------------------------------------------
def front_matter(text: str) -> dict:
    """The YAML front matter of a Markdown file (empty if it has none)."""
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    data = yaml.safe_load(text[4:end]) or {}
    return data if isinstance(data, dict) else {}


def is_myst_notebook(path: Path) -> bool:
    meta = front_matter(path.read_text(encoding="utf-8"))
    rep = (meta.get("jupytext") or {}).get("text_representation") or {}
    return rep.get("format_name") == "myst" and "kernelspec" in meta


def chapter_files(book: Path = BOOK) -> list[Path]:
    """Every MyST notebook directly in book/ (sorted by name; files starting with _ are skipped)."""
    return sorted(p for p in book.glob("*.md") if not p.name.startswith("_") and is_myst_notebook(p))


# --------------------------------------------------------------------------------------------------
# The install cell of every chapter: the one place a chapter names the book's home
# --------------------------------------------------------------------------------------------------
_FIRST_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n((?::[^\n]*\n)*)(.*?)^```[ \t]*$", re.M | re.S)


def _install_cell(text: str) -> re.Match | None:
    """The chapter's first code cell, if it is the install cell (it imports linattn_core, or installs it)."""
    first = _FIRST_CODE_CELL.search(text)
    if first and "install" in first.group(2) and "import linattn_core" in first.group(2):
        return first
    return None


def setup_drift(book: Path = BOOK) -> list[str]:
    """Chapters whose install cell is missing or differs from the one ``_config.yml``'s home gives."""
    problems = []
    for chapter in chapter_files(book):
        cell = _install_cell(chapter.read_text(encoding="utf-8"))
        if cell is None:
            problems.append(f"no install cell first: {chapter.relative_to(book.parent)}")
        elif cell.group(2).rstrip("\n") != setup_cell_source():
            problems.append(f"install cell differs from _config.yml's repository: "
                            f"{chapter.relative_to(book.parent)}")
    return problems


def write_setup_cells(book: Path = BOOK) -> list[str]:
    """Give every chapter's install cell the source :func:`setup_cell_source` makes; return what changed."""
    changed = []
    for chapter in chapter_files(book):
        text = chapter.read_text(encoding="utf-8")
        cell = _install_cell(text)
        if cell is not None and cell.group(2).rstrip("\n") != setup_cell_source():
            text = text[:cell.start(2)] + setup_cell_source() + "\n" + text[cell.end(2):]
            chapter.write_text(text, encoding="utf-8")
            changed.append(f"wrote the install cell of {chapter.relative_to(book.parent)}")
    return changed


# --------------------------------------------------------------------------------------------------
# What the Markdown needs to know about the whole book: titles, labels, citations
# --------------------------------------------------------------------------------------------------
@dataclass
class BookIndex:
    titles: dict[str, str] = field(default_factory=dict)  # page stem -> first heading
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (page stem, title)
    citations: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (authors year, url)
    notebooks: set[str] = field(default_factory=set)  # stems of the pages that get a notebook
    equations: dict[str, tuple[str, int]] = field(default_factory=dict)  # label -> (page, number)
    chapter_numbers: dict[str, int] = field(default_factory=dict)  # page -> its number in the toc

    def equation_number(self, page: str, number: int) -> str:
        """As the website numbers it: (chapter.n) in numbered chapters, (n) elsewhere."""
        chapter = self.chapter_numbers.get(page)
        return f"{chapter}.{number}" if chapter is not None else str(number)


_LABEL_LINE = re.compile(r"^\(([A-Za-z0-9_:.-]+)\)=\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")
_MATH_LABEL = re.compile(r"^\$\$\s*\(([A-Za-z0-9_:.-]+)\)\s*$")


def chapter_numbers(toc: Path) -> dict[str, int]:
    """page stem -> chapter number, for the pages of the numbered parts of a jb-book _toc.yml."""
    if not toc.exists():
        return {}
    data = yaml.safe_load(toc.read_text(encoding="utf-8")) or {}
    numbers: dict[str, int] = {}
    for part in data.get("parts", []):
        if not part.get("numbered"):
            continue
        for chapter in part.get("chapters", []):
            if "file" in chapter:
                numbers[Path(chapter["file"]).stem] = len(numbers) + 1
    return numbers


def build_index(book: Path = BOOK, bib: Path = BIB) -> BookIndex:
    index = BookIndex(chapter_numbers=chapter_numbers(book.parent / "_toc.yml"))
    for page in sorted(book.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        if text.startswith("---\n"):  # skip the front matter
            text = text[text.find("\n---", 4) + 4:]
        pending: list[str] = []
        fence = ""  # the fence of the code block we are in, if any
        for line in text.splitlines():
            opener = re.match(r"^\s*(`{3,}|~{3,})", line)
            if fence:
                if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence) \
                        and not line.strip()[len(opener.group(1)):].strip():
                    fence = ""
                continue
            if opener and ("{code-cell}" in line or not re.search(r"\{[a-z-]+\}", line)):
                fence = opener.group(1)
                continue
            equation = _MATH_LABEL.match(line.strip())
            if equation and equation.group(1) not in index.equations:
                count = sum(1 for page_, _ in index.equations.values() if page_ == page.stem)
                index.equations[equation.group(1)] = (page.stem, count + 1)
            label = _LABEL_LINE.match(line)
            if label:
                pending.append(label.group(1))
                continue
            heading = _HEADING.match(line)
            if heading:
                title = heading.group(2)
                index.titles.setdefault(page.stem, title)
                for name in pending:
                    index.labels[name] = (page.stem, title)
            if line.strip():
                pending = []
    index.notebooks = {p.stem for p in chapter_files(book)}
    if bib.exists():
        index.citations = read_citations(bib)
    return index


def _latex_to_text(s: str) -> str:
    try:
        s = codecs.decode(s, "ulatex")
    except Exception:  # a name latexcodec cannot decode is shown as written
        pass
    return s.replace("{", "").replace("}", "")


def read_citations(bib: Path) -> dict[str, tuple[str, str]]:
    """key -> ("Vaswani et al., 2017", url) from the book's BibTeX file."""
    from pybtex.database import parse_file

    data = parse_file(str(bib))
    out = {}
    for key, entry in data.entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        lasts = [_latex_to_text(" ".join(p.last_names)) for p in people]
        if not lasts:
            who = _latex_to_text(entry.fields.get("title", key))
        elif len(lasts) == 1:
            who = lasts[0]
        elif len(lasts) == 2:
            who = f"{lasts[0]} and {lasts[1]}"
        else:
            who = f"{lasts[0]} et al."
        year = entry.fields.get("year", "n.d.")
        url = entry.fields.get("url", "")
        if not url and entry.fields.get("eprint"):
            url = f"https://arxiv.org/abs/{entry.fields['eprint']}"
        out[key] = (f"{who}, {year}", url)
    return out


# --------------------------------------------------------------------------------------------------
# MyST -> Jupyter Markdown
# --------------------------------------------------------------------------------------------------
_ROLE = re.compile(r"\{([a-z][a-z0-9:_-]*)\}`([^`]*)`")
_TEXT_TARGET = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.S)
_FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|:{3,})\s*\{([A-Za-z0-9_:-]+)\}\s*(.*?)\s*$")
_PLAIN_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


@dataclass
class PageContext:
    stem: str
    index: BookIndex
    equations: dict[str, int] = field(default_factory=dict)  # label -> number on this page
    glued: list[tuple[int, list[re.Pattern]]] = field(default_factory=list)  # (cell, names it glues)
    position: int = 0  # the cell being converted


# A value the website pastes into the prose ({glue:text}`name:.2f`) is, in a notebook, the line
# "name = value" that viz.glue prints in the cell that measures it.
PLACEHOLDER = re.compile(r"`([A-Za-z0-9_]+)` \*\(printed (above|below)\)\*")


def glued_names(source: str) -> list[re.Pattern]:
    """The names a code cell glues, ``glue("name", ...)``; an f-string name becomes a pattern."""
    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        func = getattr(node, "func", None)
        if not isinstance(node, ast.Call) or getattr(func, "id", getattr(func, "attr", None)) != "glue":
            continue
        first = node.args[0] if node.args else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.append(re.compile(re.escape(first.value)))
        elif isinstance(first, ast.JoinedStr):  # f"loss_{kind}": any name of that shape
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+" for v in first.values]
            names.append(re.compile("".join(parts)))
    return names


def glue_placeholder(name: str, ctx: PageContext) -> str:
    """What a notebook shows for a pasted value: the name of the line the cell prints, and where."""
    cells = [i for i, patterns in ctx.glued if any(p.fullmatch(name) for p in patterns)]
    if not cells:
        raise ValueError(f"book/{ctx.stem}.md pastes {{glue:text}}`{name}` but no code cell of the page "
                         f"calls glue({name!r}, ...)")
    where = "above" if min(cells) < ctx.position else "below"
    return f"`{name}` *(printed {where})*"


def number_equations(markdown_sources: list[str]) -> dict[str, int]:
    """Number the labelled display equations of a page in order, as the website does."""
    numbers: dict[str, int] = {}
    for src in markdown_sources:
        for line in src.splitlines():
            m = _MATH_LABEL.match(line.strip())
            if m and m.group(1) not in numbers:
                numbers[m.group(1)] = len(numbers) + 1
    return numbers


def _split_text_target(content: str) -> tuple[str | None, str]:
    m = _TEXT_TARGET.match(content.strip())
    if m and m.group(1):
        return m.group(1).strip(), m.group(2).strip()
    return None, content.strip()


def convert_role(name: str, content: str, ctx: PageContext) -> str:
    index = ctx.index

    def _page_link(stem: str) -> str:
        # a sibling notebook, or the page's source on GitHub when it is not a notebook
        if stem in index.notebooks:
            return f"{stem}.ipynb"
        return f"{REPOSITORY}/blob/{BRANCH}/book/{stem}.md"

    if name in ("ref", "numref"):
        text, label = _split_text_target(content)
        page, title = index.labels.get(label, (None, label))
        text = (text or title).replace("%s", "").strip() or title
        if page is None:
            return text
        if page == ctx.stem:
            return f"*{text}*"
        return f"[{text}]({_page_link(page)})"
    if name == "doc":
        text, target = _split_text_target(content)
        stem = Path(target).stem
        text = text or index.titles.get(stem, stem)
        return f"[{text}]({_page_link(stem)})"
    if name in ("eq", "math:numref"):
        label = content.strip()
        if label in ctx.equations:
            return f"({index.equation_number(ctx.stem, ctx.equations[label])})"
        if label in index.equations:  # an equation of another page
            page, number = index.equations[label]
            return (f"equation ({index.equation_number(page, number)}) of "
                    f"[{index.titles.get(page, page)}]({_page_link(page)})")
        return f"({label})"
    if name.startswith("cite"):
        parts = []
        for key in (k.strip() for k in content.split(",")):
            who_year, url = index.citations.get(key, (key, ""))
            if name in ("cite:t", "cite:ct"):
                who, _, year = who_year.rpartition(", ")
                who_year = f"{who} ({year})" if who else who_year
            parts.append(f"[{who_year}]({url})" if url else who_year)
        joined = "; ".join(parts)
        return joined if name in ("cite:t", "cite:ct") else f"({joined})"
    if name == "math":
        return f"${content}$"
    if name.startswith("glue"):  # a figure the website pastes from a cell: in a notebook, the cell prints it
        return glue_placeholder(content.split(":", 1)[0].strip(), ctx)
    if name in ("term", "abbr", "download"):
        text, _ = _split_text_target(content)
        return text or content
    return f"`{content}`"  # any other role: keep its content, as code


def convert_inline(line: str, ctx: PageContext) -> str:
    return _ROLE.sub(lambda m: convert_role(m.group(1), m.group(2), ctx), line)


def _quote(lines: list[str]) -> list[str]:
    return [("> " + line) if line.strip() else ">" for line in lines]


def _render_directive(name: str, argument: str, options: dict[str, str], body: list[str],
                      ctx: PageContext) -> list[str]:
    body = convert_markdown("\n".join(body), ctx).splitlines() if body else []
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    if name in DROPPED_DIRECTIVES:
        return []
    if name == "exercise":
        title = f"Exercise: {convert_inline(argument, ctx)}" if argument else "Exercise"
        return _quote([f"**{title}**", "", *body])
    if name in ("solution-start", "solution"):
        head = ["**Solution** (try the exercise first)"]
        return head if name == "solution-start" else _quote([*head, "", *body])
    if name in ADMONITIONS or name == "admonition":
        title = convert_inline(argument, ctx) if name == "admonition" else ADMONITIONS[name]
        return _quote([f"**{title}**", "", *body])
    if name in ("dropdown", "toggle"):
        return [f"**{convert_inline(argument, ctx)}**", "", *body] if argument else body
    if name in ("math",):
        label = options.get("label")
        tag = ([f"\\tag{{{ctx.index.equation_number(ctx.stem, ctx.equations[label])}}}"]
               if label in ctx.equations else [])
        return ["$$", *body, *tag, "$$"]
    if name in ("code-block", "code", "sourcecode"):
        return [f"```{argument}", *body, "```"]
    return []  # unknown directive: nothing a notebook can show


def convert_markdown(src: str, ctx: PageContext) -> str:
    """MyST Markdown of one cell -> Jupyter Markdown."""
    lines = src.splitlines()
    out: list[str] = []
    i = 0
    in_math = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not in_math and _LABEL_LINE.match(stripped):
            i += 1
            continue
        # display math: $$ ... $$ (label)  ->  $$ ... \tag{n} $$
        if stripped.startswith("$$"):
            math_label = _MATH_LABEL.match(stripped)
            if in_math:
                if math_label and math_label.group(1) in ctx.equations:
                    number = ctx.index.equation_number(ctx.stem, ctx.equations[math_label.group(1)])
                    out.append(f"\\tag{{{number}}}")
                out.append("$$")
                in_math = False
                i += 1
                continue
            if stripped == "$$":
                in_math = True
                out.append(line)
                i += 1
                continue
        if in_math:
            out.append(line)
            i += 1
            continue
        directive = _FENCE_OPEN.match(line)
        if directive:
            _, fence, name, argument = directive.groups()
            j = i + 1
            options: dict[str, str] = {}
            while j < len(lines) and re.match(r"^\s*:[A-Za-z0-9_-]+:", lines[j]):
                key, _, value = lines[j].strip()[1:].partition(":")
                options[key.strip()] = value.strip()
                j += 1
            body: list[str] = []
            close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
            while j < len(lines) and not close.match(lines[j]):
                body.append(lines[j])
                j += 1
            out.extend(_render_directive(name.lower(), argument, options, body, ctx))
            i = j + 1
            continue
        plain = _PLAIN_FENCE.match(line)
        if plain:  # a plain code block: copy it untouched
            fence = plain.group(2)
            out.append(line)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                out.append(lines[j])
                j += 1
            if j < len(lines):
                out.append(lines[j])
            i = j + 1
            continue
        out.append(convert_inline(line, ctx))
        i += 1
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


# --------------------------------------------------------------------------------------------------
# Notebooks
# --------------------------------------------------------------------------------------------------
def header_cell(stem: str, title: str) -> nbformat.NotebookNode:
    github = REPOSITORY.split("github.com/", 1)[1] if "github.com/" in REPOSITORY else None
    colab = (f" [Open in Colab]({COLAB}/github/{github}/blob/{BRANCH}/notebooks/{stem}.ipynb)"
             if github else "")  # Colab opens notebooks from GitHub only
    source = (
        f"> This notebook is the chapter **{title}** of the book *Linear attention, step by step*, "
        f"generated from [`book/{stem}.md`]({REPOSITORY}/blob/{BRANCH}/book/{stem}.md) by "
        "`scripts/sync_notebooks.py` (edit that file, not this one). Run the first code cell "
        f"first: on Colab or in a fresh environment it installs `linattn_core`.{colab}"
    )
    return nbformat.v4.new_markdown_cell(source)


_SOLUTION_START = re.compile(r"^(`{3,}|:{3,})\{solution-start\}[^\n]*\n(?:[ \t]*:[^\n]*\n)*\1[ \t]*$", re.M)
_SOLUTION_END = re.compile(r"^(`{3,}|:{3,})\{solution-end\}[^\n]*\n(?:[ \t]*:[^\n]*\n)*\1[ \t]*$", re.M)
SOLUTION_SUMMARY = ("<b>Solution</b> (click to show; try the exercise first. It is text, so "
                    "\"Run all\" never runs it: to run it, copy it into a code cell)")


def solution_cell(parts: list[str]) -> nbformat.NotebookNode:
    """A solution as one Markdown cell: a collapsed ``<details>`` block that no "Run all" executes.

    Colab, JupyterLab and GitHub show only the summary line until it is clicked, as the website's
    dropdown does; its code is a fenced block, so nothing of it runs unless the reader copies it.
    """
    body = "\n\n".join(part.strip("\n") for part in parts if part.strip())
    return nbformat.v4.new_markdown_cell(
        f"<details>\n<summary>{SOLUTION_SUMMARY}</summary>\n\n{body}\n\n</details>",
        metadata={"solution": True})


def build_notebook(path: Path, index: BookIndex | None = None, *,
                   solutions: bool = True) -> nbformat.NotebookNode:
    """The notebook twin of one chapter.

    Every solution block of the chapter (``solution-start`` ... ``solution-end``, its prose and its
    code cells) becomes one collapsed Markdown cell (:func:`solution_cell`): never executed, hidden
    until asked for. ``solutions=False`` leaves the solutions out altogether (the copy an assignment
    points learners at).
    """
    index = index or build_index(path.parent)
    nb = jupytext.read(path)
    stem = path.stem
    md_sources = [c.source for c in nb.cells if c.cell_type == "markdown"]
    glued = [(i, glued_names(c.source)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    ctx = PageContext(stem, index, number_equations(md_sources), [(i, g) for i, g in glued if g])

    cells = [header_cell(stem, index.titles.get(stem, stem))]
    solution: list[str] | None = None  # the parts of the solution being read, if inside one

    def markdown(text: str) -> None:
        source = convert_markdown(text, ctx)
        if not source.strip():
            return
        if solution is not None:
            solution.append(source)
        else:
            cells.append(nbformat.v4.new_markdown_cell(source))

    for position, cell in enumerate(nb.cells):
        ctx.position = position
        if cell.cell_type == "markdown":
            text = cell.source
            while True:
                marker = (_SOLUTION_START if solution is None else _SOLUTION_END).search(text)
                if marker is None:
                    markdown(text)
                    break
                markdown(text[:marker.start()])
                if solution is None:
                    solution = []
                else:
                    if solutions and solution:
                        cells.append(solution_cell(solution))
                    solution = None
                text = text[marker.end():]
        elif cell.cell_type == "code":
            if solution is not None:  # a solution's code: text inside the collapsed block
                solution.append(f"```python\n{cell.source.strip()}\n```")
                continue
            new = nbformat.v4.new_code_cell(cell.source)
            tags = cell.metadata.get("tags")
            if tags:
                new.metadata["tags"] = list(tags)
            cells.append(new)
        else:
            cells.append(nbformat.v4.new_raw_cell(cell.source))
    for number, cell in enumerate(cells):
        cell.id = f"{stem.replace('_', '-')}-{number:03d}"

    out = nbformat.v4.new_notebook()
    out.cells = cells
    out.metadata = nbformat.NotebookNode(
        kernelspec=dict(KERNELSPEC),
        language_info={"name": "python"},
    )
    return out


def notebook_text(nb: nbformat.NotebookNode) -> str:
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def render_all(book: Path = BOOK) -> dict[str, str]:
    """notebook file name -> its JSON text, for every chapter."""
    index = build_index(book)
    return {f"{p.stem}.ipynb": notebook_text(build_notebook(p, index)) for p in chapter_files(book)}


def drift(book: Path = BOOK, notebooks: Path = NOTEBOOKS) -> list[str]:
    """Lines describing every difference between notebooks/ and what book/ generates (install cells too)."""
    wanted = render_all(book)
    problems = setup_drift(book)
    for name, text in wanted.items():
        target = notebooks / name
        if not target.exists():
            problems.append(f"missing: {target.relative_to(notebooks.parent)}")
        elif target.read_text(encoding="utf-8") != text:
            problems.append(f"out of date: {target.relative_to(notebooks.parent)}")
    if notebooks.exists():
        for extra in sorted(notebooks.glob("*.ipynb")):
            if extra.name not in wanted:
                problems.append(f"no chapter for: {extra.relative_to(notebooks.parent)}")
    return problems


def write_all(book: Path = BOOK, notebooks: Path = NOTEBOOKS) -> list[str]:
    """Write every install cell and notebook that changed, remove notebooks without a chapter."""
    notebooks.mkdir(exist_ok=True)
    changed = write_setup_cells(book)
    wanted = render_all(book)
    for name, text in wanted.items():
        target = notebooks / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            changed.append(f"wrote {target.relative_to(notebooks.parent)}")
    for extra in sorted(notebooks.glob("*.ipynb")):
        if extra.name not in wanted:
            extra.unlink()
            changed.append(f"removed {extra.relative_to(notebooks.parent)} (no chapter)")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if notebooks/ differs from what book/ generates")
    args = parser.parse_args(argv)
    if args.check:
        problems = drift()
        if problems:
            print("notebooks/ has drifted from book/ (run: python scripts/sync_notebooks.py):")
            print("\n".join("  " + p for p in problems))
            return 1
        print(f"notebooks/ is in sync with book/ ({len(chapter_files())} chapters).")
        return 0
    changed = write_all()
    print("\n".join(changed) if changed else "notebooks/ was already in sync.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
