"""linattn_core.tools.timing.decode: what it reports besides times (never asserted: they depend on the
machine)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from linattn_core.tools.timing.decode import decode_times


def test_memory_per_sequence_grows_for_the_cache_only():
    contexts = [16, 40, 100]
    kv = decode_times("kvcache", contexts, batch=3, heads=2, d=4, repeats=4)
    st = decode_times("state", contexts, batch=3, heads=2, d=4, repeats=4)
    assert [r["N"] for r in kv] == contexts
    assert [r["bytes_per_sequence"] for r in kv] == [n * 2 * (4 + 4) * 4 for n in contexts]
    assert [r["bytes_per_sequence"] for r in st] == [2 * 4 * (4 + 1) * 4] * 3  # S and z per head
    assert all(r["median_s"] > 0 for r in kv + st)


def test_bad_arguments():
    with pytest.raises(ValueError, match="which"):
        decode_times("cache", [16])
    with pytest.raises(ValueError, match="ascending"):
        decode_times("state", [64, 32])
    with pytest.raises(ValueError, match="repeats"):
        decode_times("state", [4], repeats=8)
