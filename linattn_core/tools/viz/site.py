"""The static-site renderer: a figure as an accessible HTML fragment, without plotly.js or a CDN.

The book serves ``plotly.min.js`` once for the whole site; :func:`use_static_renderer` makes plotly
render every figure with :func:`figure_html`, which wraps it in a ``<figure>`` with an aria-label and,
for figures with sliders or menus (the static twins), binds the arrow keys to them.
"""

from __future__ import annotations

import hashlib
import html
import itertools
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.io._base_renderers import MimetypeRenderer

#: Name under which :func:`use_static_renderer` registers its renderer.
BOOK_RENDERER = "linattn_book"

_PLOT_CONFIG = {"displaylogo": False, "responsive": True}
_counter = itertools.count()


def _alt_text(fig_dict: Mapping[str, Any]) -> str:
    layout = fig_dict.get("layout", {}) or {}
    meta = layout.get("meta")
    if isinstance(meta, Mapping) and meta.get("alt"):
        return str(meta["alt"])
    title = layout.get("title")
    if isinstance(title, Mapping) and title.get("text"):
        return str(title["text"])
    if isinstance(title, str) and title:
        return title
    return "Interactive plotly figure"


# Keyboard access for the static twins: plotly's own sliders and menus are SVG and take no focus. The
# <figure> is focusable; ← → (Home, End) step the first slider, ↑ ↓ cycle the first menu, exactly as a
# click would (same frames, same restyle/update arguments); a polite live region announces the value.
_KEYS_JS = """
(function () {
  var gd = document.getElementById('{plot_id}');
  var fig = gd && gd.closest('figure.linattn-figure');
  if (!fig || fig.dataset.linattnKeys) { return; }
  fig.dataset.linattnKeys = '1';
  var opts = {mode: 'immediate', frame: {duration: 0, redraw: true}, transition: {duration: 0}};
  function say(text) {  // looked up now: the span is parsed after this script ran
    var live = fig.querySelector('.linattn-live');
    if (live) { live.textContent = text; }
  }
  function slide(i) {
    var s = gd.layout.sliders && gd.layout.sliders[0];
    if (!s) { return false; }
    i = Math.max(0, Math.min(s.steps.length - 1, i));
    var step = s.steps[i];
    Plotly.animate(gd, step.args[0], opts).then(function () {
      return Plotly.relayout(gd, {'sliders[0].active': i});
    });
    say(((s.currentvalue && s.currentvalue.prefix) || '') + step.label);
    return true;
  }
  function menu(delta) {
    var m = gd.layout.updatemenus && gd.layout.updatemenus[0];
    if (!m) { return false; }
    var n = m.buttons.length, i = (((m.active || 0) + delta) % n + n) % n, b = m.buttons[i];
    Plotly[b.method].apply(null, [gd].concat(b.args)).then(function () {
      return Plotly.relayout(gd, {'updatemenus[0].active': i});
    });
    say(((m.name || '') + ' ' + b.label).trim());
    return true;
  }
  fig.addEventListener('keydown', function (e) {
    var s = gd.layout.sliders && gd.layout.sliders[0], at = s ? (s.active || 0) : 0, done = false;
    if (e.key === 'ArrowRight') { done = slide(at + 1); }
    else if (e.key === 'ArrowLeft') { done = slide(at - 1); }
    else if (e.key === 'Home') { done = slide(0); }
    else if (e.key === 'End') { done = s ? slide(s.steps.length - 1) : false; }
    else if (e.key === 'ArrowDown') { done = menu(1); }
    else if (e.key === 'ArrowUp') { done = menu(-1); }
    if (done) { e.preventDefault(); }
  });
})();
"""


def _keys_hint(fig_dict: Mapping[str, Any]) -> str:
    layout = fig_dict.get("layout", {}) or {}
    parts = []
    if layout.get("sliders"):
        parts.append("← → move the slider")
    if layout.get("updatemenus"):
        parts.append("↑ ↓ change the menu")
    return ("Keyboard: select the figure (Tab), then " + " and ".join(parts) + ".") if parts else ""


