"""Sphinx extension: point the Colab (and Binder) launch buttons at ``notebooks/<page>.ipynb``.

sphinx-book-theme builds each launch link from the page's source file, here ``book/<page>.md``
(see ``sphinx_book_theme/header_buttons/launch.py``: ``.../blob/<branch>/<path_to_docs><page><ext>``).
Colab cannot open MyST Markdown (jupyter-book issue #752), and Binder opens a ``.md`` as a notebook
only when jupytext is configured to do so. The chapters therefore have generated ``.ipynb`` twins in
``notebooks/`` (``scripts/sync_notebooks.py``), and this extension, run just after the theme's
``add_launch_buttons`` (priority 501), rewrites those two links to the twin. A page without a twin
keeps the theme's link.

Enable it in ``_config.yml``::

    sphinx:
      local_extensions:
        colab_links: book/_ext

Options (``sphinx: config:``): ``colab_links_notebooks_dir`` (default ``"notebooks"``, relative to
the repository root) and ``colab_links_binder`` (default ``True``: rewrite the Binder link too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

REWRITTEN = {"Colab"}


def twin_path(app: Any, pagename: str) -> str | None:
    """``notebooks/<stem>.ipynb`` relative to the repository root, if that notebook exists."""
    source = Path(app.env.doc2path(pagename))
    folder = app.config.colab_links_notebooks_dir.strip("/")
    root = Path(app.srcdir)
    if not (root / folder / f"{source.stem}.ipynb").is_file():
        return None
    return f"{folder}/{source.stem}.ipynb"


def theme_path(app: Any, pagename: str) -> str:
    """The repository path the theme put at the end of its launch links (same rule as the theme)."""
    source = Path(app.env.doc2path(pagename))
    extension = source.suffix
    if extension != ".ipynb" and source.with_suffix(".ipynb").exists():
        extension = ".ipynb"
    theme_options = app.config["html_theme_options"] or {}
    prefix = theme_options.get("path_to_docs", "").strip("/")
    prefix = prefix + "/" if prefix else ""
    return f"{prefix}{pagename}{extension}"


def rewrite_launch_links(app: Any, pagename: str, templatename: str, context: dict,
                         doctree: Any) -> None:
    """``html-page-context`` handler: retarget the launch buttons of one page."""
    groups = [b for b in context.get("header_buttons", []) if b.get("label") == "launch-buttons"]
    if not groups:
        return
    twin = twin_path(app, pagename)
    if twin is None:
        return
    old = theme_path(app, pagename)
    names = REWRITTEN | ({"Binder"} if app.config.colab_links_binder else set())
    for group in groups:
        for button in group.get("buttons", []):
            url = button.get("url", "")
            if button.get("text") in names and url.endswith(old):
                button["url"] = url[: -len(old)] + twin


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("colab_links_notebooks_dir", "notebooks", "html")
    app.add_config_value("colab_links_binder", True, "html")
    app.connect("html-page-context", rewrite_launch_links, priority=502)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
