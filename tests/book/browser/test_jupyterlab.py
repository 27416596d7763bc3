"""The explorers as a reader meets them in JupyterLab: open the chapter, Run All, move a control.

A JupyterLab server from this environment is started on 127.0.0.1 (free port, random token, no
browser) with jupytext, so the MyST ``.md`` chapters open as notebooks, and WITHOUT
``LINATTN_BOOK_BUILD``, so explorers are live ipywidgets wired to a kernel. For every chapter that
calls an explorer (``*_explorer(`` in ``book/*.md``), headless Chromium opens it, runs every cell
from the Run menu, waits for the kernel to go idle, checks no cell failed, then, for each explorer
cell, moves its first slider (keyboard) and picks another option of its first dropdown, and checks
that the plotly figure in that cell changed each time.

The server's root is a throwaway copy of ``book/``: JupyterLab (and jupytext) save notebooks they
open, and these tests must never rewrite the chapters in the working tree.
Run: ``.venv/bin/pytest tests/book/browser/test_jupyterlab.py -q`` (a few minutes: kernels run chapters).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from _browser import CHROMIUM, ROOT, missing

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BOOK = ROOT / "book"
EXPLORER_CALL = re.compile(r"\b\w+_explorer\(")
SERVER_START_S = 120
RUN_ALL_S = 300  # one chapter, all cells, on a shared two-core machine
CONTROL_S = 60  # a control's round trip: browser -> kernel callback -> figure redraw


def explorer_chapters() -> list[str]:
    return sorted(p.name for p in BOOK.glob("*.md") if EXPLORER_CALL.search(p.read_text(encoding="utf-8")))


# JupyterLab settings for a clean, deterministic session: .md opens as a notebook (jupytext), no
# autosave, every cell kept in the DOM (no windowing), no news or update pop-ups.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {
        "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"},
        "autosave": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, token: str, path: str, method: str = "GET"):
    req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
    return json.loads(body) if body else None


def _stop(proc: subprocess.Popen, base: str, token: str) -> None:
    """Shut kernels down through the API, then the server; kill its process group if it lingers."""
    if proc.poll() is None:
        try:
            for kernel in _api(base, token, "api/kernels"):
                _api(base, token, f"api/kernels/{kernel['id']}", method="DELETE")
        except Exception:
            pass  # the server is going down anyway; SIGTERM makes it stop its kernels too
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A running JupyterLab (base URL, token) over a copy of book/; stopped after the module."""
    tmp = tmp_path_factory.mktemp("jupyterlab")
    root = tmp / "book"
    shutil.copytree(BOOK, root, ignore=shutil.ignore_patterns("_build", ".ipynb_checkpoints", "*.ipynb"))
    settings = tmp / "settings"
    for name, value in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = {k: v for k, v in os.environ.items() if k != "LINATTN_BOOK_BUILD"}
    env.update(JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_CONFIG_DIR=str(tmp / "config"),
               IPYTHONDIR=str(tmp / "ipython"), PYTHONHASHSEED="0")
    port, token = _free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}/"
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: read cell state, not pixels
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI runners often run as root
    log_path = tmp / "jupyterlab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
            try:
                _api(base, token, "api/status")
                break
            except Exception:
                if time.monotonic() > deadline:
                    tail = log_path.read_text()[-3000:]
                    pytest.fail(f"JupyterLab did not answer in {SERVER_START_S}s:\n{tail}")
                time.sleep(0.5)
        yield base, token, log_path
    finally:
        _stop(proc, base, token)


# --- JavaScript, through window.jupyterapp ------------------------------------------------------

NOTEBOOK_READY_JS = """
() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!w || !w.content || !w.content.widgets || !w.sessionContext) return false;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  return w.content.widgets.length > 0 && !!k && k.status === 'idle';
}
"""

# Settled: kernel idle and no cell waiting ([*]) for two consecutive polls.
RUN_STATE_JS = """
() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  const pending = cells.filter(c => c.model.executionState === 'running'
                                 || (c.promptNode && c.promptNode.textContent.includes('*'))).length;
  const done = cells.filter(c => c.model.executionCount !== null).length;
  return {status: k ? k.status : 'none', pending, done, total: cells.length};
}
"""

