"""The non-causal torch form of the CPU fast path: ``linear.noncausal``, arranged for speed.

Features are computed a block of tokens at a time into reused buffers (phi(q), phi(k) are never
stored whole, and nothing block-sized is allocated per block: fresh memory costs a page fault per
4 KiB), and the working set stays within the last-level cache. The buffers are written with ``out=``
and in-place ops, which is why this form runs only without autograd. Each call allocates its buffers
once (a few MiB, which glibc hands back from its heap on the next call: measured, no page is faulted
in afresh) and its results ``out`` and ``den`` as fresh tensors of their own. The causal torch form is
:mod:`.blocked`.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _backend as ops
from . import pages
from .features import into

# Work a block of tokens at a time, so that the intermediates stay small enough to live in cache.
_BLOCK_TOKENS = 4096


def _results(nb: int, n: int, d_v: int, like: Any) -> tuple[Any, Any]:
    """out: (nb, n, d_v) and den: (nb, n), each an ordinary tensor with storage of its own."""
    return pages.empty((nb, n, d_v), like), like.new_empty((nb, n))


def _buffers(like: Any, **shapes: tuple[int, ...]) -> dict[str, Any]:
    """Uninitialised buffers of the given shapes (``like``'s dtype and device): consecutive views of one
    allocation, made once per call. They never leave this module."""
    sizes = {name: math.prod(shape) for name, shape in shapes.items()}
    flat = like.new_empty((sum(sizes.values()),))
    buffers, start = {}, 0
    for name, shape in shapes.items():
        buffers[name] = flat[start : start + sizes[name]].view(shape)
        start += sizes[name]
    return buffers


def noncausal(Q: Any, K: Any, V: Any, phi: Any, eps: float) -> tuple[Any, Any]:
    """Q: (B, N_q, d), K: (B, N_k, d), V: (B, N_k, d_v) -> out (B, N_q, d_v), den (B, N_q)."""
    nb, n_q, n_k, d = (int(s) for s in (*Q.shape[:2], K.shape[1], Q.shape[2]))
    d_v, f = int(V.shape[-1]), phi.output_dim(d)
    out, den = _results(nb, n_q, d_v, V)
    L = _BLOCK_TOKENS
    G = max(1, L // max(n_q, n_k))  # short sequences go G at a time, as one batched product
    bufs = _buffers(V, S=(G, f, d_v), z=(G, f), feats=(L * f,), tmp=(L * d,))
    if G == 1:
        for b in range(nb):
            _one_sequence(Q[b], K[b], V[b], phi, eps, out[b], den[b], bufs, L)
        return out, den
    for b in range(0, nb, G):
        e = min(b + G, nb)
        _short_sequences(Q[b:e], K[b:e], V[b:e], phi, eps, out[b:e], den[b:e], bufs)
    return out, den


def _one_sequence(Q: Any, K: Any, V: Any, phi: Any, eps: float, out: Any, den: Any, bufs: dict,
                  L: int) -> None:
    """One long sequence, a block of L tokens at a time. Q: (N_q, d), K: (N_k, d), V: (N_k, d_v)."""
    torch = ops.torch_module()
    n_q, n_k, d = int(Q.shape[0]), int(K.shape[0]), int(Q.shape[1])
    S, z = bufs["S"][0], bufs["z"][0]  # (f, d_v), (f,)
    feats, tmp = bufs["feats"].view(L, -1), bufs["tmp"].view(L, d)
    S.zero_()
    z.zero_()
    for s in range(0, n_k, L):  # S = phi(K)^T V, z = sum_j phi(k_j), a block of keys at a time
        e = min(s + L, n_k)
        fk = into(phi, K[s:e], feats[: e - s], tmp[: e - s])  # (L, f)
        S.addmm_(fk.T, V[s:e])
        z.add_(fk.sum(0))
    for s in range(0, n_q, L):  # then every block of queries
        e = min(s + L, n_q)
        fq = into(phi, Q[s:e], feats[: e - s], tmp[: e - s])
        o, dn = out[s:e], den[s:e]
        torch.mm(fq, S, out=o)  # phi(q_i)^T S
        torch.mv(fq, z, out=dn)  # phi(q_i) . z
        o.mul_(dn.clamp_min(eps).reciprocal_()[:, None])


def _short_sequences(Q: Any, K: Any, V: Any, phi: Any, eps: float, out: Any, den: Any, bufs: dict) -> None:
    """g sequences that fit in one block together, each product batched over them.
    Q: (g, N_q, d), K: (g, N_k, d), V: (g, N_k, d_v)."""
    torch = ops.torch_module()
    g, n_q, n_k, d = int(Q.shape[0]), int(Q.shape[1]), int(K.shape[1]), int(Q.shape[2])
    S, z = bufs["S"][:g], bufs["z"][:g]  # (g, f, d_v), (g, f)
    f = int(S.shape[1])

    def features(x: Any, n: int) -> Any:  # (g, n, d) -> (g, n, f), into the shared buffers
        return into(phi, x, bufs["feats"][: g * n * f].view(g, n, f), bufs["tmp"][: g * n * d].view(g, n, d))

    fk = features(K, n_k)
    torch.bmm(fk.transpose(1, 2), V, out=S)  # S = phi(K)^T V per sequence
    torch.sum(fk, 1, out=z)  # z = sum_j phi(k_j)
    fq = features(Q, n_q)
    torch.bmm(fq, S, out=out)  # phi(q_i)^T S
    torch.bmm(fq, z.unsqueeze(-1), out=den.unsqueeze(-1))  # phi(q_i) . z
    out.mul_(den.clamp_min(eps).reciprocal_()[..., None])
