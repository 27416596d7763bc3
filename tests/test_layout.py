"""The package's layout: teaching -> speed tier -> nothing back, and the book's tooling on top.

The import graph comes from ``scripts/draw_imports.py`` (stdlib ``ast``; every import counts, also one
inside a function). The rules, and why:

- the speed tier (``fast/``, ``native``) imports from the rest of the package only ``_backend`` (the
  shared numpy/torch layer) and ``feature_maps``: it is handed feature-map objects and knows some
  maps' formulas by their exact class. It never imports a form (``linear``, ``attention``, ...), so no
  teaching algorithm hides inside it and it cannot call back into the module that calls it;
- a teaching module imports from the speed tier only the package ``linattn_core.fast`` and uses only
  the names of its ``__all__``, so the fast paths can be rearranged without touching a chapter's code;
- outside the speed tier, only ``linattn_core.fast`` and the public ``linattn_core.native`` are
  imported, never a module inside ``fast/``;
- teaching and speed modules never import the book's tooling (``viz``, ``widgets``, ``exercises``,
  ``course``, ``timing``, ``bench``): the library works without it;
- a teaching module fits in a reader's head: about 500 lines at most (``MAX_TEACHING_LINES``).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_TEACHING_LINES = 520  # "about 500": a few lines over do not make a file harder to hold, hundreds do


def _load_drawing():
    spec = importlib.util.spec_from_file_location("draw_imports", ROOT / "scripts" / "draw_imports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


draw = _load_drawing()
GRAPH = draw.graph()
FAST, NATIVE = "linattn_core.fast", "linattn_core.native"


def of_tier(name: str) -> list[str]:
    return sorted(m for m in GRAPH if draw.tier(m) == name)


def test_the_graph_sees_the_imports_it_must():
    # a parser that found nothing would pass every rule below
    assert FAST in GRAPH["linattn_core.linear"]
    assert "linattn_core.fast.features" in GRAPH["linattn_core.fast.torch_cpu"]
    assert "linattn_core.fast._chunked" in GRAPH["linattn_core.fast.kernel"]
    assert "linattn_core.fast.kernel" in GRAPH[NATIVE]
    assert {"linattn_core._backend", "linattn_core.feature_maps"} <= GRAPH["linattn_core.linear"]
    assert {"linattn_core.linear", "linattn_core.attention", "linattn_core.feature_maps"} <= set(
        of_tier("teaching"))
    assert {FAST, NATIVE} <= set(of_tier("speed")) and "linattn_core.bench" in of_tier("tooling")


@pytest.mark.parametrize("module", of_tier("speed"))
def test_the_speed_tier_takes_only_feature_maps_and_the_backend(module):
    allowed = {"linattn_core._backend", "linattn_core.feature_maps"}
    outside = {d for d in GRAPH[module] if draw.tier(d) != "speed"}
    assert outside <= allowed, f"{module} imports {sorted(outside - allowed)}"


@pytest.mark.parametrize("module", of_tier("teaching"))
def test_teaching_modules_use_only_the_speed_tiers_entry(module):
    speed = {d for d in GRAPH[module] if draw.tier(d) == "speed"}
    assert speed <= {FAST}, f"{module} imports {sorted(speed - {FAST})} of the speed tier"
    if FAST in speed:
        import linattn_core.fast

        tree = ast.parse(Path(draw.modules()[module]).read_text(encoding="utf-8"))
        used = {n.attr for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "fast"}
        assert used <= set(linattn_core.fast.__all__), f"{module} uses fast.{sorted(used)}"


@pytest.mark.parametrize("module", [m for m in GRAPH if draw.tier(m) != "speed"])
def test_nothing_outside_the_speed_tier_reaches_into_fast(module):
    inner = {d for d in GRAPH[module] if draw.tier(d) == "speed"} - {FAST, NATIVE}
    assert not inner, f"{module} imports {sorted(inner)}: use linattn_core.fast or linattn_core.native"


@pytest.mark.parametrize("module", of_tier("teaching") + of_tier("speed") + of_tier("base"))
def test_the_library_never_imports_the_book_tooling(module):
    tooling = {d for d in GRAPH[module] if draw.tier(d) == "tooling"}
    assert not tooling, f"{module} imports {sorted(tooling)}"


@pytest.mark.parametrize("module", of_tier("teaching"))
def test_teaching_modules_fit_in_a_readers_head(module):
    lines = len(Path(draw.modules()[module]).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_TEACHING_LINES, f"{module}: {lines} lines (at most {MAX_TEACHING_LINES})"
