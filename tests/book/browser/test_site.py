"""The website as a reader sees it: every page of the built site, loaded in headless Chromium.

Each page's HTML is checked for published failures (traceback, error or stderr output blocks). Each page
is loaded once, offline (every host but 127.0.0.1 blocked), and checked for: console errors
and failed or external requests; math typeset by MathJax with no raw TeX left; every plotly figure
drawn, with its titles, axis titles and legends neither colliding nor cut off; no serious or critical
axe-core accessibility violation; a page weight (its own files, not the site-wide scripts) under
1.5 MB; internal links that resolve, anchors included. Full-page screenshots land in
``_build/screenshots/``. Pages are loaded again to operate every plotly slider and menu with the mouse
(and, where a figure's caption promises it, with the keyboard): each must change its figure. Also:
the search page finds "associative", every chapter is in the sidebar, and exercise solutions are
closed dropdowns that open when their title is clicked.

Pages are loaded once more at phone size, and that one load serves the checks of the page's width, its
figures and its exercise solutions. Run: ``.venv/bin/pytest tests/book/browser/test_site.py -q`` after
``make build`` (about 3-4 minutes on two cores). ``LINATTN_SITE_DIR=/path/to/html`` checks another
build (e.g. a one-page build).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import pytest
from _browser import PageLog, instrument, missing, page_source, pages_containing, site_pages, url_to_file
from _site_checks import (
    CHANGE_TIMEOUT_MS,
    CONTROL_ACTIVE_JS,
    FIGURE_STATE_JS,
    FIGURE_TEXT_JS,
    LEGEND_FIT_JS,
    PHONE_FIGURES_JS,
    PLOTLY_STATE_JS,
    RENDER_TIMEOUT_MS,
    WAIT_PLOTLY_JS,
    broken_links,
    describe_violations,
    failed_outputs,
    gd_selector,
    load_report,
    page_weight,
)

pytestmark = pytest.mark.browser

MAX_PAGE_BYTES = 1_500_000
PAGES = site_pages() or [None]


def once_per_page(browser, server, viewport: tuple[int, int], check, what: str):
    """``get(rel)``: ``check(page, log, server, rel)`` run once per page in a fresh context of this
    viewport, its result shared by every test that asks; a failure is kept too, so each of those tests
    reports the same one."""
    cache = {}

    def get(rel):
        if rel is None:
            pytest.fail("no pages found in the built site")  # `site` fixture already skipped/failed
        if rel not in cache:
            ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            try:
                page = ctx.new_page()
                log = PageLog()
                instrument(page, log)
                cache[rel] = check(page, log, server, rel)
            except Exception as exc:
                cache[rel] = exc
            finally:
                ctx.close()
        if isinstance(cache[rel], Exception):
            pytest.fail(f"{rel}: the page could not be {what}: {cache[rel]}", pytrace=False)
        return cache[rel]

    return get


@pytest.fixture(scope="session")
def report(browser, server):
    """``report(rel)``: the page's load report, measured once per session and shared by the tests."""
    return once_per_page(browser, server, (1280, 900), load_report, "loaded and measured")


@pytest.mark.parametrize("rel", PAGES)
def test_no_console_errors_or_external_requests(report, rel):
    rep = report(rel)
    problems = rep.log.problems()
    header = f"{rel}: {len(problems)} problem(s) while loading offline:\n  "
    assert not problems, header + "\n  ".join(problems)


@pytest.mark.parametrize("rel", PAGES)
def test_no_failed_cell_outputs(site, rel):
    """No page publishes a cell that failed or complained: no traceback, error or stderr output block,
    and no "Traceback (most recent call last)" anywhere in its text (a build with allowed errors, or a
    cell that prints a caught traceback, would otherwise ship it to readers)."""
    if rel is None:
        pytest.fail("no pages found in the built site")
    found = failed_outputs(page_source(rel))
    header = f"{rel}: {len(found)} failed or noisy cell output(s) published:\n  "
    assert not found, header + "\n  ".join(found)


