"""Build-time fixes for two defects the browser tests (tests/book/browser/) found in the generated pages.

- Sphinx 7.4 stores an inline script once with filename ``None`` and once with ``''``, so the page
  declares sphinx-thebe's ``const THEBE_JS_URL`` twice: a console error on every page. Keep the first.
- docutils marks the bibliography's citation list ``role="list"`` while its children are not list
  items (axe: aria-required-children, critical). Drop the role; the citations stay a plain block.
"""

from __future__ import annotations

from typing import Any

CITATION_LIST = '<div role="list" class="citation-list">'


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    seen, unique = set(), []
    for js in context.get("script_files", []):
        key = (js.filename or "", tuple(sorted((k, str(v)) for k, v in js.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def _fix_body(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    body = context.get("body")
    if body and CITATION_LIST in body:
        context["body"] = body.replace(CITATION_LIST, '<div class="citation-list">')


def setup(app: Any) -> dict:
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _fix_body)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