CELL_ERRORS_JS = """
() => {
  const w = window.jupyterapp.shell.currentWidget;
  const out = [];
  w.content.widgets.forEach((c, i) => {
    if (c.model.type !== 'code') return;
    const tags = c.model.getMetadata('tags') || [];
    if (tags.includes('raises-exception')) return;
    for (const o of c.model.outputs.toJSON()) {
      if (o.output_type === 'error') out.push(`cell ${i}: ${o.ename}: ${String(o.evalue).slice(0, 300)}`);
    }
  });
  return out;
}
"""

MARK_EXPLORERS_JS = """
(pattern) => {
  const re = new RegExp(pattern);
  const w = window.jupyterapp.shell.currentWidget;
  const marked = [];
  w.content.widgets.forEach((c, i) => {
    if (c.model.type === 'code' && re.test(c.model.sharedModel.getSource())) {
      c.node.setAttribute('data-linattn-explorer', String(marked.length));
      marked.push(i);
    }
  });
  return marked;
}
"""

FIGURE_TRACES_JS = """
(cell) => {
  const gd = cell.querySelector('.js-plotly-plot');
  return gd && gd.data ? gd.data.length : -1;
}
"""

FIGURE_DATA_JS = """
(cell) => {
  const gd = cell.querySelector('.js-plotly-plot');
  if (!gd || !gd.data) return null;
  return JSON.stringify(gd.data, (k, v) => (ArrayBuffer.isView(v) ? Array.from(v) : v));
}
"""


def _run_all_from_menu(page) -> None:
    page.locator("#jp-MainMenu .lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def _wait_for_run(page, chapter: str) -> dict:
    deadline = time.monotonic() + RUN_ALL_S
    stable, state = 0, {}
    page.wait_for_timeout(1000)  # let the first cell get queued
    while time.monotonic() < deadline:
        state = page.evaluate(RUN_STATE_JS)
        stable = stable + 1 if state["status"] == "idle" and state["pending"] == 0 else 0
        if stable >= 2:
            return state
        page.wait_for_timeout(1000)
    pytest.fail(f"{chapter}: cells still running after {RUN_ALL_S}s: {state}")


def _figure_changes(page, cell, act, what: str) -> str | None:
    """Do ``act`` and wait for the cell's plotly figure to change; a failure message or None."""
    before = cell.evaluate(FIGURE_DATA_JS)
    if before is None:
        return f"{what}: no plotly figure in the explorer's output"
    act()
    try:
        page.wait_for_function(
            f"([cell, before]) => ({FIGURE_DATA_JS})(cell) !== before",
            arg=[cell.element_handle(), before],
            timeout=CONTROL_S * 1000,
        )
    except Exception:
        return f"{what}: the figure did not change within {CONTROL_S}s"
    return None


def _operate_slider(page, cell) -> str | None:
    sliders = cell.locator(".widget-slider .noUi-handle")
    if sliders.count() == 0:
        return None
    handle = sliders.first
    now, top = handle.get_attribute("aria-valuenow"), handle.get_attribute("aria-valuemax")
    key = "ArrowLeft" if now is not None and now == top else "ArrowRight"
    label = cell.locator(".widget-slider").first.locator(".widget-label").first.inner_text()

    def act():
        handle.focus()
        handle.press(key)

    return _figure_changes(page, cell, act, f"slider {label!r} ({key} from {now})") or "ok"


def _operate_dropdown(page, cell) -> str | None:
    selects = cell.locator(".widget-dropdown select")
    if selects.count() == 0:
        return None
    select = selects.first
    options = select.locator("option")
    if options.count() < 2:
        return None
    current = select.evaluate("s => s.selectedIndex")
    target = 1 if current == 0 else 0
    label = cell.locator(".widget-dropdown").first.locator(".widget-label").first.inner_text()
    what = f"dropdown {label!r} -> {options.nth(target).inner_text()!r}"
    return _figure_changes(page, cell, lambda: select.select_option(index=target), what) or "ok"


def _operate_toggle_buttons(page, cell) -> str | None:
    groups = cell.locator(".widget-toggle-buttons")
    if groups.count() == 0:
        return None
    group = groups.first
    idle = group.locator("button.widget-toggle-button:not(.mod-active)")
    if idle.count() == 0:
        return None
    target = idle.first
    what = f"toggle buttons -> {target.inner_text().strip()!r}"
    return _figure_changes(page, cell, target.click, what) or "ok"


CONTROLS = ".widget-slider, .widget-dropdown, .widget-toggle-buttons"


@pytest.mark.parametrize("chapter", explorer_chapters() or [None])
def test_explorers_respond_in_jupyterlab(jupyterlab, browser, chapter):
    if chapter is None:
        missing("no chapter in book/ calls an explorer")
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is missing (run `scripts/install_browser.sh`)")
    base, token, log_path = jupyterlab
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda e: page_errors.append(str(e)))
    try:
        # A workspace of its own per chapter, so JupyterLab does not reopen the previous chapters' tabs.
        url = f"{base}lab/workspaces/test-{chapter[:-3]}/tree/{chapter}?reset&token={token}"
        page.goto(url, wait_until="load", timeout=SERVER_START_S * 1000)
        page.wait_for_function(NOTEBOOK_READY_JS, timeout=SERVER_START_S * 1000, polling=500)
        _run_all_from_menu(page)
        state = _wait_for_run(page, chapter)
        errors = page.evaluate(CELL_ERRORS_JS)
        assert not errors, f"{chapter}: cells failed under Run All:\n  " + "\n  ".join(errors)
        assert state["done"] == state["total"], f"{chapter}: only {state['done']}/{state['total']} cells ran"

        explorers = page.evaluate(MARK_EXPLORERS_JS, EXPLORER_CALL.pattern)
        assert explorers, f"{chapter}: no explorer cell found in the notebook"
        failures, operated = [], 0
        for k, cell_index in enumerate(explorers):
            cell = page.locator(f'[data-linattn-explorer="{k}"]')
            cell.scroll_into_view_if_needed()
            try:
                cell.locator(CONTROLS).first.wait_for(timeout=CONTROL_S * 1000)
            except Exception:
                failures.append(f"cell {cell_index}: no ipywidgets control rendered ({CONTROLS})")
                continue
            n_traces = cell.evaluate(FIGURE_TRACES_JS)
            if n_traces <= 0:
                what = "no plotly figure" if n_traces < 0 else "a blank plotly figure (no traces)"
                failures.append(f"cell {cell_index}: the explorer shows {what} after Run All")
                continue
            for operate in (_operate_slider, _operate_dropdown, _operate_toggle_buttons):
                result = operate(page, cell)
                if result is None:
                    continue
                operated += 1
                if result != "ok":
                    failures.append(f"cell {cell_index}: {result}")
        assert not failures, f"{chapter}: explorers that do not respond:\n  " + "\n  ".join(failures)
        assert operated > 0, f"{chapter}: no control was operated"
    except BaseException:
        shot = ROOT / "_build" / "screenshots" / "jupyterlab" / (chapter[:-3] + ".png")
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=False)
        sys.stderr.write(f"\nscreenshot: {shot}\npage errors: {page_errors}\n"
                         f"server log (tail):\n{log_path.read_text()[-2000:]}\n")
        raise
    finally:
        ctx.close()
        for session in _api(base, token, "api/sessions"):  # free the kernel's memory for the next chapter
            _api(base, token, f"api/sessions/{session['id']}", method="DELETE")