@pytest.mark.parametrize("rel", PAGES)
def test_math_is_typeset(report, rel):
    rep = report(rel)
    m = rep.math
    assert rep.mathjax != "MathJax never started", f"{rel} has math but MathJax never loaded"
    assert not m["untypeset"], f"{rel}: math left untypeset: {m['untypeset'][:5]}"
    assert not m["errors"], f"{rel}: MathJax errors (bad TeX): {m['errors'][:5]}"
    assert not m["raw"], f"{rel}: raw TeX visible to the reader: {m['raw'][:5]}"
    if m["n_math"]:
        rendered = f"{rel}: {m['n_math']} math elements, {m['n_rendered']} rendered"
        assert m["n_rendered"] >= m["n_math"], rendered


@pytest.mark.parametrize("rel", PAGES)
def test_plotly_figures_render(report, rel):
    rep = report(rel)
    blank = [f["id"] for f in rep.figures if not f["rendered"]]
    empty = [f["id"] for f in rep.figures if f["rendered"] and f["n_traces"] == 0]
    flat = [f["id"] for f in rep.figures if f["rendered"] and (f["width"] < 50 or f["height"] < 50)]
    assert rep.plotly_ready and not blank, f"{rel}: plotly figures not drawn (no svg.main-svg): {blank}"
    assert not empty, f"{rel}: plotly figures with no traces: {empty}"
    assert not flat, f"{rel}: plotly figures drawn with no room (under 50 px): {flat}"


@pytest.mark.parametrize("rel", PAGES)
def test_figure_text_is_readable(report, rel):
    """Titles, axis titles, subplot titles, colour-bar titles and legends neither collide nor get cut off."""
    rep = report(rel)
    assert not rep.figure_text, f"{rel}: figure text a reader cannot read:\n  " + "\n  ".join(rep.figure_text)


@pytest.mark.parametrize("rel", PAGES)
def test_legends_fit_their_figure(report, rel):
    """At 1280 px every legend is whole: inside its figure, no entry hidden behind a scroll bar."""
    rep = report(rel)
    assert not rep.legends, f"{rel}: legends cut off:\n  " + "\n  ".join(rep.legends)


def test_the_legend_check_sees_a_cut_off_legend(new_page, server, site):
    """The check above can fail: a legend pushed past the figure's right edge, and one too tall for its
    figure (plotly scrolls it), drawn with the site's own plotly.js, are both reported."""
    page, _ = new_page()
    page.goto(urljoin(server, "index.html"), wait_until="load")
    page.wait_for_function("() => window.Plotly !== undefined", timeout=RENDER_TIMEOUT_MS)
    page.evaluate("""async () => {
      for (const [id, legend, n] of [['wide', {x: 1.4}, 2], ['tall', {}, 40]]) {  // no margin room
        const div = document.createElement('div');
        div.id = id; div.className = 'plotly-graph-div'; div.style.width = '600px';
        document.body.prepend(div);
        const data = Array.from({length: n}, (_, i) => ({y: [i, i + 1], name: `series number ${i}`}));
        await Plotly.newPlot(div, data, {height: 300, legend, showlegend: true, margin: {autoexpand: false}});
      }
    }""")
    found = page.evaluate(LEGEND_FIT_JS)
    assert any(p.startswith("wide: legend 0") and "cut off" in p for p in found), found
    assert any(p.startswith("tall: legend 0") and "scroll bar" in p for p in found), found


@pytest.mark.parametrize("rel", PAGES)
def test_accessibility(report, rel):
    rep = report(rel)
    serious = describe_violations(rep.violations)
    assert not serious, f"{rel}: axe-core serious/critical violations:\n" + "\n".join(serious)


@pytest.mark.parametrize("rel", PAGES)
def test_page_weight(report, rel):
    rep = report(rel)
    total, items = page_weight(rep)
    listing = "\n  ".join(f"{size / 1e3:9.1f} kB  {name}" for name, size in items[:10])
    assert total < MAX_PAGE_BYTES, (
        f"{rel}: {total / 1e6:.2f} MB of page-specific files (limit {MAX_PAGE_BYTES / 1e6} MB):\n  {listing}"
    )


