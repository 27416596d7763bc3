"""The non-causal kernel's large outputs against the float64 reference.

An output of 16 MiB or more (``NONCAUSAL_STREAM_FLOATS`` in ``_chunked.c``) whose address is aligned to a
vector is written with non-temporal stores, past the cache; from an unaligned address (a contiguous view
one float into its storage) the same call writes with ordinary stores. Both must give the reference's
numbers within the rounding bound of ``test_noncausal_kernel`` (whose helpers this file reuses), on every
instruction set, with one thread and with the queries split between two.
"""

from __future__ import annotations

import pytest
from test_noncausal_kernel import ISAS, _check, _expected, needs_kernel

from linattn_core import get_feature_map
from linattn_core.fast import kernel

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")

STREAMED = (1, 65536, 40, 64, 64)  # out: 65,536 x 64 floats = 16 MiB, the smallest output streamed


def _out(shape, *, aligned: bool):
    """An uninitialised contiguous float32 tensor, at an address aligned to 64 bytes or one float past it."""
    n = 1
    for s in shape:
        n *= s
    storage = torch.empty(n + 16)
    start = (-storage.data_ptr() // 4) % 16 + (0 if aligned else 1)  # floats to the next 64-byte boundary
    return storage[start:start + n].view(shape)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2], ids=lambda t: f"t{t}")
@pytest.mark.parametrize("aligned", [True, False], ids=["streamed", "unaligned"])
@pytest.mark.parametrize("isa", ISAS)
def test_a_large_output_equals_the_reference(isa, aligned, threads):
    expected = _expected("elu+1", STREAMED)
    q, k, v = expected[0]
    out = _out((q.shape[0], q.shape[1], v.shape[-1]), aligned=aligned)
    assert (out.data_ptr() % 64 == 0) == aligned
    den = torch.empty(q.shape[:2])
    kernel.noncausal(q, k, v, get_feature_map("elu+1"), 1e-6, out, den, threads=threads, isa=isa)
    _check(out, den, expected, f"{isa} {'streamed' if aligned else 'unaligned'} t{threads}")
