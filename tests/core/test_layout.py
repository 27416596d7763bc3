"""The package's layout: the folders are the tiers, and imports go one way.

The rules are import-linter contracts in ``pyproject.toml`` (``lint-imports``, run by ``make test`` and
by :func:`test_the_contracts_hold`; every import counts, also one inside a function):

- no modules import each other, directly or through others: the package reads bottom-up;
- the tiers are layers, entry > tools > lm > core > base: the base (``_backend``, ``_provenance``)
  imports nothing of the package above it, nothing below imports the book's tools, the language model
  builds on the core;
- the core hands calls to the speed tier (``linattn_core.fast``), which imports from the rest only the
  base and ``feature_maps``: it never imports a form, so no teaching algorithm hides inside it and it
  cannot call back into the module that calls it;
- outside the speed tier only its one entry ``linattn_core.fast`` is imported (the tools may name the
  compiled kernel), so the fast paths can be rearranged without touching a chapter's code.

This file checks what the contracts cannot say: that they name every module of each folder (a module's
tier is its folder, read by ``scripts/draw_imports.py``), that each contract fails on a wrong import, that
the core reads only the names of ``fast.__all__``, that an entry point only starts a command, that a core
or lm module fits in a reader's head (about 500 lines, ``MAX_TEACHING_LINES``), and that importing the
package stays cheap.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
MAX_TEACHING_LINES = 520  # "about 500": a few lines over do not make a file harder to hold, hundreds do


def _load_drawing():
    spec = importlib.util.spec_from_file_location("draw_imports", ROOT / "scripts" / "draw_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


draw = _load_drawing()
GRAPH = draw.graph()
TIER = draw.tiers()
FAST = "linattn_core.fast"
def of_tier(name: str) -> list[str]:
    return sorted(m for m in GRAPH if TIER[m] == name)


def test_the_folders_are_the_tiers():
    # a drawing that put everything in one tier, or saw no imports, would pass every rule below
    assert {"linattn_core.linear", "linattn_core.attention", "linattn_core.feature_maps",
            "linattn_core.feature_maps.performer", "linattn_core.streaming"} <= set(of_tier("core"))
    assert {"linattn_core._backend", "linattn_core._provenance"} == set(of_tier("base"))
    assert {FAST, "linattn_core.fast.kernel", "linattn_core.fast._chunked"} <= set(of_tier("speed"))
    assert {"linattn_core.lm.model", "linattn_core.lm.train", "linattn_core.lm.mqar"} <= set(of_tier("lm"))
    assert {"linattn_core.tools.bench", "linattn_core.tools.viz", "linattn_core.tools.exercises"} <= set(
        of_tier("tools"))
    assert {"linattn_core.train", "linattn_core.mqar", "linattn_core.bench"} == set(of_tier("entry"))
    assert FAST in GRAPH["linattn_core.linear"]
    assert "linattn_core.fast.features" in GRAPH["linattn_core.fast.torch_cpu"]
    assert "linattn_core.fast._chunked" in GRAPH["linattn_core.fast.kernel"]
    assert "linattn_core.lm.train" in GRAPH["linattn_core.train"]


def contracts() -> dict[str, dict]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        found = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    return {c["type"]: c for c in found}


def test_the_contracts_name_every_module_by_its_folder():
    # the import-linter contracts (pyproject.toml) state the rules; they hold for the modules they name,
    # so every module of the core must be in the core's layer, and the speed tier forbidden every form
    layers = [{f"linattn_core.{m.strip()}" for m in re.split(r"[|:]", layer)}
              for layer in contracts()["layers"]["layers"]]
    top = {m for m in GRAPH if m.count(".") == 1}  # a module or subpackage directly in linattn_core/
    assert layers[0] == set(of_tier("entry"))
    assert layers[1] == {"linattn_core.tools"} and layers[2] == {"linattn_core.lm"}
    assert layers[3] == {m for m in top if TIER[m] == "core"} | {FAST}
    assert layers[4] == set(of_tier("base"))
    forms = {m for m in top if TIER[m] == "core"} - {"linattn_core.feature_maps"}
    assert set(contracts()["forbidden"]["forbidden_modules"]) == forms


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(exe), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120)


def test_the_contracts_hold():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("_backend.py", "from .tools import viz", "the tiers import one way"),
    ("fast/pages.py", "from .. import linear", "the speed tier takes only"),
    ("lm/data.py", "from ..fast import torch_cpu", "outside the speed tier only its entry"),
    ("attention.py", "from . import streaming", "no modules import each other"),
], ids=["base-imports-tools", "speed-imports-a-form", "lm-imports-inside-fast", "a-cycle"])
def test_the_contracts_catch_a_wrong_import(tmp_path, module, line, broken):
    # each contract means something only if it fails: one wrong import in a copy of the package
    shutil.copytree(ROOT / "linattn_core", tmp_path / "linattn_core",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "results", "*.c", "*.h"))
    path = tmp_path / "linattn_core" / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}  # noqa\n", encoding="utf-8")
    out = lint_imports(tmp_path)
    assert out.returncode != 0 and "Broken contracts" in out.stdout, out.stdout[-3000:]
    assert broken in out.stdout.split("Broken contracts")[1], out.stdout[-3000:]


@pytest.mark.parametrize("module", [m for m in GRAPH if TIER[m] == "core" and FAST in GRAPH[m]])
def test_the_core_uses_only_the_names_the_speed_tier_exports(module):
    # beyond the contracts: a core module that imports linattn_core.fast reads only the names of its __all__
    import linattn_core.fast

    tree = ast.parse(Path(draw.modules()[module]).read_text(encoding="utf-8"))
    used = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "fast"}
    assert used <= set(linattn_core.fast.__all__), f"{module} uses fast.{sorted(used)}"


@pytest.mark.parametrize("module", of_tier("entry"))
def test_an_entry_point_only_starts_a_command(module):
    body = ast.parse(Path(draw.modules()[module]).read_text(encoding="utf-8")).body
    code = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    defs = [n for n in code if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign))]
    assert not defs and len(code) <= 4, f"{module} holds code: put it in lm/ or tools/"


@pytest.mark.parametrize("module", of_tier("core") + of_tier("lm"))
def test_teaching_modules_fit_in_a_readers_head(module):
    path = Path(draw.modules()[module])
    if path.suffix != ".py":
        return
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_TEACHING_LINES, f"{module}: {lines} lines (at most {MAX_TEACHING_LINES})"


@pytest.mark.parametrize("package", ["linattn_core", "linattn_core.lm", "linattn_core.tools"])
def test_importing_a_package_imports_neither_torch_nor_plotly(package):
    # lm/ and tools/ name their modules and import each on first use, so `from linattn_core.lm import
    # stored` reads the stored runs without torch
    code = (f"import sys, {package}; bad = sorted(m for m in ('torch', 'plotly') if m in sys.modules);"
            " print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {package} imported {out.stdout.strip()}"


def test_every_folder_of_code_is_a_package_that_names_its_exports():
    # a folder without __init__.py is an implicit namespace package: pkgutil.walk_packages and the tools
    # built on it never see it, and nothing states what it exports (folders of data only may stay data)
    import importlib
    import pkgutil

    import linattn_core

    root = ROOT / "linattn_core"
    folders = {p.parent for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"folders of code without __init__.py: {missing}"
    walked = {m.name for m in pkgutil.walk_packages(linattn_core.__path__, "linattn_core.") if m.ispkg}
    assert {"linattn_core.lm", "linattn_core.tools", "linattn_core.tools.viz", "linattn_core.fast"} <= walked
    for name in ("linattn_core.lm", "linattn_core.tools"):
        package = importlib.import_module(name)
        assert package.__doc__ and package.__all__, f"{name} does not say what it exports"
        for module in package.__all__:
            assert (root / name.split(".")[1] / module).is_dir() or \
                (root / name.split(".")[1] / f"{module}.py").is_file(), f"{name}.__all__ names {module}"


@pytest.mark.parametrize("command", ["train", "mqar", "bench"])
def test_the_commands_readers_type_still_start(command):
    # python -m linattn_core.train / .mqar / .bench: the entry points of the README
    out = subprocess.run([sys.executable, "-m", f"linattn_core.{command}", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:") and "--" in out.stdout
