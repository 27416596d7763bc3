"""Binder's environment (binder/) is the root one, slimmed: same pins, CPU torch, no tools.

mybinder.org builds from ``binder/`` when it exists and ignores the root files, so nothing else keeps
the two requirement files together: a version bumped in one must be bumped in the other, and a test or
build tool must never creep into what every reader's launch installs.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from importlib import metadata
from pathlib import Path

import nbformat
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
# What every Jupyter kernel brings (Colab's too): the course extra need not install it.
KERNEL = {"ipython", "ipykernel"}
# An import inside a try that catches these has a fallback: the code runs without the module.
OPTIONAL = {"ImportError", "ModuleNotFoundError"}


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


def imports(code: str) -> set[str]:
    """Top-level names of the modules ``code`` imports: at the top or inside a function (a lazy import
    runs when the function is called), except where a ``try`` catches the ImportError (a fallback)."""
    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.splitlines())
    tree = ast.parse(code)
    optional = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            caught = set()
            for handler in node.handlers:
                kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                caught |= {k.id for k in kinds if isinstance(k, ast.Name)}
            if caught & OPTIONAL:
                optional |= {id(n) for statement in node.body for n in ast.walk(statement)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@functools.cache
def reachable_imports() -> dict[str, set[str]]:
    """Third-party module -> where it is imported: every module of linattn_core (a notebook can reach
    each), lazy imports included, and every code cell of every notebook."""
    where: dict[str, set[str]] = {}
    sources = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
               for p in sorted((ROOT / "linattn_core").rglob("*.py"))]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        sources += [(f"notebooks/{path.name}", c.source) for c in cells if c.cell_type == "code"]
    for name, code in sources:
        for module in imports(code) - set(sys.stdlib_module_names) - {"linattn_core"}:
            where.setdefault(module, set()).add(name)
    return where


def distributions(module: str) -> list[str]:
    """The distributions that install an import name, as installed here (e.g. torch, plotly)."""
    if module in DISTRIBUTION_OF:
        return [DISTRIBUTION_OF[module]]
    return [canonicalize_name(n) for n in _installed().get(module, [module])]


@functools.cache
def _installed() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def test_the_import_scan_follows_lazy_imports_and_skips_fallbacks():
    code = ("import numpy as np\n"
            "def quiz():\n    from jupyterquiz.dynamic import loader\n"
            "try:\n    import psutil\nexcept ImportError:\n    psutil = None\n"
            "try:\n    import linattn_core\nexcept ImportError:\n    pass\n"
            "%pip install x\n")
    assert imports(code) == {"numpy", "jupyterquiz"}
    assert "jupyterquiz" in reachable_imports()  # course.quiz imports it lazily


def test_binder_has_what_the_notebooks_and_the_package_import(binder):
    missing = {module: sorted(where) for module, where in reachable_imports().items()
               if not any(d in binder for d in distributions(module))}
    assert not missing, f"binder/requirements.txt does not install what these import: {missing}"


def test_the_course_extra_has_what_the_notebooks_and_the_package_import():
    """A reader outside Binder installs linattn_core[course] (every notebook's install cell does)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    course = {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["course"]}
    course |= {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    missing = {module: sorted(where) for module, where in reachable_imports().items()
               if not set(distributions(module)) & (course | KERNEL)}
    assert not missing, f"pyproject's course extra does not install what these import: {missing}"


def test_postbuild_installs_the_package_and_fetches_the_text():
    script = (BINDER / "postBuild").read_text(encoding="utf-8")
    assert script.startswith("#!"), "postBuild needs a shebang (Binder executes it)"
    assert (BINDER / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"
    commands = [ln for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    # as a reader's pip install: not editable (what tests/book/test_notebooks_where_readers_run.py runs)
    assert "python -m pip install --no-deps ." in commands, "postBuild must install linattn_core, not -e"
    # the training text into the image, by the installed package (from /, not the checkout)
    assert "(cd / && python -m linattn_core.lm.data)" in commands, "postBuild must fetch the training text"
    assert commands.index("(cd / && python -m linattn_core.lm.data)") > commands.index(
        "python -m pip install --no-deps .")


def test_binder_has_what_the_package_and_a_live_kernel_need(binder):
    # linattn_core itself: torch and numpy; the figures and explorers: plotly (its jupyterlab-plotly
    # extension draws them) and ipywidgets; the launch opens JupyterLab with a Python kernel.
    needed = {"torch", "numpy", "plotly", "ipywidgets", "jupyterlab", "ipykernel"}
    assert needed <= set(binder), f"binder/requirements.txt lacks {sorted(needed - set(binder))}"


def test_kernels_are_ipykernel_6_which_does_not_hang(binder):
    # ipykernel 7 can miss a request and leave nbclient waiting for the cell timeout (a 20-minute stall of
    # the readers' notebook test); the book build, the readers' notebooks and Binder all run 6.x
    root = pins(ROOT / "requirements.txt")
    assert root["ipykernel"].major == 6 and binder["ipykernel"] == root["ipykernel"]
    assert metadata.version("ipykernel").startswith("6."), "the installed kernel is not the pinned one"
