"""What the site tests measure on a loaded page, kept apart from the assertions.

Each page of the built site is loaded once (``load_report``) with every non-local host blocked; the
report records console errors, requests, the state of math and plotly figures, the axe-core
violations, the links and the page weight, and saves a full-page screenshot. The tests in
``test_site.py`` then assert on one aspect each, so a failure names what broke on which page.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from _browser import LOCAL_HOST, SCREENSHOTS, SITE, PageLog, axe_source, page_source, site_pages, url_to_file

# Generous waits: two shared CPU cores, several engineers building at once.
RENDER_TIMEOUT_MS = 30_000
CHANGE_TIMEOUT_MS = 10_000

# --- JavaScript run in the page --------------------------------------------------------------

WAIT_MATHJAX_JS = """
async (timeoutMs) => {
  const hasMath = document.querySelector('.math, mjx-container') !== null;
  if (!hasMath) return 'no math';
  const deadline = Date.now() + timeoutMs;
  while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    if (Date.now() > deadline) return 'MathJax never started';
    await new Promise(r => setTimeout(r, 100));
  }
  await MathJax.startup.promise;
  return 'typeset';
}
"""

MATH_STATE_JS = r"""
() => {
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEXTAREA', 'PRE', 'CODE', 'TEMPLATE',
                        'MJX-CONTAINER', 'MJX-ASSISTIVE-MML']);
  const skipped = (el) => {
    for (let e = el; e; e = e.parentElement) {
      if (SKIP.has(e.tagName) || (e.classList && (e.classList.contains('highlight')
          || e.classList.contains('cell_input')))) return true;
    }
    return false;
  };
  // Raw TeX a reader would see: display/inline delimiters, environments, or $...\command...$.
  const RAW = /\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\s][^$]*\\[a-zA-Z]+[^$]*\$/;
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (RAW.test(n.nodeValue) && !skipped(n.parentElement)) {
      raw.push(n.nodeValue.trim().slice(0, 120));
    }
  }
  const maths = Array.from(document.querySelectorAll('.math'));
  const untypeset = maths.filter(m => !m.querySelector('mjx-container'))
                         .map(m => m.textContent.trim().slice(0, 120));
  const errors = Array.from(document.querySelectorAll('mjx-merror'))
                      .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120));
  return {n_math: maths.length, n_rendered: document.querySelectorAll('mjx-container').length,
          untypeset, errors, raw};
}
"""

WAIT_PLOTLY_JS = """
() => Array.from(document.querySelectorAll('.plotly-graph-div'))
           .every(gd => gd.querySelector('svg.main-svg') && gd._fullLayout)
