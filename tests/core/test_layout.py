"""The package's layout: the folders are the tiers, and imports go one way.

The import graph and the tiers come from ``scripts/draw_imports.py`` (stdlib ``ast``; every import
counts, also one inside a function; a module's tier is read from its folder). The rules, and why:

- no modules import each other, directly or through others: the package reads bottom-up;
- the base (``_backend``, ``_provenance``) imports nothing of the package;
- the core (the modules at the top, ``feature_maps/``) imports only the base, the core, and the
  speed tier's one entry ``linattn_core.fast`` (and only the names of its ``__all__``), so the fast
  paths can be rearranged without touching a chapter's code;
- the speed tier (``fast/``) imports from the rest only the base and ``feature_maps``: it is handed
  feature-map objects and knows some maps' formulas by their exact class. It never imports a form
  (``linear``, ``attention``, ...), so no teaching algorithm hides inside it and it cannot call
  back into the module that calls it;
- the language model (``lm/``) builds on the core and never imports the book's tools;
- the book's tools (``tools/``) may use everything below them; nothing below imports them;
- an entry point (``python -m linattn_core.train``) only starts a command of ``lm/`` or ``tools/``;
- a core or lm module fits in a reader's head: about 500 lines at most (``MAX_TEACHING_LINES``).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

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
# what each tier may import from the other tiers (its own tier is always allowed; cycles are not)
ALLOWED = {
    "base": set(),
    "core": {"base", "speed"},
    "speed": {"base", "core"},
    "lm": {"base", "core"},
    "tools": {"base", "core", "speed", "lm"},
    "entry": {"lm", "tools"},
}


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


def test_the_cycle_finder_finds_cycles():
    # the rule below means something only if a cycle would be found
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert draw.cycles(g) == [["a", "b", "c"]]
    assert draw.cycles({"a": {"b"}, "b": set()}) == []


def test_no_modules_import_each_other():
    inside = {m: {d for d in deps if TIER[d] != "package"} for m, deps in GRAPH.items()
              if TIER[m] != "package"}
    assert draw.cycles(inside) == []


@pytest.mark.parametrize("module", [m for m in GRAPH if TIER[m] != "package"])
def test_imports_go_one_way(module):
    outside = {d for d in GRAPH[module] if TIER[d] not in (TIER[module], "package")}
    wrong = {d for d in outside if TIER[d] not in ALLOWED[TIER[module]]}
    assert not wrong, f"{module} ({TIER[module]}) imports {sorted(wrong)}"


@pytest.mark.parametrize("module", of_tier("speed"))
def test_the_speed_tier_takes_only_feature_maps_and_the_base(module):
    core = {d for d in GRAPH[module] if TIER[d] == "core"}
    assert all(d.startswith("linattn_core.feature_maps") for d in core), f"{module} imports {sorted(core)}"


@pytest.mark.parametrize("module", [m for m in GRAPH if TIER[m] not in ("speed", "package")])
def test_outside_the_speed_tier_only_its_entry_is_used(module):
    inner = {d for d in GRAPH[module] if TIER[d] == "speed"} - {FAST}
    if TIER[module] == "tools":  # the book's tools may also name the compiled kernel (the kernel chapter)
        inner -= {"linattn_core.fast.kernel"}
    assert not inner, f"{module} imports {sorted(inner)}: use linattn_core.fast"
    if FAST in GRAPH[module] and TIER[module] == "core":
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


def test_importing_the_package_imports_neither_torch_nor_plotly():
    import subprocess
    import sys

    code = ("import sys, linattn_core; bad = sorted(m for m in ('torch', 'plotly') if m in sys.modules);"
            " print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import linattn_core imported {out.stdout.strip()}"


@pytest.mark.parametrize("command", ["train", "mqar", "bench"])
def test_the_commands_readers_type_still_start(command):
    # python -m linattn_core.train / .mqar / .bench: the entry points of the README
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", f"linattn_core.{command}", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:") and "--" in out.stdout