# --- explorers under load: never a blank figure ------------------------------------------------------

# A notebook with every explorer of the book, twice: as the chapters call it, and moved by its first
# control in the same cell right after it is displayed (a reader's early click, a playing Play widget).
# The second kind is the race: edits sent while the browser is still setting the figure's model up.
LOAD_EXPLORERS = ["matrix_vs_state_explorer", "chunk_explorer", "feature_map_explorer",
                  "performer_explorer", "cost_explorer", "decay_explorer"]
LOAD_ROUNDS = 3
LOAD_DRAW_S = 120  # every figure of the notebook drawn, from Run All's end, on a loaded machine

LOAD_SETUP = """\
import json
from IPython.display import display
from linattn_core.tools import widgets


def show_and_move(ex):
    \"\"\"Display the explorer, move its first control at once, print the title the figure must show.\"\"\"
    display(ex)
    c = next(iter(ex.controls.values()))
    options = [o[1] if isinstance(o, tuple) else o for o in getattr(c, "options", ())]
    c.value = (options[-1] if c.value != options[-1] else options[0]) if options else c.max
    print(json.dumps(ex.last_figure.layout.title.text))
"""

# Per explorer cell: its plotly figure's traces as the reader sees them. A trace counts as drawn when
# its SVG holds a path with geometry ('M...'), a heatmap's image with pixels, or text; gd.data alone is
# not enough (a view can hold data it never drew). ``expected``: the title the cell printed, if any.
DRAWN_TRACES_JS = """
() => Array.from(document.querySelectorAll('[data-linattn-explorer]')).map(cell => {
  const out = cell.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]');
  const expected = out ? JSON.parse(out.textContent.trim()) : null;
  const gd = cell.querySelector('.js-plotly-plot');
  if (!gd) return {figure: false, expected};
  const href = (i) => i.getAttribute('href') || i.getAttribute('xlink:href') || '';
  const geometry = (p) => /M\\s*-?[\\d.]/.test(p.getAttribute('d') || '');
  // heatmaps are drawn as an image in a g.hm group, which plotly does not class as a trace
  const traces = Array.from(gd.querySelectorAll(
    '.cartesianlayer g.trace, .cartesianlayer g.hm, .imagelayer image'));
  const drawn = traces.filter(t => t.tagName === 'image' ? href(t).length > 30
    : Array.from(t.querySelectorAll('path')).some(geometry)
      || Array.from(t.querySelectorAll('image')).some(i => href(i).length > 30)
      || t.querySelector('text') !== null).length;
  const r = gd.getBoundingClientRect();
  const title = gd.layout && gd.layout.title ? (gd.layout.title.text ?? gd.layout.title) : null;
  return {figure: true, n_data: (gd.data || []).length, drawn, title, expected,
          width: Math.round(r.width), height: Math.round(r.height)};
})
"""


