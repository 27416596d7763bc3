"""notebooks/*.ipynb (the Colab twins of the chapters) must match what book/*.md generates.

If test_notebooks_match_the_chapters fails, a chapter changed after the notebooks were generated:
run ``python scripts/sync_notebooks.py`` (or ``make notebooks``) and commit notebooks/.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


sync = _load("sync_notebooks", ROOT / "scripts" / "sync_notebooks.py")
CHAPTERS = sync.chapter_files()
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
URL, BRANCH = sync.home()
SETUP_LINE = f'"linattn_core[course] @ git+{URL}@{BRANCH}"'

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
    jupytext_version: 1.16.0
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""
SETUP = f"""```{{code-cell}} ipython3
:tags: [remove-cell]
{sync.setup_cell_source()}
```
"""


# --------------------------------------------------------------------------------------------------
# The committed notebooks
# --------------------------------------------------------------------------------------------------
def test_notebooks_match_the_chapters():
    problems = sync.drift()
    assert not problems, (
        "notebooks/ has drifted from book/; run `python scripts/sync_notebooks.py` and commit "
        "notebooks/:\n  " + "\n  ".join(problems))


def test_chapters_are_found():
    assert CHAPTERS, "no MyST notebook found in book/"
    assert all(sync.is_myst_notebook(p) for p in CHAPTERS)


@pytest.fixture(scope="module")
def book_index():
    return sync.build_index()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_generated_notebook_is_clean_and_colab_ready(chapter, book_index):
    text = sync.notebook_text(sync.build_notebook(chapter, book_index))
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert set(nb.metadata) == {"kernelspec", "language_info"}
    assert nb.metadata.kernelspec.name == "python3"
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids)
    assert ids[0] == f"{chapter.stem.replace('_', '-')}-000"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            assert set(cell.metadata) <= {"tags", "jupyter"}
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert SETUP_LINE in code[0].source, "the first code cell must be the Colab set-up cell"
    assert "remove-cell" in code[0].metadata.get("tags", [])
    # MyST-only syntax is gone from the Markdown a notebook shows
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for myst in ("{ref}`", "{doc}`", "{cite}`", "{eq}`", "{exercise}", "{solution-start}",
                         "{solution-end}", ")=\n"):
                assert myst not in cell.source, (cell.id, myst)


def test_generation_is_deterministic(book_index):
    chapter = CHAPTERS[0]
    first = sync.notebook_text(sync.build_notebook(chapter, book_index))
    assert first == sync.notebook_text(sync.build_notebook(chapter, sync.build_index()))


# --------------------------------------------------------------------------------------------------
# Drift detection on a throwaway book
# --------------------------------------------------------------------------------------------------
def _mini_book(tmp_path: Path) -> tuple[Path, Path]:
    book, notebooks = tmp_path / "book", tmp_path / "notebooks"
    book.mkdir()
    (book / "one.md").write_text(HEADER + "(sec-one)=\n# One\n\nText.\n\n" + SETUP
                                 + "\n```{code-cell} ipython3\nx = 1\n```\n")
    (book / "plain.md").write_text("# Not a notebook\n")
    return book, notebooks


def test_drift_is_detected_and_fixed(tmp_path):
    book, notebooks = _mini_book(tmp_path)
    assert sync.drift(book, notebooks) == ["missing: notebooks/one.ipynb"]
    assert sync.write_all(book, notebooks) == ["wrote notebooks/one.ipynb"]
    assert sync.drift(book, notebooks) == []
    assert sorted(p.name for p in notebooks.iterdir()) == ["one.ipynb"]  # plain.md is no notebook

    chapter = book / "one.md"
    chapter.write_text(chapter.read_text() + "\nMore text.\n")
    assert sync.drift(book, notebooks) == ["out of date: notebooks/one.ipynb"]

    (notebooks / "gone.ipynb").write_text("{}")
    assert "no chapter for: notebooks/gone.ipynb" in sync.drift(book, notebooks)
    changed = sync.write_all(book, notebooks)
    assert "removed notebooks/gone.ipynb (no chapter)" in changed
    assert sync.drift(book, notebooks) == []


def test_outputs_in_a_committed_notebook_count_as_drift(tmp_path):
    book, notebooks = _mini_book(tmp_path)
    sync.write_all(book, notebooks)
    target = notebooks / "one.ipynb"
    nb = json.loads(target.read_text())
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "1\n"}]
    target.write_text(json.dumps(nb, indent=1))
    assert sync.drift(book, notebooks) == ["out of date: notebooks/one.ipynb"]


def test_check_mode_exit_codes(tmp_path, monkeypatch, capsys):
    book, notebooks = _mini_book(tmp_path)
    monkeypatch.setattr(sync, "BOOK", book)
    monkeypatch.setattr(sync, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(sync.drift, "__defaults__", (book, notebooks))
    monkeypatch.setattr(sync.write_all, "__defaults__", (book, notebooks))
    monkeypatch.setattr(sync.chapter_files, "__defaults__", (book,))
    assert sync.main(["--check"]) == 1
    assert "missing: notebooks/one.ipynb" in capsys.readouterr().out
    assert sync.main([]) == 0
    assert sync.main(["--check"]) == 0
    assert "in sync" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# MyST -> Jupyter Markdown
# --------------------------------------------------------------------------------------------------
def _ctx(**equations):
    index = sync.BookIndex(
        titles={"softmax": "Softmax attention", "causal": "The causal recurrence"},
        labels={"sec-cost": ("softmax", "Why the cost is quadratic"),
                "sec-here": ("causal", "Prefix sums")},
        citations={"vaswani2017attention": ("Vaswani et al., 2017", "https://arxiv.org/abs/1706.03762"),
                   "rahimi2007random": ("Rahimi and Recht, 2007", "")},
        notebooks={"softmax", "causal"},
        equations={"eq-softmax-row": ("softmax", 2)},
    )
    return sync.PageContext("causal", index, dict(equations))


@pytest.mark.parametrize(("myst", "markdown"), [
    ("see {ref}`sec-cost`.", "see [Why the cost is quadratic](softmax.ipynb)."),
    ("see {ref}`the cost <sec-cost>`.", "see [the cost](softmax.ipynb)."),
    ("see {ref}`sec-here`.", "see *Prefix sums*."),
    ("the {doc}`softmax` chapter", "the [Softmax attention](softmax.ipynb) chapter"),
    ("{doc}`reading <further_reading>`",
     "[reading](https://github.com/linattn/linattn/blob/main/book/further_reading.md)"),
    ("by {eq}`eq-state`", "by (2)"),
    ("from {eq}`eq-softmax-row`", "from equation (2) of [Softmax attention](softmax.ipynb)"),
    ("as in {cite}`vaswani2017attention`", "as in ([Vaswani et al., 2017](https://arxiv.org/abs/1706.03762))"),
    ("{cite:t}`rahimi2007random` showed", "Rahimi and Recht (2007) showed"),
    ("{cite}`vaswani2017attention,rahimi2007random`",
     "([Vaswani et al., 2017](https://arxiv.org/abs/1706.03762); Rahimi and Recht, 2007)"),
    ("a {unknownrole}`thing`", "a `thing`"),
])
def test_roles(myst, markdown):
    assert sync.convert_markdown(myst, _ctx(**{"eq-state": 2})) == markdown


def test_a_pasted_value_names_the_line_its_cell_prints():
    ctx = _ctx()
    ctx.glued = [(2, sync.glued_names('glue("slope_linear", s)')),
                 (5, sync.glued_names('for k in ks:\n    glue(f"loss_{k.replace(\'+\', \'\')}", v)'))]
    ctx.position = 3
    assert sync.convert_markdown("slope {glue:text}`slope_linear:.2f` here", ctx) == (
        "slope `slope_linear` *(printed above)* here")
    assert sync.convert_markdown("{glue:text}`loss_elu1:.3f`", ctx) == "`loss_elu1` *(printed below)*"
    with pytest.raises(ValueError, match="no code cell"):  # a value no cell glues fails the generation
        sync.convert_markdown("{glue:text}`never_glued`", ctx)


def _glued_in(cell) -> list[re.Pattern]:
    """The names a cell glues: a code cell's, or those of the code a solution shows (printed when the
    reader runs it)."""
    if cell.cell_type == "code":
        return sync.glued_names(cell.source)
    if cell.metadata.get("solution"):
        return [p for code in re.findall(r"```python\n(.*?)```", cell.source, flags=re.S)
                for p in sync.glued_names(code)]
    return []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_placeholder_names_a_value_a_cell_prints(path):
    """Each pasted value of the website is, in the notebook, a name that a code cell above (or, where
    the text says so, below) passes to glue(), which prints ``name = value`` in a plain kernel."""
    cells = nbformat.read(path, as_version=4).cells
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        assert "(the value printed above)" not in cell.source, cell.id
        for name, where in sync.PLACEHOLDER.findall(cell.source):
            others = cells[:i + 1] if where == "above" else cells[i:]  # a solution: its own code
            assert any(p.fullmatch(name) for c in others for p in _glued_in(c)), (
                f"{cell.id}: `{name}` is said to be printed {where}, but no code cell {where} glues it")


def test_glue_prints_the_line_outside_the_book_build(monkeypatch, capsys):
    np = pytest.importorskip("numpy")
    from linattn_core.tools import viz

    monkeypatch.delenv("LINATTN_BOOK_BUILD", raising=False)
    viz.glue("unigram", np.float64(3.238917))
    viz.glue("kind", "elu+1")
    viz.glue("big", 123456.7)
    assert capsys.readouterr().out == "unigram = 3.239\nkind = elu+1\nbig = 123,457\n"
    monkeypatch.setenv("LINATTN_BOOK_BUILD", "1")  # the website pastes it instead: nothing printed
    pytest.importorskip("myst_nb")
    viz.glue("unigram", 3.2)
    assert "unigram =" not in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# The book's home: one setting (_config.yml's repository) for every install cell and link
# --------------------------------------------------------------------------------------------------
def test_every_chapter_installs_from_the_configured_home():
    assert not sync.setup_drift(), sync.setup_drift()
    for chapter in CHAPTERS:
        first = sync._install_cell(chapter.read_text(encoding="utf-8"))
        assert first is not None and SETUP_LINE in first.group(2), chapter.name


def test_a_new_home_rewrites_install_cells_and_links(tmp_path, monkeypatch):
    book, notebooks = _mini_book(tmp_path)
    sync.write_all(book, notebooks)
    monkeypatch.setattr(sync, "REPOSITORY", "https://github.com/someone/fork")
    monkeypatch.setattr(sync, "BRANCH", "course-2027")
    assert "install cell differs from _config.yml's repository: book/one.md" in sync.drift(book, notebooks)
    changed = sync.write_all(book, notebooks)
    assert "wrote the install cell of book/one.md" in changed and "wrote notebooks/one.ipynb" in changed
    want = '"linattn_core[course] @ git+https://github.com/someone/fork@course-2027"'
    assert want in (book / "one.md").read_text()
    nb = nbformat.read(notebooks / "one.ipynb", as_version=4)
    assert want in next(c for c in nb.cells if c.cell_type == "code").source  # the notebook's install cell
    assert "github.com/someone/fork/blob/course-2027/book/one.md" in nb.cells[0].source  # its source link
    assert "/github/someone/fork/blob/course-2027/notebooks/one.ipynb" in nb.cells[0].source  # Colab
    assert sync.drift(book, notebooks) == []


def test_home_is_read_from_the_config(tmp_path):
    config = tmp_path / "_config.yml"
    config.write_text("repository:\n  url: https://gitlab.example.org/a/b/\n  branch: pages\n")
    assert sync.home(config) == ("https://gitlab.example.org/a/b", "pages")
    config.write_text("title: x\n")
    with pytest.raises(ValueError, match="repository"):
        sync.home(config)


def test_the_install_cell_is_plain_python():
    """It runs where cells are executed without IPython (nbgrader's tests, exec)."""
    compile(sync.setup_cell_source(), "<install cell>", "exec")


def test_equation_numbers_follow_the_website():
    ctx = _ctx(**{"eq-state": 3})
    ctx.index.chapter_numbers = {"softmax": 1, "causal": 4}
    assert sync.convert_markdown("{eq}`eq-state`", ctx) == "(4.3)"
    assert sync.convert_markdown("{eq}`eq-softmax-row`", ctx) == (
        "equation (1.2) of [Softmax attention](softmax.ipynb)")
    assert "\\tag{4.3}" in sync.convert_markdown("$$\nx\n$$ (eq-state)", ctx)
    numbers = sync.chapter_numbers(ROOT / "_toc.yml")
    if numbers:
        assert numbers.get("softmax") == 1 and "instructors" not in numbers


def test_labels_equations_and_directives():
    myst = "\n".join([
        "(sec-x)=",
        "## Title",
        "",
        "$$",
        "S = \\sum_j \\phi(k_j) v_j^T",
        "$$ (eq-state)",
        "",
        "```{exercise} Write it",
        ":label: ex-x",
        "",
        "Use {eq}`eq-state`.",
        "```",
        "",
        "```{note}",
        "Careful.",
        "```",
        "",
        "````{solution-start} ex-x",
        ":class: dropdown",
        "````",
        "",
        "```python",
        "x = {ref}`kept-in-code`",
        "```",
    ])
    out = sync.convert_markdown(myst, _ctx(**{"eq-state": 1}))
    assert out.splitlines() == [
        "## Title",
        "",
        "$$",
        "S = \\sum_j \\phi(k_j) v_j^T",
        "\\tag{1}",
        "$$",
        "",
        "> **Exercise: Write it**",
        ">",
        "> Use (1).",
        "",
        "> **Note**",
        ">",
        "> Careful.",
        "",
        "**Solution** (try the exercise first)",
        "",
        "```python",
        "x = {ref}`kept-in-code`",
        "```",
    ]


def test_solutions_are_collapsed_text_that_run_all_never_runs(tmp_path):
    book, _ = _mini_book(tmp_path)
    (book / "ex.md").write_text(
        HEADER + "# Ex\n\n" + SETUP + "\nTry it.\n\n````{solution-start} ex-a\n:class: dropdown\n````\n\n"
        "Why it works.\n\n```{code-cell} ipython3\nanswer = 42\n```\n\n````{solution-end}\n````\n\n"
        "After.\n\n```{code-cell} ipython3\nafter = 1\n```\n")
    nb = sync.build_notebook(book / "ex.md")
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "after = 1" in code and not any("answer = 42" in c for c in code)  # "Run all" skips it
    (sol,) = [c for c in nb.cells if c.metadata.get("solution")]
    assert sol.cell_type == "markdown" and sol.source.startswith("<details>\n<summary>")
    assert "```python\nanswer = 42\n```" in sol.source and "Why it works." in sol.source
    assert sol.source.rstrip().endswith("</details>")  # collapsed until clicked, in Colab too
    texts = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert any("Try it." in t for t in texts) and any("After." in t for t in texts)
    assert not any("solution-end" in t or "solution-start" in t for t in texts)
    bare = sync.build_notebook(book / "ex.md", solutions=False)  # an assignment's copy
    assert not any("answer = 42" in c.source or "Why it works" in c.source for c in bare.cells)
    assert any("After." in c.source for c in bare.cells)


def test_no_twin_runs_a_solution():
    """In every notebook of notebooks/, each solution of its chapter is collapsed text, no code cell."""
    for chapter in CHAPTERS:
        nb = nbformat.read(ROOT / "notebooks" / f"{chapter.stem}.ipynb", as_version=4)
        text = chapter.read_text(encoding="utf-8")
        blocks = re.findall(r"````\{solution-start\}.*?````\{solution-end\}", text, flags=re.S)
        code = {c.source.strip() for c in nb.cells if c.cell_type == "code"}
        solutions = [c for c in nb.cells if c.metadata.get("solution")]
        assert len(solutions) == len(blocks), chapter.stem
        for block in blocks:
            for cell in re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", block, flags=re.S):
                assert cell.strip() not in code, (chapter.stem, cell[:80])
                assert any(cell.strip() in c.source for c in solutions), (chapter.stem, cell[:80])


def test_book_index_reads_titles_labels_and_citations(book_index):
    index = book_index
    for chapter in CHAPTERS:
        assert chapter.stem in index.titles
        assert not index.titles[chapter.stem].startswith("On Colab")  # a code comment is no title
    for chapter in CHAPTERS:  # the book-wide equation numbers are the page's own numbers
        nb = sync.jupytext.read(chapter)
        own = sync.number_equations([c.source for c in nb.cells if c.cell_type == "markdown"])
        assert own == {label: n for label, (page, n) in index.equations.items()
                       if page == chapter.stem}, chapter.stem
    if sync.BIB.exists():
        who, url = index.citations["katharopoulos2020transformers"]
        assert who == "Katharopoulos et al., 2020" and url.startswith("https://")


# --------------------------------------------------------------------------------------------------
# book/_ext/colab_links.py: the launch buttons open the notebook twin
# --------------------------------------------------------------------------------------------------
colab_links = _load("colab_links", ROOT / "book" / "_ext" / "colab_links.py")


class _Config(dict):
    def __getattr__(self, name):
        return self[name]


class _Env:
    def __init__(self, root: Path):
        self.root = root

    def doc2path(self, pagename):
        return str(self.root / f"{pagename}.md")


class _App:
    def __init__(self, root: Path, binder: bool = True):
        self.srcdir = str(root)
        self.env = _Env(root)
        self.config = _Config(colab_links_notebooks_dir="notebooks", colab_links_binder=binder,
                              html_theme_options={})


def _context(page: str) -> dict:
    base = "https://github.com/linattn/linattn"
    return {"header_buttons": [
        {"label": "download-buttons", "buttons": [{"text": ".md", "url": f"{page}.md"}]},
        {"label": "launch-buttons", "buttons": [
            {"text": "Binder", "url": f"https://mybinder.org/v2/gh/linattn/linattn/main"
                                      f"?urlpath=lab/tree/{page}.md"},
            {"text": "Colab", "url": f"https://colab.research.google.com/github/linattn/linattn/"
                                     f"blob/main/{page}.md"},
        ]},
        {"label": "repository", "url": base},
    ]}


def _launch_urls(context):
    group = next(b for b in context["header_buttons"] if b["label"] == "launch-buttons")
    return {b["text"]: b["url"] for b in group["buttons"]}


@pytest.mark.parametrize("binder", [True, False])
def test_colab_and_binder_links_point_at_the_twin(tmp_path, binder):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "softmax.md").write_text("# s\n")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "softmax.ipynb").write_text("{}")
    context = _context("book/softmax")
    colab_links.rewrite_launch_links(_App(tmp_path, binder), "book/softmax", "page.html", context,
                                     None)
    urls = _launch_urls(context)
    assert urls["Colab"] == ("https://colab.research.google.com/github/linattn/linattn/blob/main/"
                             "notebooks/softmax.ipynb")
    binder_tail = "notebooks/softmax.ipynb" if binder else "book/softmax.md"
    assert urls["Binder"] == f"https://mybinder.org/v2/gh/linattn/linattn/main?urlpath=lab/tree/{binder_tail}"
    assert context["header_buttons"][0]["buttons"][0]["url"] == "book/softmax.md"  # downloads untouched


def test_page_without_twin_keeps_the_theme_links(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.md").write_text("# i\n")
    context = _context("book/intro")
    before = _launch_urls(context)
    colab_links.rewrite_launch_links(_App(tmp_path), "book/intro", "page.html", context, None)
    assert _launch_urls(context) == before


def test_every_chapter_notebook_is_a_launch_target():
    # each chapter's twin exists where the extension looks for it
    app = _App(ROOT)
    for chapter in CHAPTERS:
        assert colab_links.twin_path(app, f"book/{chapter.stem}") == f"notebooks/{chapter.stem}.ipynb"
