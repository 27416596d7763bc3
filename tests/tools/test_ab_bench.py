"""scripts/ab_bench.py says what runs the causal chunked form in each version it times."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import linattn_core
from linattn_core.fast import kernel

ROOT = Path(__file__).resolve().parents[2]


def test_ab_bench_names_the_kernel_this_tree_runs():
    # it used to import linattn_core.native, gone since the tiers, and so said "torch ops" for every tree
    spec = importlib.util.spec_from_file_location("ab_bench", ROOT / "scripts" / "ab_bench.py")
    ab_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab_bench)
    expected = f"kernel ({kernel.default_isa()})" if kernel.available() else "torch ops"
    assert ab_bench.runs(linattn_core) == expected
    with kernel.switched_off():
        assert ab_bench.runs(linattn_core) == "torch ops"