@pytest.mark.parametrize("rel", PAGES)
def test_internal_links_resolve(report, rel):
    rep = report(rel)
    bad = broken_links(rep)
    assert not bad, f"{rel}: {len(bad)} broken internal link(s):\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("rel", PAGES)
def test_screenshot_saved(report, rel):
    rep = report(rel)
    assert rep.screenshot is not None and rep.screenshot.stat().st_size > 1000, f"{rel}: no screenshot"


PHONE = (390, 844)  # a common phone viewport, CSS pixels

OVERFLOW_JS = """
() => {
  const vw = document.documentElement.clientWidth;
  const wide = [];
  // Elements wider than the screen that are not inside a horizontally scrollable box.
  const scrolls = (el) => {
    for (let e = el.parentElement; e; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX;
      if ((o === 'auto' || o === 'scroll' || o === 'hidden') && e !== document.body
          && e !== document.documentElement) return true;
    }
    return false;
  };
  document.querySelectorAll('.bd-article *').forEach(el => {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 1 && !scrolls(el)) {
      const cls = typeof el.className === 'string' ? el.className.split(' ')[0] : '';
      const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (cls ? '.' + cls : '');
      wide.push(`${name} (right edge at ${Math.round(r.right)} px)`);
    }
  });
  return {page: document.documentElement.scrollWidth, viewport: vw, wide: wide.slice(0, 8)};
}
"""


CHAPTERS = [p for p in PAGES if p is None or p.startswith("book/")]


def _tap_first_controls(page) -> list[str]:
    """Tap each explorer's first control (its second step, near the rail's left end where a thumb
    reaches it); the figures whose control changed nothing."""
    problems = []
    for fig in page.evaluate(PLOTLY_STATE_JS):
        gd = fig["id"]
        sliders = [(i, s) for i, s in enumerate(fig["sliders"]) if s["visible"] and len(s["steps"]) > 1]
        menus = [(i, m) for i, m in enumerate(fig["menus"]) if m["visible"] and len(m["buttons"]) > 1]
        first = [s["steps"][1]["method"] for _, s in sliders] + [m["buttons"][1]["method"] for _, m in menus]
        if not first or first[0] == "skip":
            continue  # a figure without controls, or one whose step only moves the control
        before = page.evaluate(FIGURE_STATE_JS, gd)
        try:
            if sliders:
                i, s = sliders[0]
                target = 1 if s["active"] != 1 else 0
                _operate_slider(page, gd, i, target, len(s["steps"]))
                _wait_changed(page, gd, before, s["steps"][target]["method"])
            else:
                i, m = menus[0]
                target = 1 if m["active"] != 1 else 0
                _operate_menu(page, gd, i, m["type"], target)
                _wait_changed(page, gd, before, m["buttons"][target]["method"])
        except Exception as exc:
            problems.append(f"{gd}: its first control does nothing at {PHONE[0]} px ({type(exc).__name__})")
    return problems


def _open_solutions(page) -> list[str]:
    """Every exercise solution must be a closed dropdown that opens when its title is clicked."""
    solutions = page.locator("div.solution")
    problems = []
    for i in range(solutions.count()):
        sol = solutions.nth(i)
        sol_id = sol.get_attribute("id") or f"solution {i}"
        classes = sol.get_attribute("class") or ""
        if "dropdown" not in classes.split():
            problems.append(f"{sol_id}: not a dropdown (class={classes!r}); add `:class: dropdown`")
            continue
        body = sol.locator(":scope > :not(.admonition-title)")
        if body.count() == 0:
            problems.append(f"{sol_id}: an empty solution")
            continue
        if any(body.nth(j).is_visible() for j in range(body.count())):
            problems.append(f"{sol_id}: open before the reader asks (its body is visible)")
            continue
        sol.locator(".admonition-title").click()
        try:
            body.first.wait_for(state="visible", timeout=CHANGE_TIMEOUT_MS)
        except Exception:
            problems.append(f"{sol_id}: clicking its title does not open it")
    return problems