"""

PLOTLY_STATE_JS = """
() => Array.from(document.querySelectorAll('.plotly-graph-div')).map((gd, i) => {
  if (!gd.id) gd.id = 'linattn-test-gd-' + i;
  const lay = gd.layout || {};
  const r = gd.getBoundingClientRect();
  return {
    id: gd.id,
    rendered: gd.querySelector('svg.main-svg') !== null,
    n_traces: (gd.data || []).length,
    width: r.width, height: r.height,
    sliders: (lay.sliders || []).map(s => ({
      active: s.active || 0, visible: s.visible !== false,
      steps: (s.steps || []).map(st => ({label: String(st.label ?? ''), method: st.method || 'restyle'}))})),
    menus: (lay.updatemenus || []).map(m => ({
      type: m.type || 'dropdown', active: m.active ?? 0, visible: m.visible !== false,
      buttons: (m.buttons || []).map(b => ({label: String(b.label ?? ''), method: b.method || 'restyle'}))})),
  };
})
"""

# The figure's state: its traces, and its layout without the controls' own bookkeeping.
FIGURE_STATE_JS = """
(id) => {
  const gd = document.getElementById(id);
  const plain = (k, v) => (ArrayBuffer.isView(v) ? Array.from(v) : v);
  const layout = Object.assign({}, gd.layout);
  delete layout.sliders; delete layout.updatemenus;
  return {data: JSON.stringify(gd.data, plain), layout: JSON.stringify(layout, plain)};
}
"""

CONTROL_ACTIVE_JS = """
([id, kind, i]) => {
  const lay = document.getElementById(id)._fullLayout;
  const opts = kind === 'slider' ? lay.sliders[i] : lay.updatemenus[i];
  return opts.active;
}
"""

# Text a reader must be able to read in each figure: titles, axis titles, subplot titles
# (annotations), colour-bar titles, legend entries. Two of them overlapping, or one running out of the
# figure's box (cut off by the page), is reported; so is a tick label under one of them (two tick
# labels are left to plotly's own layout).
FIGURE_TEXT_JS = """
() => {
  const SEL = '.gtitle, .g-xtitle text, .g-ytitle text, .g-x2title text, .g-y2title text, '
            + '[class*="g-x"][class$="title"] text, [class*="g-y"][class$="title"] text, '
            + '.annotation-text, .cbtitle text, .legendtext';
  const TICKS = '.xtick text, .ytick text';
  const OVERLAP_PX = 5;
  const problems = [];
  document.querySelectorAll('.plotly-graph-div').forEach(gd => {
    const box = gd.getBoundingClientRect();
    const collect = (sel, tick) => Array.from(new Set(gd.querySelectorAll(sel)))
      .filter(t => t.textContent.trim() && t.getClientRects().length)
      .map(t => ({text: t.textContent.trim().slice(0, 50), r: t.getBoundingClientRect(), tick}))
      .filter(t => t.r.width > 0 && t.r.height > 0);
    const titles = collect(SEL, false);
    const items = titles.concat(collect(TICKS, true));
    const name = gd.id;
    for (const t of titles) {
      if (t.r.left < box.left - 1 || t.r.right > box.right + 1) {
        problems.push(`${name}: "${t.text}" runs out of the figure (${Math.round(t.r.left - box.left)}..`
                      + `${Math.round(t.r.right - box.left)} px of ${Math.round(box.width)})`);
      }
    }
    for (let i = 0; i < items.length; i++) {
      for (let j = i + 1; j < items.length; j++) {
        if (items[i].tick && items[j].tick) continue;
        const a = items[i].r, b = items[j].r;
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        // SVG text boxes include a few pixels of line height around the glyphs: more than
        // OVERLAP_PX or more in both directions is glyphs on glyphs, not boxes brushing.
        if (Math.round(w) >= OVERLAP_PX && Math.round(h) >= OVERLAP_PX) {
          const size = `${Math.round(w)}x${Math.round(h)} px`;
          problems.push(`${name}: "${items[i].text}" overlaps "${items[j].text}" (${size})`);
        }
      }
    }
  });
  return problems;
}
"""

# Each legend whole: its box inside the figure's (4 px for line height), and no scroll bar (plotly gives
# a legend taller than its room a scroll bar and hides the entries below the fold).
LEGEND_FIT_JS = """
() => {
  const problems = [];
  document.querySelectorAll('.plotly-graph-div').forEach(gd => {
    const box = gd.getBoundingClientRect();
    gd.querySelectorAll('g.legend').forEach((l, i) => {
      const L = l.getBoundingClientRect();
      if (L.width === 0 || L.height === 0) return;
      const first = (l.querySelector('.legendtext') || {}).textContent || '';
      const name = `${gd.id}: legend ${i} ("${first.slice(0, 40)}")`;
      const R = Math.round;
      const x0 = R(L.left - box.left), x1 = R(L.right - box.left);
      const y0 = R(L.top - box.top), y1 = R(L.bottom - box.top);
      if (x0 < -4 || x1 > box.width + 4 || y0 < -4 || y1 > box.height + 4) {
        problems.push(`${name} is cut off: ${x0}..${x1} x ${y0}..${y1} px in a `
                      + `${R(box.width)} x ${R(box.height)} figure`);
      }
      const bar = l.querySelector('rect.scrollbar');
      if (bar && bar.getBoundingClientRect().height > 0) {
        problems.push(`${name} does not fit: plotly shows it with a scroll bar, entries hidden`);
      }
    });
  });
  return problems;
}
"""

LINKS_JS = """
() => Array.from(document.querySelectorAll('a[href]'))
           .map(a => ({href: a.href, raw: a.getAttribute('href'), text: a.textContent.trim().slice(0, 60)}))
