"""The blocked torch engine (linattn_core.fast.blocked) against the plain references beside it, in float64.

Its forward against the quadratic references; its backward against the token-by-token recurrence of the
same equations (``linear_grad.causal_backward_recurrent``) and against autograd through the quadratic
references, through the autograd Function that training runs. Lengths include ones no chunk size divides
(1, 63, 65), and blocks of three chunks, so that the carried states cross blocks. Float64 tolerances
hold for any order of summation.
"""

from __future__ import annotations

import math

import _causal_cases as cases
import pytest
from _tolerances import assert_close

torch = pytest.importorskip("torch")

from linattn_core import fast, get_feature_map, linear_grad  # noqa: E402
from linattn_core.decay import decayed_kernel_attention  # noqa: E402
from linattn_core.fast import blocked  # noqa: E402

F64 = cases.F64
ELU = get_feature_map("elu+1")


def _weights(q, k, fm, decay, gates):
    """The causal (decayed) scores, (..., N, N): their row sums are the denominators."""
    return decayed_kernel_attention(q, k, q[..., :1], fm, decay=cases.decay_of(decay, gates), normalize=False,
                                    return_weights=True)[1]


@pytest.fixture
def block_rows(request, monkeypatch):
    """Whole sequences in one block (None), or blocks of 3 chunks (the carried states cross blocks)."""
    if request.param is not None:
        monkeypatch.setattr(blocked, "_blocks", _small_blocks(request.param))
    return request.param


def _small_blocks(chunks):
    def small(n, C, nb):
        full = n // C * C
        out = [(a, min(a + chunks * C, full), C) for a in range(0, full, chunks * C)]
        return out + ([(full, n, n - full)] if full < n else [])

    return small


def _splits():
    """(n, C, blocks) where the split differs: 48 divides none of the lengths, 16 divides 64; blocks of
    3 chunks only where the whole chunks make more than one such block, and one chunk size for n = 1
    (its one chunk is its one token, whatever C): the other combinations split the sequence exactly as
    one of these does."""
    for n in (1, 63, 64, 65, 200):
        for C in (16, 48) if n > 1 else (16,):
            for blocks in (None, 3) if n // C > 3 else (None,):
                split = "blocks-of-3-chunks" if blocks else "one-block"
                yield pytest.param(n, C, blocks, id=f"{n}-{C}-{split}")


@pytest.mark.parametrize(("n", "C", "block_rows"), list(_splits()), indirect=["block_rows"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("decay", [None, "constant", "gated"])
def test_forward_equals_the_quadratic_reference(n, C, normalize, decay, block_rows):
    q, k, v, gates, _ = cases.inputs((2, 3), n)
    out, den = blocked.forward(q, k, v, cases.log_g(decay, gates), ELU, 1e-6, C, normalize)
    assert_close(out, cases.reference(q, k, v, "elu+1", decay, gates, normalize))
    if normalize:
        assert_close(den, _weights(q, k, "elu+1", decay, gates).sum(-1))
    else:
        assert den is None


@pytest.mark.parametrize(("n", "C", "block_rows"), list(_splits()), indirect=["block_rows"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("decay", [None, "constant", "gated"])
def test_backward_equals_the_recurrence_of_the_equations(n, C, normalize, decay, block_rows):
    # features given (phi None): the engine's gradients are those of the features, as the reference's
    q, k, v, gates, dout = cases.inputs((2, 3), n, seed=1)
    phi_q, phi_k, log_g = ELU(q), ELU(k), cases.log_g(decay, gates)
    got = blocked.backward(phi_q, phi_k, v, log_g, dout, None, 1e-6, C, normalize)
    want = linear_grad.causal_backward_recurrent(phi_q, phi_k, v, dout, log_g=log_g, normalize=normalize)
    for name, g, w in zip(("dphi_q", "dphi_k", "dv", "dlog_g"), got, want, strict=True):
        assert (g is None) == (w is None) == (name == "dlog_g" and decay is None), name
        if g is not None:
            assert_close(g, w, what=f"{name}, n={n}, C={C}, decay={decay}, normalize={normalize}")


@pytest.mark.parametrize(("n", "C", "block_rows"), list(_splits()), indirect=["block_rows"])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("decay", [None, "constant", "gated"])
def test_training_through_it_equals_autograd_through_the_reference(n, C, normalize, decay, block_rows):
    # the autograd Function with its float64 plan (the blocked engine both ways): phi applied a block at
    # a time, its derivative written out, the gates' gradient a suffix sum
    q, k, v, gates, dout = cases.inputs((2, 3), n)
    ins = [x.requires_grad_() for x in (q, k, v, gates)]
    log_g = cases.log_g(decay, gates)
    plan = fast.which(q, k, v, ELU, causal=True, method="chunked", log_g=log_g, normalize=normalize)
    assert plan == fast.Plan("torch", True, "torch")
    expected = cases.reference(q, k, v, "elu+1", decay, gates, normalize)
    out = linear_grad.causal_linear_attention(q, k, v, ELU, plan, log_g=log_g, normalize=normalize,
                                              chunk_size=C)
    assert_close(out, expected)
    wrt = ins if decay == "gated" else ins[:3]
    for got, want in zip(torch.autograd.grad(out, wrt, dout), torch.autograd.grad(expected, wrt, dout),
                         strict=True):
        assert got.shape == want.shape
        assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_decay_factors_come_from_c_exponentials_where_nothing_can_overflow(dtype, monkeypatch):
    # gates near 1: lam stays small, D = exp(lam_i) exp(-lam_j); gates near 0 over 64 tokens: lam
    # reaches about -590, past what a factor can hold (float32 and float64), so D is exp(lam_i - lam_j)
    gen = torch.Generator().manual_seed(7)
    mask = torch.ones(64, 64, dtype=torch.bool).tril()
    for low, high, factored in ((0.5, 1.0, True), (1e-4, 1e-3, False)):
        g = low + (high - low) * torch.rand(3, 2, 64, generator=gen, dtype=F64)
        lam = g.log().cumsum(-1).to(dtype)
        calls = []
        real = torch.exp
        spy = lambda x, calls=calls, real=real: calls.append(tuple(x.shape)) or real(x)  # noqa: E731
        monkeypatch.setattr(torch, "exp", spy)
        D = blocked._Decay(lam, mask).D
        monkeypatch.undo()
        assert ((3, 2, 64, 64) not in calls) == factored, calls  # no c x c exponential when factored
        direct = torch.exp(torch.where(mask, lam[..., :, None] - lam[..., None, :], -math.inf))
        assert torch.isfinite(D).all() and torch.equal(D == 0, ~mask.expand_as(D) | (direct == 0))
        assert_close(D, direct, dtype="float32" if dtype == torch.float32 else "float64")


def test_forward_results_are_tensors_of_their_own():
    # the forward writes block by block into its results: fresh tensors, never views of one another
    q, k, v, _, _ = cases.inputs((2,), 70, seed=2)
    out, den = blocked.forward(q, k, v, None, ELU, 1e-6, 16, True)
    assert out.is_contiguous() and out.storage_offset() == 0 and den.storage_offset() == 0
    assert out.untyped_storage().data_ptr() != den.untyped_storage().data_ptr()