def _phone_checks(page, log: PageLog, server: str, rel: str) -> dict:
    """One chapter at phone size, checked in an order where no step disturbs the next: the page's
    width, its figures (their layout, then each explorer's first control tapped), its solutions."""
    page.goto(urljoin(server, rel), wait_until="load")
    page.wait_for_function(WAIT_PLOTLY_JS, timeout=RENDER_TIMEOUT_MS)
    page.wait_for_timeout(500)  # plotly's responsive resize
    width = page.evaluate(OVERFLOW_JS)
    figures = page.evaluate(PHONE_FIGURES_JS) + page.evaluate(FIGURE_TEXT_JS) + _tap_first_controls(page)
    figures_log = list(log.problems())
    return {"width": width, "figures": figures, "figures_log": figures_log,
            "solutions": _open_solutions(page),
            "solutions_log": [p for p in log.problems() if p not in figures_log]}


@pytest.fixture(scope="session")
def phone(browser, server):
    """``phone(rel)``: a chapter loaded once at phone size and checked (:func:`_phone_checks`); the
    three tests that read it share the one load."""
    return once_per_page(browser, server, PHONE, _phone_checks, "checked at phone size")


@pytest.mark.parametrize("rel", CHAPTERS)
def test_fits_a_phone_screen(phone, rel):
    """On a phone the page does not scroll sideways: wide code, tables, figures scroll in their own box."""
    if rel is None:
        missing("no chapter pages in the built site")
    state = phone(rel)["width"]
    assert state["page"] <= state["viewport"] + 1 and not state["wide"], (
        f"{rel} at {PHONE[0]} px: the page is {state['page']} px wide; too wide: {state['wide']}"
    )


# --- plotly controls ---------------------------------------------------------------------------

CONTROL_PAGES = pages_containing('"sliders"', '"updatemenus"')


def _operate_slider(page, gd_id, i, target, n_steps):
    """Click the slider's rail at the target step, as a reader would."""
    page.evaluate("(id) => document.getElementById(id).scrollIntoView({block: 'center'})", gd_id)
    rail = page.locator(f"{gd_selector(gd_id)} g.slider-group").nth(i).locator("rect.slider-rail-touch-rect")
    box = rail.bounding_box()
    frac = 0.5 if n_steps == 1 else target / (n_steps - 1)
    x = max(2.0, min(box["width"] - 2.0, frac * box["width"]))
    rail.click(position={"x": x, "y": box["height"] / 2}, force=True)


def _operate_menu(page, gd_id, i, menu_type, target):
    """Open a dropdown and pick an item, or press one of a row of buttons."""
    page.evaluate("(id) => document.getElementById(id).scrollIntoView({block: 'center'})", gd_id)
    header = page.locator(f"{gd_selector(gd_id)} g.updatemenu-header-group").nth(i)
    if menu_type == "dropdown":
        header.locator("g.updatemenu-header").click()
        # the open list of a dropdown (plotly draws it on the click, in its own group)
        buttons = page.locator(f"{gd_selector(gd_id)} g.updatemenu-dropdown-button")
        buttons.nth(target).wait_for(state="visible", timeout=CHANGE_TIMEOUT_MS)
    else:
        buttons = header.locator("g.updatemenu-button")
    buttons.nth(target).click()


# What a control's method must change: restyle/animate the traces, relayout the layout, update either.
CHANGES = {"restyle": ("data",), "animate": ("data",), "relayout": ("layout",), "update": ("data", "layout")}


def _wait_changed(page, gd_id, before, method):
    fields = CHANGES.get(method, ("data", "layout"))
    page.wait_for_function(
        f"([id, before, fields]) => {{ const now = ({FIGURE_STATE_JS})(id);"
        " return fields.some(f => now[f] !== before[f]); }",
        arg=[gd_id, before, list(fields)],
        timeout=CHANGE_TIMEOUT_MS,
    )


