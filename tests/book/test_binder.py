"""Binder's environment (binder/) is the root one, slimmed: same pins, CPU torch, no tools.

mybinder.org builds from ``binder/`` when it exists and ignores the root files, so nothing else keeps
the two requirement files together: a version bumped in one must be bumped in the other, and a test or
build tool must never creep into what every reader's launch installs.
"""

from __future__ import annotations

import ast
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# Tools for testing, linting, building the book or packaging: the root file has them, Binder must not.
TOOLS = {"pytest", "hypothesis", "playwright", "ruff", "jupyter-book", "sphinx", "myst-nb",
         "myst-parser", "sphinx-book-theme", "sphinx-exercise", "sphinx-mathjax-offline",
         "sphinxcontrib-bibtex", "pydata-sphinx-theme", "docutils", "setuptools", "wheel", "pip", "build",
         "jupyter-cache", "greenlet", "pyee"}
TOOL_PREFIXES = ("pytest-", "sphinx", "sphinxcontrib-")
# Environment plumbing that a requirement may name but nobody pins (Binder's base image has them).
UNPINNED = {"setuptools", "pip", "wheel"}
# Import names of the chapters that differ from their distribution's name.
DISTRIBUTION_OF = {"IPython": "ipython", "myst_nb": "myst-nb", "yaml": "pyyaml"}


def pins(path: Path) -> dict[str, Version]:
    """``name==version`` lines of a requirements file, by canonical name."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{path.name}: {line!r} is not an exact pin"
        out[canonicalize_name(req.name)] = Version(specs[0].version)
    return out


@pytest.fixture(scope="module")
def binder() -> dict[str, Version]:
    return pins(BINDER / "requirements.txt")


def test_binder_pins_the_root_versions(binder):
    root = pins(ROOT / "requirements.txt")
    missing = sorted(set(binder) - set(root))
    assert not missing, f"binder/requirements.txt pins packages the root requirements.txt does not: {missing}"
    # Only the local label may differ (torch 2.13.0+cpu against 2.13.0): the same release, CPU build.
    differ = {n: (str(v), str(root[n])) for n, v in binder.items() if v.public != root[n].public}
    assert not differ, f"binder/requirements.txt and requirements.txt disagree (binder, root): {differ}"


def test_binder_has_no_test_or_build_tools(binder):
    tools = sorted(n for n in binder if n in TOOLS or n.startswith(TOOL_PREFIXES))
    assert not tools, f"binder/requirements.txt installs test/build tools: {tools}"


def test_binder_takes_cpu_torch_from_the_pytorch_index(binder):
    text = (BINDER / "requirements.txt").read_text(encoding="utf-8")
    assert re.search(rf"^--extra-index-url {re.escape(CPU_INDEX)}\s*$", text, re.M), "no PyTorch CPU index"
    assert binder["torch"].local == "cpu", f"torch must be the CPU build, got {binder['torch']}"


def test_binder_pins_everything_its_packages_pull_in(binder):
    """The closure is pinned (an unpinned dependency drifts between two launches), read from the metadata of
    the installed packages, which the root file pins at the same versions."""
    unpinned = {}
    for name in binder:
        for text in metadata.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            dep = canonicalize_name(req.name)
            if dep not in binder and dep not in UNPINNED:
                unpinned.setdefault(dep, []).append(name)
    assert not unpinned, f"dependencies binder/requirements.txt leaves unpinned (needed by): {unpinned}"


def _top_level_imports(source: str) -> set[str]:
    """Modules a chapter's code cells import outside a ``try`` (an import in a try has a fallback)."""
    found = set()
    for block in re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", source, re.S):
        code = "\n".join(ln for ln in block.splitlines() if not ln.lstrip().startswith(("%", "!", ":")))
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) for b in t.body
                   for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return found


def test_binder_has_what_the_chapters_import(binder):
    stdlib = set(__import__("sys").stdlib_module_names)
    needed = set()
    for chapter in sorted((ROOT / "book").glob("*.md")):
        needed |= _top_level_imports(chapter.read_text(encoding="utf-8"))
    needed -= stdlib | {"linattn_core"}
    # The import name's distribution, as installed here (e.g. threadpoolctl, plotly, torch).
    dists = metadata.packages_distributions()
    missing = {}
    for module in sorted(needed):
        names = [DISTRIBUTION_OF.get(module)] if module in DISTRIBUTION_OF else dists.get(module, [module])
        if not any(canonicalize_name(n) in binder for n in names):
            missing[module] = names
    assert not missing, f"chapters import what binder/requirements.txt does not install: {missing}"


def test_postbuild_installs_the_package_without_its_dependencies():
    script = (BINDER / "postBuild").read_text(encoding="utf-8")
    assert script.startswith("#!"), "postBuild needs a shebang (Binder executes it)"
    assert (BINDER / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"
    installs = re.search(r"pip install --no-deps (-e )?\.\s*$", script, re.M)
    assert installs, "postBuild must install linattn_core"


def test_binder_has_what_the_package_and_a_live_kernel_need(binder):
    # linattn_core itself: torch and numpy; the figures and explorers: plotly (its jupyterlab-plotly
    # extension draws them) and ipywidgets; the launch opens JupyterLab with a Python kernel.
    needed = {"torch", "numpy", "plotly", "ipywidgets", "jupyterlab", "ipykernel"}
    assert needed <= set(binder), f"binder/requirements.txt lacks {sorted(needed - set(binder))}"