def figure_html(fig: go.Figure | Mapping[str, Any]) -> str:
    """The HTML fragment the book shows for ``fig``: a ``<figure>`` with an aria-label around a plotly div.

    plotly.js is NOT included (the site serves ``plotly.min.js`` once, via ``html_js_files``), nor is
    MathJax; no CDN is referenced. The div id is derived from the figure's content and a per-process
    counter, so rebuilding a page gives the same HTML. A figure with sliders or menus (a static twin) is
    also keyboard-usable: focusable, with arrow keys bound to its first slider and first menu.
    """
    fig_dict = fig.to_dict() if isinstance(fig, go.Figure) else dict(fig)
    digest = hashlib.sha1(pio.to_json(fig_dict, validate=False).encode()).hexdigest()[:10]
    div_id = f"linattn-fig-{next(_counter)}-{digest}"
    hint = _keys_hint(fig_dict)
    div = pio.to_html(fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False,
                      config=dict(_PLOT_CONFIG), div_id=div_id, default_height="450px", validate=False,
                      auto_play=False,  # frames are for the controls, not a movie on page load
                      post_script=_KEYS_JS if hint else None)
    label = html.escape(_alt_text(fig_dict), quote=True)
    if not hint:
        return f'<figure class="linattn-figure" role="group" aria-label="{label}">{div}</figure>'
    return (f'<figure class="linattn-figure" role="group" aria-label="{label}" tabindex="0" '
            f'aria-describedby="{div_id}-keys">{div}'
            f'<figcaption id="{div_id}-keys" class="linattn-keys" style="font-size:0.8em;opacity:0.75">'
            f'{html.escape(hint)}</figcaption>'
            f'<span class="linattn-live" aria-live="polite" style="position:absolute;width:1px;height:1px;'
            f'overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap"></span></figure>')


class _BookHtmlRenderer(MimetypeRenderer):
    """Renders a figure as ``text/html`` relying on the site-wide plotly.js (see :func:`figure_html`)."""

    def to_mimebundle(self, fig_dict: dict) -> dict:
        return {"text/html": figure_html(fig_dict)}


def use_static_renderer() -> str:
    """Register the book renderer and make it plotly's default; return its name.

    Called by ``import linattn_core.tools.viz`` when ``LINATTN_BOOK_BUILD`` is set. Without it, myst-nb
    cannot render plotly's default mimetype (the figure silently vanishes), and the other HTML renderers
    either inline 4.9 MB of plotly.js per page or load it from a CDN.
    """
    pio.renderers[BOOK_RENDERER] = _BookHtmlRenderer()
    pio.renderers.default = BOOK_RENDERER
    return BOOK_RENDERER


def is_book_build() -> bool:
    """True when the book is being built (``LINATTN_BOOK_BUILD`` set to anything but ``""``/``"0"``)."""
    return os.environ.get("LINATTN_BOOK_BUILD", "") not in ("", "0")


def figure_nbytes(fig: go.Figure) -> int:
    """Size of the figure's JSON (what the static renderer puts in the page), in bytes."""
    return len(pio.to_json(fig, validate=False).encode())


def glued_text(value: Any) -> str:
    """``value`` as :func:`glue` prints it: a float to 4 significant digits (from 10,000 on, whole)."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, float) or not math.isfinite(value) or value == 0:
        return str(value)
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.3e}" if abs(value) < 1e-3 else f"{value:.4g}"


def glue(name: str, value: Any) -> None:
    """Put a measured ``value`` into the page's prose as ``{glue:text}`name```; elsewhere, print it.

    In the book build (``LINATTN_BOOK_BUILD``, see :func:`is_book_build`) myst-nb stores it with the
    notebook and the page shows it in the sentence. In a plain Jupyter, Colab or Binder kernel the cell
    prints ``name = value`` instead (:func:`glued_text`), and the notebook's prose names that line where
    the page shows the number (``scripts/sync_notebooks.py``). numpy scalars become Python numbers, so
    format specs such as ``:.2f`` work on them.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if is_book_build():
        try:
            from myst_nb import glue as _glue
        except ImportError:  # a build without myst-nb cannot paste it: the printed line carries it
            pass
        else:
            _glue(name, value, display=False)
            return
    print(f"{name} = {glued_text(value)}")
