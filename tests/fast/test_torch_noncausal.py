"""The non-causal torch form of the speed tier (``fast.torch_cpu.noncausal``) against the float64 reference.

It runs where the compiled kernel does not (switched off, not built, a map the kernel lacks) from
512 tokens on. Sequences short enough to share a block of 4,096 tokens go through batched products
several at a time; a longer one goes a block of tokens at a time. Both paths, and a batch that is not
a multiple of the group, are compared with ``kernel_attention`` in float64 at the rounding bound of
the sums, and the form is checked to be the one that ran.
"""

from __future__ import annotations

import pytest
from _tolerances import assert_close

from linattn_core import fast, get_feature_map, kernel_attention, linear_attention
from linattn_core.fast import kernel, torch_cpu

torch = pytest.importorskip("torch")


def _inputs(lead, n_q, n_k, d, d_v, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, n_q, d, generator=g)
    k = torch.randn(*lead, n_k, d, generator=g)
    v = torch.randn(*lead, n_k, d_v, generator=g)
    return q, k, v


@pytest.mark.parametrize(("lead", "n_q", "n_k"), [
    ((3, 5), 512, 512),     # 8 sequences a group: 15 = 8 + 7
    ((2, 3), 700, 900),     # cross-attention, 4 a group: 6 = 4 + 2
    ((1,), 2048, 2047),     # 2 a group, one sequence
    ((2, 2), 4096, 4096),   # exactly one block: one at a time
    ((2,), 4097, 5000),     # past one block: blocks of tokens
], ids=["grouped-512", "grouped-cross", "group-of-one", "one-block", "blocks"])
@pytest.mark.parametrize("map_name", ["elu+1", "softplus", "identity"])
def test_torch_form_matches_the_reference(monkeypatch, lead, n_q, n_k, map_name):
    ran = []
    real = torch_cpu.noncausal
    monkeypatch.setattr(torch_cpu, "noncausal", lambda *a: ran.append(a[0].shape) or real(*a))
    q, k, v = _inputs(lead, n_q, n_k, 8, 5, seed=n_q + n_k)
    if map_name == "identity":  # positive scores, so every denominator is a sum of positive terms
        q, k = q.abs(), k.abs()
    phi = get_feature_map(map_name)
    with kernel.switched_off():
        assert fast.which(q, k, v, phi, causal=False, method="auto").forward == "torch"
        out = linear_attention(q, k, v, phi)
    assert len(ran) == 1  # the torch form ran, once, on the flattened batch
    expected = kernel_attention(q.double(), k.double(), v.double(), phi)
    assert out.shape == expected.shape
    assert_close(out, expected, dtype=torch.float32, what=f"torch non-causal {map_name} {lead} {n_q}x{n_k}")


def test_groups_and_blocks_give_the_same_rows(monkeypatch):
    # the same sequences batched in one group, and a block of 256 tokens at a time, one by one
    q, k, v = _inputs((6,), 600, 700, 4, 3, seed=1)
    phi = get_feature_map("elu+1")
    grouped, den = torch_cpu.noncausal(q, k, v, phi, 1e-6)
    monkeypatch.setattr(torch_cpu, "_BLOCK_TOKENS", 256)
    blocked, den_blocked = torch_cpu.noncausal(q, k, v, phi, 1e-6)
    torch.testing.assert_close(grouped, blocked, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(den, den_blocked, rtol=1e-5, atol=1e-6)