@pytest.mark.parametrize("rel", CONTROL_PAGES or [None])
def test_plotly_controls_change_their_figure(new_page, server, rel):
    if rel is None:
        missing("no page of the site has a plotly slider or menu")
    page, log = new_page()
    page.goto(urljoin(server, rel), wait_until="load")
    page.wait_for_function(WAIT_PLOTLY_JS, timeout=RENDER_TIMEOUT_MS)
    figures = page.evaluate(PLOTLY_STATE_JS)
    failures, operated = [], 0
    for fig in figures:
        gd = fig["id"]
        controls = [("slider", i, s, s["steps"]) for i, s in enumerate(fig["sliders"]) if s["visible"]]
        controls += [("menu", i, m, m["buttons"]) for i, m in enumerate(fig["menus"]) if m["visible"]]
        for kind, i, opts, items in controls:
            if len(items) < 2:
                continue
            active = opts["active"] if isinstance(opts["active"], int) and opts["active"] >= 0 else 0
            target = len(items) - 1 if active != len(items) - 1 else 0
            method = items[target]["method"]
            name = f"{gd} {kind} {i} -> {items[target]['label']!r} ({method})"
            if method == "skip":
                continue  # a step that by design only moves the control
            before = page.evaluate(FIGURE_STATE_JS, gd)
            try:
                if kind == "slider":
                    _operate_slider(page, gd, i, target, len(items))
                else:
                    _operate_menu(page, gd, i, opts["type"], target)
                _wait_changed(page, gd, before, method)
                now_active = page.evaluate(CONTROL_ACTIVE_JS, [gd, kind, i])
                if now_active != target:
                    failures.append(f"{name}: figure changed but the control shows step {now_active}")
                operated += 1
            except Exception as exc:  # report every control, not only the first that fails
                failures.append(f"{name}: the figure did not change ({type(exc).__name__}: {str(exc)[:200]})")
    assert not failures, f"{rel}: plotly controls that do nothing:\n  " + "\n  ".join(failures)
    assert operated > 0 or not any(f["sliders"] or f["menus"] for f in figures), f"{rel}: no control operated"
    assert not log.problems(), f"{rel}: errors while operating controls:\n  " + "\n  ".join(log.problems())


FIGURE_PAGES = [p for p in pages_containing("plotly-graph-div") if p.startswith("book/")]


@pytest.mark.parametrize("rel", FIGURE_PAGES or [None])
def test_figures_fit_a_phone(phone, rel):
    """At 390 x 844 every figure is whole and readable: nothing cut off by the screen (a figure wider than
    the screen scrolls in its own box), titles, controls and legends inside the figure, legends clear of
    the controls, text not overlapping, plot areas with room; and each explorer's first control still
    changes its figure when tapped."""
    if rel is None:
        missing("no chapter of the site has a plotly figure")
    problems, errors = phone(rel)["figures"], phone(rel)["figures_log"]
    assert not problems, f"{rel} at {PHONE[0]} x {PHONE[1]} px:\n  " + "\n  ".join(problems)
    assert not errors, f"{rel}: errors at phone width:\n  " + "\n  ".join(errors)


KEYBOARD_PAGES = pages_containing('class="linattn-keys"')

KEYBOARD_FIGURES_JS = """
() => Array.from(document.querySelectorAll('figure.linattn-figure[tabindex]')).map((f, i) => {
  const gd = f.querySelector('.plotly-graph-div');
  const lay = gd.layout || {};
  const s = (lay.sliders || [])[0], m = (lay.updatemenus || [])[0];
  return {index: i, id: gd.id, hint: (f.querySelector('figcaption') || {}).textContent || '',
          slider: s ? {active: s.active || 0, n: s.steps.length,
                       method: s.steps[0].method || 'restyle'} : null,
          menu: m ? {active: m.active || 0, n: m.buttons.length,
                     method: m.buttons[((m.active || 0) + 1) % m.buttons.length].method || 'restyle'} : null};
})
"""


