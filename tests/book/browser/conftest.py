"""Fixtures for the browser tests: the built site served locally, and headless Chromium.

See ``_browser.py`` for where the site is looked for, and why a missing site skips or fails.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _browser import CHROMIUM, CHROMIUM_ARGS, LOCAL_HOST, SITE, PageLog, instrument, missing, site_building

# --- the local server ------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass

    def end_headers(self):
        # No caching between tests: each page load is measured as a first visit would be.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


@pytest.fixture(scope="session")
def site() -> Path:
    if site_building():
        missing(f"the site at {SITE} is being built: a test that reads it must use the `site` fixture")
    if not (SITE / "index.html").is_file():
        missing(f"no built site at {SITE} (run `make build` first)")
    return SITE


@pytest.fixture(scope="session")
def server(site: Path) -> Iterator[str]:
    """Serve ``_build/html`` on 127.0.0.1 at a free port; yields the base URL (ending in '/')."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer((LOCAL_HOST, 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://{LOCAL_HOST}:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


# --- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        missing(f"{CHROMIUM} is missing (run `scripts/install_browser.sh`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright (python) is not installed in this environment")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def new_page(browser):
    """A factory for instrumented pages in a fresh browser context; closes them afterwards."""
    contexts = []

    def make(viewport=(1280, 900)):
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(ctx)
        page = ctx.new_page()
        log = PageLog()
        instrument(page, log)
        return page, log

    yield make
    for ctx in contexts:
        ctx.close()


