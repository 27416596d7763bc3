"""What a reader (and a lecturer) is told, held to the book: the reader's map, the notation's symbols
with two meanings, the cheat sheet's boxes and the small corrections of issue 37."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"


def _text(page: str) -> str:
    return " ".join((BOOK / f"{page}.md").read_text(encoding="utf-8").split())


def _section(page: str, heading: str) -> str:
    text = (BOOK / f"{page}.md").read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return " ".join(text[start:end if end > 0 else None].split())


def test_the_readers_map_gives_the_core_path_and_what_may_wait():
    map_ = _section("intro", "**A reader's map")
    for page in ("softmax", "associative", "feature_maps", "causal", "tradeoffs", "training"):
        assert f"{{doc}}`{page}`" in map_.split("What may be skipped")[0], page
    for later in ("**timing**", "**the backward pass**", "**the kernel appendix**", "**the MQAR details**"):
        assert later in map_, later
    assert "(sec-intro-map)=" in (BOOK / "intro.md").read_text(encoding="utf-8")


def test_symbols_with_two_meanings_say_so_on_the_notation_page():
    rows = [line for line in (BOOK / "notation.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| $")]
    alpha = next(r for r in rows if r.startswith("| $\\alpha_t$"))
    assert "two meanings" in alpha and "Gated DeltaNet" in alpha and "GLA" in alpha
    sigmoid = next(r for r in rows if r.startswith("| $\\sigma(\\cdot)$"))
    assert "sigmoid" in sigmoid and "timing" in sigmoid
    tau = next(r for r in rows if r.startswith("| $\\tau$"))
    assert "temperature" in tau and "timing" in tau
    shares = next(r for r in rows if r.startswith("| $\\sigma$, $\\tau$"))
    assert "sigmoid" in shares and "temperature" in shares


def test_the_cheat_sheet_has_decay_the_delta_rule_and_the_one_recurrence():
    sheet = (BOOK / "cheatsheet.md").read_text(encoding="utf-8")
    for heading in ("## 6. Decay and gates ({doc}`beyond_decay`)",
                    "## 7. The delta rule ({doc}`beyond_delta`)",
                    "## 8. One recurrence ({doc}`beyond_tour`)"):
        assert heading in sheet, heading
    assert "delta_rule_attention(" in sheet and "decayed_linear_attention(" in sheet  # checked in its cell
    for layer in ("RetNet", "GLA", "Mamba-2", "DeltaNet", "Gated DeltaNet"):
        assert f"| {layer} |" in sheet, layer


def test_small_corrections():
    assert "one chapter after" not in _text("tradeoffs") and "three chapters after" in _text("tradeoffs")
    summary = _section("softmax", "## Summary")
    assert "at least as fast as" not in summary and "below 2" in summary  # as its dropdown says
    assert "for large $m$, roughly like $1/\\sqrt m$" in _section("feature_maps_random", "## Summary")
    assert "shift-invariant kernels (kernels that depend on" in _text("feature_maps_random")
    decay = _text("beyond_decay")
    assert "$\\mathrm{swish}(u) = u\\,\\sigma(u)$" in decay  # the swish output gate, defined where used
    assert "one less, $\\gamma/(1-\\gamma)$" in decay and "differ by exactly one" in decay
    assert "[flash-linear-attention](https://github.com/fla-org/flash-linear-attention)" in _text("kernel")
    causal = (BOOK / "causal.md").read_text(encoding="utf-8")
    finally_at = [m.start() for m in re.finditer(r"^Finally", causal, flags=re.M)]
    sections_after = [causal.count("\n## ", at) for at in finally_at]
    assert all(n <= 1 for n in sections_after), "a 'Finally' with more than one section after it"
    instructors = _text("instructors")
    assert "the float32 check of {doc}`beyond_delta`" in instructors  # beyond_delta imports torch