@pytest.mark.parametrize("rel", KEYBOARD_PAGES or [None])
def test_interactive_figures_work_from_the_keyboard(new_page, server, rel):
    """A focusable figure promises (in its caption) arrow keys for its slider and menu: keep the promise."""
    if rel is None:
        missing("no page of the site has a keyboard-operable figure")
    page, log = new_page()
    page.goto(urljoin(server, rel), wait_until="load")
    page.wait_for_function(WAIT_PLOTLY_JS, timeout=RENDER_TIMEOUT_MS)
    failures = []
    for fig in page.evaluate(KEYBOARD_FIGURES_JS):
        figure = page.locator("figure.linattn-figure[tabindex]").nth(fig["index"])
        gd = fig["id"]
        for kind, ctl in (("slider", fig["slider"]), ("menu", fig["menu"])):
            if ctl is None or ctl["n"] < 2:
                continue
            if kind == "slider":
                key = "ArrowLeft" if ctl["active"] == ctl["n"] - 1 else "ArrowRight"
            else:
                key = "ArrowDown"
            before = page.evaluate(FIGURE_STATE_JS, gd)
            figure.focus()
            page.keyboard.press(key)
            name = f"{gd} {kind} ({key})"
            try:
                _wait_changed(page, gd, before, ctl["method"])
            except Exception:
                failures.append(f"{name}: the figure did not change")
                continue
            live = figure.locator(".linattn-live")
            if live.count() and not live.inner_text().strip():
                failures.append(f"{name}: nothing announced in the live region")
    assert not failures, f"{rel}: keyboard control of figures:\n  " + "\n  ".join(failures)
    assert not log.problems(), f"{rel}: errors while using the keyboard:\n  " + "\n  ".join(log.problems())


# --- search ------------------------------------------------------------------------------------


def test_search_finds_associative(new_page, server, site):
    page, log = new_page()
    page.goto(urljoin(server, "search.html?q=associative"), wait_until="load")
    results = page.locator("#search-results ul.search li")
    try:
        results.first.wait_for(state="attached", timeout=RENDER_TIMEOUT_MS)
    except Exception:
        status = page.locator("#search-results").inner_text(timeout=1000)
        pytest.fail(f"search for 'associative' returned no results; the page says: {status[:300]!r}")
    hrefs = page.eval_on_selector_all("#search-results ul.search li a", "as => as.map(a => a.href)")
    assert hrefs, "search results without links"
    for href in hrefs:
        target = url_to_file(href)
        assert target is not None and target.is_file(), f"search result points nowhere: {href}"
    assert not log.problems(), "errors on the search page:\n  " + "\n  ".join(log.problems())


# --- exercise solutions --------------------------------------------------------------------------

SOLUTION_PAGES = [p for p in site_pages() if 'class="solution' in page_source(p)]


@pytest.mark.parametrize("rel", SOLUTION_PAGES or [None])
def test_solutions_are_closed_dropdowns(phone, rel):
    """Checked at phone size, on the load the phone tests share (the dropdowns do not depend on the width)."""
    if rel is None:
        missing("no page of the site has exercise solutions")
    assert 'class="solution' in page_source(rel)
    problems = phone(rel)["solutions"] + phone(rel)["solutions_log"]
    assert not problems, f"{rel}: exercise solutions:\n  " + "\n  ".join(problems)


def test_every_page_is_reachable_from_the_table_of_contents(new_page, server, site):
    """Each chapter page appears in the sidebar of the title page (no orphan pages)."""
    page, _ = new_page()
    page.goto(urljoin(server, "index.html"), wait_until="load")
    page.wait_for_load_state("networkidle")
    hrefs = page.eval_on_selector_all("nav.bd-links a[href]", "as => as.map(a => a.href)")
    linked = {urlsplit(h).path.lstrip("/") for h in hrefs}
    linked.add(urlsplit(page.url).path.lstrip("/"))
    chapters = [p for p in site_pages() if p.startswith("book/")]
    orphans = [p for p in chapters if p not in linked]
    assert not orphans, f"pages not in the sidebar's table of contents: {orphans}"
