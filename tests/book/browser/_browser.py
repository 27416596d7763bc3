"""Shared helpers of the browser tests: where the site is, which pages it has, page instrumentation.

The site is read from ``_build/html`` (``make build`` writes it; ``make test`` builds it first).
Without a built site the tests skip with a message, unless ``LINATTN_REQUIRE_SITE=1`` (set by
``make test``), in which case they fail. Chromium is Debian's (``scripts/install_browser.sh``);
Playwright only drives it (never ``playwright install``). Every request to a host other than
127.0.0.1 is aborted and recorded, so a page that needs the network fails its test.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[3]
# LINATTN_SITE_DIR points the tests at another built site (e.g. a throwaway build); default _build/html.
SITE = Path(os.environ.get("LINATTN_SITE_DIR") or ROOT / "_build" / "html").resolve()
SCREENSHOTS = SITE.parent / "screenshots"
CHROMIUM = Path("/usr/bin/chromium")
AXE_JS = ROOT / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
LOCAL_HOST = "127.0.0.1"
# Folders of the built site that hold assets, not pages a reader navigates to.
ASSET_DIRS = ("_static", "_images", "_sources", "_downloads", "_panels_static", ".doctrees")


def site_required() -> bool:
    return os.environ.get("LINATTN_REQUIRE_SITE", "") == "1"


def site_building() -> bool:
    """``LINATTN_SITE_BUILDING=1``: the site is being built while these tests run (``make test``), so
    none may read it; one that tries finds no site (a failure where the site is required)."""
    return os.environ.get("LINATTN_SITE_BUILDING", "") == "1"


def missing(reason: str) -> None:
    """Skip (a developer without a built site) or fail (``make test``) with a clear reason.

    Every browser test that finds nothing to check (no site, no browser, an empty list of pages) says so
    through here, never through ``pytest.skip``: under ``LINATTN_REQUIRE_SITE=1`` nothing to check fails.
    """
    if site_required():
        pytest.fail(f"{reason} (LINATTN_REQUIRE_SITE=1)", pytrace=False)
    pytest.skip(reason)


def site_pages() -> list[str]:
    """Every HTML page of the built site, as paths relative to ``_build/html`` (posix).

    ``genindex.html`` and ``search.html`` are included: readers reach both from every page.
    """
    if site_building() or not (SITE / "index.html").is_file():
        return []
    pages = []
    for path in sorted(SITE.rglob("*.html")):
        rel = path.relative_to(SITE).as_posix()
        if rel.split("/", 1)[0] in ASSET_DIRS:
            continue
        pages.append(rel)
    return pages


@functools.cache
def page_source(rel: str) -> str:
    return (SITE / rel).read_text(encoding="utf-8", errors="replace")


def pages_containing(*needles: str) -> list[str]:
    """Pages whose HTML source contains any of ``needles`` (used to parametrise focused tests)."""
    return [rel for rel in site_pages() if any(n in page_source(rel) for n in needles)]


def url_to_file(url: str) -> Path | None:
    """The file under ``_build/html`` that a local URL serves (``dir/`` -> ``dir/index.html``)."""
    parts = urlsplit(url)
    path = unquote(parts.path).lstrip("/")
    target = SITE / path
    if path == "" or path.endswith("/"):
        target = target / "index.html"
    return target


@dataclass
class PageLog:
    """What a page did while loaded: the evidence the tests assert on."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    bad_status: list[str] = field(default_factory=list)
    external_requests: list[str] = field(default_factory=list)
    local_urls: list[str] = field(default_factory=list)
    # Set once the page is measured: requests made by the test tools themselves (axe-core fetches
    # stylesheets to inspect them, resolving CSS @import against the page) are not the site's.
    frozen: bool = False

    def problems(self) -> list[str]:
        out = [f"console error: {m}" for m in self.console_errors]
        out += [f"uncaught exception: {m}" for m in self.page_errors]
        out += [f"failed request: {m}" for m in self.failed_requests]
        out += [f"HTTP error: {m}" for m in self.bad_status]
        out += [f"external request (blocked): {m}" for m in self.external_requests]
        return out


def _describe_console(msg) -> str:
    loc = msg.location or {}
    where = loc.get("url", "")
    if where:
        where = f" [{urlsplit(where).path}:{loc.get('lineNumber', '?')}]"
    return f"{msg.text}{where}"


def instrument(page, log: PageLog) -> None:
    """Block every non-local request (recording it) and record errors into ``log``."""

    def route(r):
        url = r.request.url
        host = urlsplit(url).hostname
        if url.startswith(("data:", "blob:", "about:")) or host == LOCAL_HOST:
            r.continue_()
        else:
            if not log.frozen:
                log.external_requests.append(url)
            r.abort("blockedbyclient")

    page.route("**/*", route)
    def on_console(msg):
        if msg.type == "error" and not log.frozen:
            log.console_errors.append(_describe_console(msg))

    def on_pageerror(exc):
        if not log.frozen:
            log.page_errors.append(str(exc))

    page.on("console", on_console)
    page.on("pageerror", on_pageerror)

    def on_failed(req):
        if log.frozen or req.url in log.external_requests:
            return  # already reported as an external request
        log.failed_requests.append(f"{req.url} ({req.failure})")

    page.on("requestfailed", on_failed)

    def on_response(resp):
        if resp.status >= 400 and not log.frozen:
            ref = resp.request.headers.get("referer", "")
            log.bad_status.append(f"{resp.status} {resp.url}" + (f" (requested by {ref})" if ref else ""))

    page.on("response", on_response)
    def on_finished(req):
        if not log.frozen and urlsplit(req.url).hostname == LOCAL_HOST:
            log.local_urls.append(req.url)

    page.on("requestfinished", on_finished)


def axe_source() -> str:
    if not AXE_JS.is_file():
        missing(f"axe-core is missing at {AXE_JS} (run `scripts/install_browser.sh`)")
    return AXE_JS.read_text(encoding="utf-8")