def _explorers_notebook() -> dict:
    sources = [LOAD_SETUP]
    sources += [f"widgets.{name}()" for name in LOAD_EXPLORERS]
    sources += [f"show_and_move(widgets.{name}())" for name in LOAD_EXPLORERS]
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": src}
             for src in sources]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return {"cells": cells, "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 5}


def _not_drawn(states: list[dict]) -> list[str]:
    names = LOAD_EXPLORERS + [f"{n} moved at once" for n in LOAD_EXPLORERS]
    bad = []
    for name, s in zip(names, states, strict=False):
        if not s["figure"]:
            bad.append(f"{name}: no plotly figure")
        elif s["n_data"] == 0 or s["drawn"] == 0:
            bad.append(f"{name}: blank figure ({s})")
        elif s["width"] < 50 or s["height"] < 50:
            bad.append(f"{name}: figure drawn with no room ({s})")
        elif s["expected"] is not None and s["title"] != s["expected"]:
            bad.append(f"{name}: shows a stale figure: {s['title']!r}, not {s['expected']!r}")
    if len(states) < len(names):
        bad.append(f"only {len(states)} of {len(names)} explorer cells found")
    return bad


@pytest.fixture
def busy_core():
    """A process that keeps one core busy for the test's duration (a reader's laptop doing something)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_explorers_never_come_up_blank_under_load(jupyterlab, browser, busy_core):
    """Open a notebook of every explorer, Run All, with a core kept busy, several times: every
    figure must come up with its traces drawn, showing its controls' current values."""
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is missing (run `scripts/install_browser.sh`)")
    base, token, log_path = jupyterlab
    name = "explorers_under_load.ipynb"
    (log_path.parent / "book" / name).write_text(json.dumps(_explorers_notebook()), encoding="utf-8")
    failures = []
    for round_ in range(LOAD_ROUNDS):
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        try:
            url = f"{base}lab/workspaces/load-{round_}/tree/{name}?reset&token={token}"
            page.goto(url, wait_until="load", timeout=SERVER_START_S * 1000)
            page.wait_for_function(NOTEBOOK_READY_JS, timeout=SERVER_START_S * 1000, polling=500)
            _run_all_from_menu(page)
            _wait_for_run(page, name)
            errors = page.evaluate(CELL_ERRORS_JS)
            assert not errors, f"round {round_}: cells failed:\n  " + "\n  ".join(errors)
            page.evaluate(MARK_EXPLORERS_JS, EXPLORER_CALL.pattern)
            deadline = time.monotonic() + LOAD_DRAW_S
            while True:
                bad = _not_drawn(page.evaluate(DRAWN_TRACES_JS))
                if not bad or time.monotonic() > deadline:
                    break
                page.wait_for_timeout(1000)
            failures += [f"round {round_}: {b}" for b in bad]
            if bad:
                shot = ROOT / "_build" / "screenshots" / "jupyterlab" / f"load-{round_}.png"
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shot), full_page=False)
        finally:
            ctx.close()
            for session in _api(base, token, "api/sessions"):
                _api(base, token, f"api/sessions/{session['id']}", method="DELETE")
    assert not failures, "explorers that came up blank or stale under load:\n  " + "\n  ".join(failures)
