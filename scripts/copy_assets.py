"""Copy the JavaScript the site needs from installed packages into book/_assets/.

The site then serves plotly.js once for every page, from itself: no CDN, nothing vendored in git.
(MathJax is copied by the sphinx-mathjax-offline extension during the build.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import plotly

ASSETS = Path(__file__).resolve().parent.parent / "book" / "_assets"


def main() -> None:
    ASSETS.mkdir(parents=True, exist_ok=True)
    src = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    dst = ASSETS / "plotly.min.js"
    if not dst.exists() or dst.read_bytes() != src.read_bytes():
        shutil.copyfile(src, dst)
    size_mb = dst.stat().st_size / 1e6
    print(f"plotly.js {plotly.__version__}: {dst.relative_to(ASSETS.parent.parent)} ({size_mb:.1f} MB)")


if __name__ == "__main__":
    main()