"""

AXE_RUN_JS = """
async () => {
  const res = await axe.run(document, {resultTypes: ['violations']});
  return res.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, tags: v.tags,
    nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 200),
                              summary: (n.failureSummary || '').slice(0, 400)}))}));
}
"""


# --- the report --------------------------------------------------------------------------------


@dataclass
class Report:
    rel: str
    url: str
    log: PageLog
    final_url: str = ""
    math: dict = field(default_factory=dict)
    mathjax: str = ""
    plotly_ready: bool = True
    figures: list = field(default_factory=list)
    figure_text: list = field(default_factory=list)
    legends: list = field(default_factory=list)
    links: list = field(default_factory=list)
    violations: list = field(default_factory=list)
    screenshot: Path | None = None


def is_redirect(rel: str) -> str | None:
    """The target of a meta-refresh page (Jupyter Book's root index.html), or None."""
    m = re.search(r'http-equiv="Refresh"\s+content="\d+;\s*url=([^"]+)"', page_source(rel), re.I)
    return m.group(1) if m else None


def settle(page, timeout_ms: int = 5_000) -> None:
    """Wait (briefly, best effort) for the network to go quiet: late fonts, MathJax components."""
    try:
        page.wait_for_load_state("networkidle", timeout=timeout_ms)
    except Exception:
        pass  # a page that keeps a connection open is judged by the explicit waits that follow


def gd_selector(gd_id: str) -> str:
    """A CSS selector for a plotly div by id (plotly ids may start with a digit)."""
    return f'[id="{gd_id}"]'


def load_report(browser_page, log: PageLog, base: str, rel: str) -> Report:
    page = browser_page
    url = urljoin(base, rel)
    rep = Report(rel=rel, url=url, log=log)
    page.goto(url, wait_until="load", timeout=RENDER_TIMEOUT_MS)
    target = is_redirect(rel)
    if target:
        page.wait_for_url(urljoin(url, target), timeout=RENDER_TIMEOUT_MS)
        page.wait_for_load_state("load")
    settle(page)
    rep.final_url = page.url
    rep.mathjax = page.evaluate(WAIT_MATHJAX_JS, RENDER_TIMEOUT_MS)
    try:
        page.wait_for_function(WAIT_PLOTLY_JS, timeout=RENDER_TIMEOUT_MS)
    except Exception:
        rep.plotly_ready = False
    rep.math = page.evaluate(MATH_STATE_JS)
    rep.figures = page.evaluate(PLOTLY_STATE_JS)
    rep.figure_text = page.evaluate(FIGURE_TEXT_JS)
    rep.legends = page.evaluate(LEGEND_FIT_JS)
    rep.links = page.evaluate(LINKS_JS)
    log.frozen = True  # what follows is the tests' own doing
    page.add_script_tag(content=axe_source())
    rep.violations = page.evaluate(AXE_RUN_JS)
    shot = SCREENSHOTS / (rel[: -len(".html")] + ".png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    rep.screenshot = shot
    return rep


# --- page weight ---------------------------------------------------------------------------------

_REF_RE = re.compile(r'(?:src|href)\s*=\s*["\']([^"\'#?]+)')


def _site_rel(path: Path) -> str | None:
    try:
        return path.resolve().relative_to(SITE).as_posix()
    except ValueError:
        return None


@cache
def shared_assets() -> frozenset[str]:
    """Site files referenced by two or more pages: cached once by a reader's browser."""
    counts: Counter[str] = Counter()
    for rel in site_pages():
        refs = set()
        for ref in _REF_RE.findall(page_source(rel)):
            if "://" in ref or ref.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = _site_rel(SITE / Path(rel).parent / unquote(ref))
            if target and target != rel:
                refs.add(target)
        counts.update(refs)
    return frozenset(p for p, c in counts.items() if c >= 2)


def content_pages() -> list[str]:
    """Pages with content of their own: not the generated index, search page or a redirect."""
    return [p for p in site_pages() if p not in ("genindex.html", "search.html") and not is_redirect(p)]


def is_shared(rel_file: str) -> bool:
    """Whether a loaded file is site-wide (cached once by a reader's browser) rather than this page's own.

    Site-wide: a file referenced by two or more pages (searchindex.js, images used twice), and the files
    of Sphinx's static folder ``_static/`` (theme bundles, plotly.min.js, MathJax with the components and
    fonts it loads at run time), unless, in a site of several content pages, exactly one page references
    it (data or a script that page alone needs). Everything else (the HTML with its inlined figures,
    ``_images/``, ``_downloads/``) is the page's own weight.
    """
    if rel_file in shared_assets():
        return True
    if not rel_file.startswith("_static/"):
        return False
    if len(content_pages()) < 2:
        return True  # a one-page (partial) build: nothing tells site-wide from page-specific
    return _static_referrers(rel_file) != 1


@cache
def _static_referrers(rel_file: str) -> int:
    name = rel_file.split("/", 1)[1]
    return sum(1 for p in site_pages() if name in page_source(p))


def page_weight(rep: Report) -> tuple[int, list[tuple[str, int]]]:
    """Bytes of the page's own files (the HTML included) and the list of them, largest first."""
    own: dict[str, int] = {}
    for u in [rep.url, rep.final_url, *rep.log.local_urls]:
        f = url_to_file(u)
        rel_file = _site_rel(f) if f is not None else None
        if rel_file is None or not f.is_file():
            continue
        if rel_file.endswith(".html") or not is_shared(rel_file):
            own[rel_file] = f.stat().st_size
    items = sorted(own.items(), key=lambda kv: -kv[1])
    return sum(own.values()), items


# --- links ---------------------------------------------------------------------------------------


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k == "id" or (tag == "a" and k == "name"):
                self.ids.add(v or "")


@cache
def anchors_in(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def broken_links(rep: Report) -> list[str]:
    """Internal links of the page whose file or anchor does not exist, described for a reader."""
    bad = []
    for link in rep.links:
        parts = urlsplit(link["href"])
        if parts.scheme not in ("http", "https") or parts.hostname != LOCAL_HOST:
            continue
        target = url_to_file(link["href"])
        label = f'"{link["text"]}" -> {link["raw"]}'
        if target is None or not target.is_file():
            bad.append(f"{label}: no file {target}")
            continue
        frag = unquote(parts.fragment)
        if frag and target.suffix == ".html" and frag not in anchors_in(target):
            bad.append(f"{label}: no id '{frag}' in {_site_rel(target)}")
    return sorted(set(bad))


def describe_violations(violations: list[dict], impacts=("critical", "serious")) -> list[str]:
    out = []
    for v in violations:
        if v["impact"] not in impacts:
            continue
        lines = [f"[{v['impact']}] {v['id']}: {v['help']} ({len(v['nodes'])} element(s))"]
        for n in v["nodes"][:5]:
            lines.append(f"    at {n['target']}: {n['html']}")
            if n["summary"]:
                lines.append("      " + n["summary"].replace("\n", "\n      "))
        if len(v["nodes"]) > 5:
            lines.append(f"    ... and {len(v['nodes']) - 5} more")
        out.append("\n".join(lines))
    return out


# --- failed cells ----------------------------------------------------------------------------------

# myst-nb renders a cell's error output as ``<div class="output traceback ...">`` and a stream written to
# stderr (warnings, logging, a failed import's message) as ``<div class="output stderr ...">``; a page
# that shows either published a cell that failed or complained, whatever the build's exit status.
FAILED_OUTPUT_CLASSES = ("traceback", "error", "stderr")
TRACEBACK_TEXT = "Traceback (most recent call last)"
_VOID_TAGS = frozenset("area base br col embed hr img input link meta source track wbr".split())


class _FailedOutputs(HTMLParser):
    """Collects the text of every output block whose classes mark a failure, and the page's text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, list[str]]] = []  # (kind, text pieces)
        self.text: list[str] = []
        self._open: list[int] = []  # depth at which each open block started
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        if tag in _VOID_TAGS:
            return
        self._depth += 1
        classes = (dict(attrs).get("class") or "").split()
        kinds = [c for c in FAILED_OUTPUT_CLASSES if c in classes]
        if "output" in classes and kinds:
            self.blocks.append((kinds[0], []))
            self._open.append(self._depth)

    def handle_endtag(self, tag):
        if tag in _VOID_TAGS:
            return
        while self._open and self._open[-1] >= self._depth:
            self._open.pop()
        self._depth -= 1

    def handle_data(self, data):
        self.text.append(data)
        if self._open:
            self.blocks[-1][1].append(data)


def failed_outputs(html: str) -> list[str]:
    """What a page shows of failed cells: each traceback, error or stderr output block (its kind and its
    first line), and any text reading "Traceback (most recent call last)"; empty for a clean page."""
    parser = _FailedOutputs()
    parser.feed(html)
    parser.close()
    found = []
    for kind, pieces in parser.blocks:
        lines = [ln.strip() for ln in "".join(pieces).splitlines() if ln.strip()]
        # a traceback's last line names the exception; a stderr block's first line says what it is
        line = (lines[-1] if kind == "traceback" else lines[0]) if lines else ""
        found.append(f"{kind} output: {line[:200]!r}")
    text = "".join(parser.text)
    if TRACEBACK_TEXT in text and not any(k == "traceback" for k, _ in parser.blocks):
        at = text.index(TRACEBACK_TEXT)
        found.append(f"traceback in the text: {text[at:at + 200]!r}")
    return found


# --- figures on a phone -----------------------------------------------------------------------------

# Per plotly figure at the current viewport: whatever a reader needs (title, controls, legend, plot
# areas) inside the figure's own box; that box on screen or inside a box that scrolls sideways (and
# lies on screen), so nothing is out of reach; legends clear of the controls; plot
# areas with room to read (at least 80 x 60 px). A legend inside a plot area is a layout choice (it has
# its own background); one over a control is not. Text boxes carry a few pixels of line height around
# the glyphs: a part counts as out of the figure beyond 4 px.
PHONE_FIGURES_JS = """
() => {
  const vw = document.documentElement.clientWidth;
  const R = Math.round;
  const round = (r) => `${R(r.left)}..${R(r.right)} x ${R(r.top)}..${R(r.bottom)}`;
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 5
                            && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 5;
  const scroller = (el) => {
    for (let e = el.parentElement; e && e !== document.body; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX;
      if (o === 'auto' || o === 'scroll') return e;
    }
    return null;
  };
  const problems = [];
  document.querySelectorAll('.plotly-graph-div').forEach(gd => {
    const name = gd.id;
    const box = gd.getBoundingClientRect();
    const sc = scroller(gd);
    if (box.left < -1 || box.right > vw + 1) {
      if (!sc) {
        problems.push(`${name}: the figure (${round(box)}) is cut off by the screen (${vw} px)`);
      } else {
        const s = sc.getBoundingClientRect();
        if (s.left < -1 || s.right > vw + 1) problems.push(`${name}: its scrolling box runs off the screen`);
        if (sc.scrollWidth + 1 < box.width) problems.push(`${name}: its scrolling box cannot reach it all`);
      }
    }
    const parts = [];
    gd.querySelectorAll('g.slider-group').forEach((g, i) => parts.push([`slider ${i}`, g]));
    gd.querySelectorAll('g.updatemenu-header-group').forEach((g, i) => parts.push([`menu ${i}`, g]));
    gd.querySelectorAll('g.legend').forEach((g, i) => parts.push([`legend ${i}`, g]));
    gd.querySelectorAll('.gtitle').forEach((g, i) => parts.push([`title`, g]));
    for (const [what, g] of parts) {
      const r = g.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) continue;
      const out = r.left < box.left - 4 || r.right > box.right + 4 || r.top < box.top - 4
                  || r.bottom > box.bottom + 4;
      if (out) {
        problems.push(`${name}: ${what} (${round(r)}) runs out of the figure (${round(box)})`);
      }
    }
    const areas = Array.from(gd.querySelectorAll('.nsewdrag')).map(d => d.getBoundingClientRect());
    areas.forEach((a, i) => {
      if (a.width < 80 || a.height < 60) {
        problems.push(`${name}: plot area ${i} is cramped (${R(a.width)} x ${R(a.height)} px)`);
      }
    });
    gd.querySelectorAll('g.legend').forEach(l => {
      const L = l.getBoundingClientRect();
      if (L.width === 0) return;
      parts.filter(([w]) => w.startsWith('slider') || w.startsWith('menu')).forEach(([w, g]) => {
        if (overlap(L, g.getBoundingClientRect())) problems.push(`${name}: the legend covers ${w}`);
      });
    });
  });
  return problems;
}
"""
