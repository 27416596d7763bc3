"""Draw the imports inside linattn_core, grouped by tier; the tiers are the folders.

    python scripts/draw_imports.py              # a text tree: each module, its tier, what it imports
    python scripts/draw_imports.py --mermaid    # the same graph as a mermaid flowchart (paste into a .md)

The tiers (CONTRIBUTING.md, "Layout"), read from where a module lives:

- base: the private modules at the top (``_backend``: the numpy/torch dispatch and the input checks;
  ``_provenance``: device choice and the record of where a number came from);
- core: every other module at the top of the package, and ``feature_maps/``: the references and
  readable forms the chapters teach;
- speed: ``fast/``, the same maths arranged for a CPU, and the compiled kernel;
- lm: ``lm/``, the small language model, its attention layers, training and tasks;
- tools: ``tools/``, the book's figures, explorers, exercises, timing, course and benchmark;
- entry: a top-level module that only starts a command (``python -m linattn_core.train``).

Imports go one way, base <- core <- speed (through ``linattn_core.fast`` alone) and core <- lm <-
tools <- entry, with no cycles: the import-linter contracts in pyproject.toml state it (``lint-imports``,
run by ``make test``) and tests/core/test_layout.py checks, with the tiers read here, that they name
every module of each folder.
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
FOLDERS = {"fast": "speed", "lm": "lm", "tools": "tools"}  # a subpackage's folder is its tier
TIERS = ("base", "core", "speed", "lm", "tools", "entry")


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


def is_entry(path: Path) -> bool:
    """A module that starts a command: it has an ``if __name__ == "__main__":`` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)


def tier(module: str, known: dict[str, Path] | None = None) -> str:
    """The tier of a module, from its folder: ``"base"``, ``"core"``, ``"speed"``, ``"lm"``,
    ``"tools"`` or ``"entry"``; ``"package"`` for ``linattn_core`` itself."""
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] in FOLDERS:
        return FOLDERS[parts[1]]
    if parts[1].startswith("_"):
        return "base"
    path = (known or modules()).get(module)
    if len(parts) == 2 and path is not None and path.suffix == ".py" and path.name != "__init__.py" \
            and is_entry(path):
        return "entry"
    return "core"


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for d in g.get(m, ()):
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            group = []
            while True:
                x = stack.pop()
                group.append(x)
                if x == m:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in sorted(g):
        if m not in index:
            visit(m)
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports (anywhere in the file), by dotted name."""
    if path.suffix == ".c":
        return set()
    is_package = path.name == "__init__.py"
    here = module.split(".") if is_package else module.split(".")[:-1]
    out = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # a module's __getattr__ only aliases names that moved elsewhere, resolved on first use (as the
    # contracts in pyproject.toml ignore it): not an import of the module's own code
    aliases = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    # nor does an import that only a type checker runs (``if TYPE_CHECKING:``)
    typing_only = [n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    skip = {id(n) for a in aliases + typing_only for n in ast.walk(a)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


def tiers(root: Path = ROOT) -> dict[str, str]:
    """module -> its tier."""
    known = modules(root)
    return {m: tier(m, known) for m in known}


def text_tree(g: dict[str, set[str]]) -> str:
    tier_of, lines = tiers(), []
    for t in ("package", *TIERS):  # each module, then what it imports
        members = sorted(m for m in g if tier_of[m] == t)
        lines.append(f"{t}")
        for m in members:
            deps = sorted(g[m])
            lines.append(f"  {m.removeprefix(PACKAGE + '.')}")
            for d in deps:
                lines.append(f"      -> {d.removeprefix(PACKAGE + '.')}  [{tier_of[d]}]")
    return "\n".join(lines)


def mermaid(g: dict[str, set[str]]) -> str:
    def node(m: str) -> str:
        return m.replace(".", "_").replace("+", "_")

    tier_of, lines = tiers(), ["flowchart LR"]
    for t in TIERS:
        lines.append(f"  subgraph {t}")
        lines += [f"    {node(m)}[{m.removeprefix(PACKAGE + '.')}]" for m in sorted(g) if tier_of[m] == t]
        lines.append("  end")
    for m in sorted(g):
        if tier_of[m] == "package":
            continue
        lines += [f"  {node(m)} --> {node(d)}" for d in sorted(g[m]) if tier_of[d] != "package"]
    return "\n".join(lines)


def tier_edges(g: dict[str, set[str]]) -> dict[tuple[str, str], int]:
    """How many imports go from each tier to each other tier (the drawing's summary)."""
    tier_of, counts = tiers(), {}
    for m, deps in g.items():
        for d in deps:
            key = (tier_of[m], tier_of[d])
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
        for group in cycles(g):
            print("cycle:", " <-> ".join(m.removeprefix(PACKAGE + ".") for m in group))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
