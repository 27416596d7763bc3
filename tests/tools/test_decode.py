"""linattn_core.tools.timing.decode: what it reports besides times, and the order it times in (times
themselves are never asserted: they depend on the machine)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from linattn_core.streaming import KVCache, LinearAttentionState
from linattn_core.tools.timing.decode import decode_times


def test_memory_per_sequence_grows_for_the_cache_only():
    contexts = [16, 40, 100]
    kv = decode_times("kvcache", contexts, batch=3, heads=2, d=4, repeats=4)
    st = decode_times("state", contexts, batch=3, heads=2, d=4, repeats=4)
    assert [r["N"] for r in kv] == contexts
    assert [r["bytes_per_sequence"] for r in kv] == [n * 2 * (4 + 4) * 4 for n in contexts]
    assert [r["bytes_per_sequence"] for r in st] == [2 * 4 * (4 + 1) * 4] * 3  # S and z per head
    for r in kv + st:
        assert 0 < r["q25_s"] <= r["median_s"] <= r["q75_s"] and r["repeats"] == 4


@pytest.mark.parametrize(("which", "cls"), [("kvcache", KVCache), ("state", LinearAttentionState)])
def test_contexts_take_turns(which, cls, monkeypatch):
    # one memory per context; each round steps every context once, starting one context further on
    # each round; an untimed round first; the last step of each memory is at its context length
    steps = []
    step = cls.step

    def spy(self, q, k, v):
        steps.append((id(self), self.t + 1))
        return step(self, q, k, v)

    monkeypatch.setattr(cls, "step", spy)
    contexts, repeats = [8, 20, 50], 3
    decode_times(which, contexts, batch=1, heads=2, d=4, repeats=repeats)
    assert len(steps) == (repeats + 1) * len(contexts)
    mems = list(dict.fromkeys(m for m, _ in steps))  # in the order of the first round: the contexts'
    assert len(mems) == len(contexts)
    for r in range(repeats + 1):
        order = [mems.index(m) for m, _ in steps[r * 3:(r + 1) * 3]]
        assert order == [(r + i) % 3 for i in range(3)]
    for j, n in enumerate(contexts):
        ts = [t for m, t in steps if m == mems[j]]
        assert ts == list(range(n - repeats, n + 1))


def test_bad_arguments():
    with pytest.raises(ValueError, match="which"):
        decode_times("cache", [16])
    with pytest.raises(ValueError, match="ascending"):
        decode_times("state", [64, 32])
    with pytest.raises(ValueError, match="distinct"):
        decode_times("state", [32, 32])
    with pytest.raises(ValueError, match="repeats"):
        decode_times("state", [8], repeats=8)  # one untimed step and 8 timed ones need 9 tokens
