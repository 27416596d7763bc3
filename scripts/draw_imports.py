"""Draw the imports inside linattn_core, grouped by tier: teaching -> speed -> nothing back.

    python scripts/draw_imports.py              # a text tree: each module, its tier, what it imports
    python scripts/draw_imports.py --mermaid    # the same graph as a mermaid flowchart (paste into a .md)

The tiers (CONTRIBUTING.md, "Layout"):

- teaching: the references and the readable forms the chapters show (attention, feature_maps,
  linear, streaming, decay, delta, recall, the model and training code);
- speed: ``fast/`` (the CPU fast paths, the compiled kernel and its loader, the one decision of which
  implementation runs) and ``native``, the kernel's public name;
- tooling: the book's ``viz``, ``widgets``, ``exercises`` (and ``course``, built from them), ``timing``
  and ``bench``;
- base: ``_backend``, the numpy/torch dispatch and the input checks every tier stands on.

The speed tier takes from the teaching tier only the feature-map classes it is handed (it knows some
maps' formulas by exact type); tests/test_layout.py checks that and the other rules.

Every import counts, also one inside a function (the package imports torch and plotly lazily, and
its own modules sometimes too). Only the standard library is used (``ast``), so the drawing needs
nothing installed and imports none of the package.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

PACKAGE = "linattn_core"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
SPEED = ("fast", "native")
TOOLING = ("viz", "widgets", "exercises", "course", "timing", "bench")
BASE = ("_backend",)
TIERS = ("teaching", "speed", "tooling", "base")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package: dotted name -> file (``linattn_core.fast`` -> fast/__init__.py).

    A C file is the compiled extension of its name (``fast/_chunked.c`` -> ``linattn_core.fast._chunked``).
    """
    found = {}
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.c")]):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def tier(module: str) -> str:
    """``"teaching"``, ``"speed"``, ``"tooling"``, ``"base"``; ``"package"`` for ``linattn_core`` itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] in BASE:
        return "base"
    if parts[1] in SPEED:
        return "speed"
    if parts[1] in TOOLING or parts[1].startswith("bench_"):  # bench_train: the training bench
        return "tooling"
    return "teaching"


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports (anywhere in the file), by dotted name."""
    if path.suffix == ".c":
        return set()
    is_package = path.name == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            target = ".".join(base + (node.module.split(".") if node.module else []))
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:  # `from . import fast` imports the module linattn_core.fast
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in known else target)
    out.discard(module)
    return {m for m in out if m in known}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the package's modules it imports."""
    known = modules(root)
    return {m: imports(m, p, known) for m, p in known.items()}


def text_tree(g: dict[str, set[str]]) -> str:
    lines = []
    for t in ("package", *TIERS):  # each module, then what it imports
        members = sorted(m for m in g if tier(m) == t)
        lines.append(f"{t}")
        for m in members:
            deps = sorted(g[m])
            lines.append(f"  {m.removeprefix(PACKAGE + '.')}")
            for d in deps:
                lines.append(f"      -> {d.removeprefix(PACKAGE + '.')}  [{tier(d)}]")
    return "\n".join(lines)


def mermaid(g: dict[str, set[str]]) -> str:
    def node(m: str) -> str:
        return m.replace(".", "_").replace("+", "_")

    lines = ["flowchart LR"]
    for t in TIERS:
        lines.append(f"  subgraph {t}")
        lines += [f"    {node(m)}[{m.removeprefix(PACKAGE + '.')}]" for m in sorted(g) if tier(m) == t]
        lines.append("  end")
    for m in sorted(g):
        if tier(m) == "package":
            continue
        lines += [f"  {node(m)} --> {node(d)}" for d in sorted(g[m]) if tier(d) != "package"]
    return "\n".join(lines)


def tier_edges(g: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    """How many imports go from each tier to each other tier (the drawing's summary)."""
    counts: dict[tuple[str, str], int] = {}
    for m, deps in g.items():
        for d in deps:
            key = (tier(m), tier(d))
            if key[0] != key[1] and "package" not in key:
                counts[key] = counts.get(key, 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mermaid", action="store_true", help="print a mermaid flowchart instead")
    args = parser.parse_args()
    g = graph()
    print(mermaid(g) if args.mermaid else text_tree(g))
    if not args.mermaid:
        print("\nimports between tiers:")
        for (a, b), n in sorted(tier_edges(g).items()):
            print(f"  {a:8s} -> {b:8s} {n:3d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
