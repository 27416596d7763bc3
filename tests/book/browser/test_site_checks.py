"""The site checks themselves, on small HTML snippets: each check must be able to fail.

No browser and no built site are needed; these run wherever pytest runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _browser import missing
from _site_checks import failed_outputs

# What myst-nb 1.x writes for a cell whose code raised (nb_execution_show_tb, allow_errors).
TRACEBACK_PAGE = """
<html><body><div class="bd-article"><p>Before the cell.</p>
<div class="cell docutils container"><div class="cell_output docutils container">
<div class="output traceback highlight-ipythontb notranslate"><div class="highlight"><pre><span></span>
<span class="gt">Traceback (most recent call last):</span>
  File <span class="s">"&lt;cell&gt;"</span>, line 3, in &lt;module&gt;
    <span class="k">assert</span> speedup &gt; 1.2
<span class="ne">AssertionError</span>: speed-up 1.06
</pre></div></div></div></div><p>After.</p></div></body></html>
"""

STDERR_PAGE = """
<div class="cell_output docutils container"><div class="output stderr highlight-myst-ansi notranslate">
<div class="highlight"><pre><span></span>/x/linattn_core/viz.py:12: UserWarning: fell back to numpy
</pre></div></div></div>
"""

CLEAN_PAGE = """
<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi notranslate">
<div class="highlight"><pre><span></span>max abs difference: 1.2e-16<br>
</pre></div></div><img src="x.png" alt="a figure"></div>
<p>A traceback is what Python prints when a cell fails; the stderr stream carries warnings.</p>
"""


def test_a_traceback_block_fails_the_page():
    found = failed_outputs(TRACEBACK_PAGE)
    assert len(found) == 1, found
    assert found[0].startswith("traceback output:")
    assert "AssertionError: speed-up 1.06" in found[0], "the report names the exception"


def test_a_stderr_block_fails_the_page():
    found = failed_outputs(STDERR_PAGE)
    assert len(found) == 1 and found[0].startswith("stderr output:"), found
    assert "UserWarning" in found[0]


def test_an_error_output_block_fails_the_page():
    assert failed_outputs('<div class="output error"><pre>NameError: x</pre></div>')


def test_traceback_text_outside_an_output_block_fails_the_page():
    # e.g. a cell that catches an exception and prints traceback.format_exc() to stdout
    page = '<div class="output stream"><pre>Traceback (most recent call last):\n  File "x"</pre></div>'
    found = failed_outputs(page)
    assert len(found) == 1 and found[0].startswith("traceback in the text:"), found


def test_a_clean_page_passes():
    assert failed_outputs(CLEAN_PAGE) == []


def test_the_classes_must_be_on_an_output_block():
    # prose or code that merely uses the words (a CSS class "error" on a form, a span "stderr") is fine
    assert failed_outputs('<p class="error">x</p><span class="stderr">y</span>') == []


def test_with_the_site_required_nothing_to_check_fails(monkeypatch):
    # make test sets LINATTN_REQUIRE_SITE=1: an empty list of pages is then a failure, not a skip
    monkeypatch.setenv("LINATTN_REQUIRE_SITE", "1")
    with pytest.raises(pytest.fail.Exception, match="LINATTN_REQUIRE_SITE=1"):
        missing("no page of the site has a plotly figure")
    monkeypatch.delenv("LINATTN_REQUIRE_SITE")
    with pytest.raises(pytest.skip.Exception):
        missing("no page of the site has a plotly figure")


def test_no_browser_test_skips_by_itself():
    # every "nothing to check" goes through missing(), which fails when the site is required
    skips = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.skip", "skip"):
                skips.append(f"{path.name}:{node.lineno}")
    assert not skips, f"pytest.skip outside missing(): {skips}"

