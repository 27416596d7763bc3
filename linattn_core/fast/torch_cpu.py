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
    torch = ops.torch_module()
    nb, n_q, n_k, d = (int(s) for s in (*Q.shape[:2], K.shape[1], Q.shape[2]))
    d_v, f = int(V.shape[-1]), phi.output_dim(d)
    out, den = _results(nb, n_q, d_v, V)
    L = _BLOCK_TOKENS
    bufs = _buffers(V, S=(f, d_v), z=(f,), feats=(L, f), tmp=(L, d))
    S, z, feats, tmp = bufs["S"], bufs["z"], bufs["feats"], bufs["tmp"]
    for b in range(nb):
        S.zero_()
        z.zero_()
        for s in range(0, n_k, L):  # S = phi(K)^T V, z = sum_j phi(k_j), a block of keys at a time
            e = min(s + L, n_k)
            fk = into(phi, K[b, s:e], feats[: e - s], tmp[: e - s])  # (L, f)
            S.addmm_(fk.T, V[b, s:e])
            z.add_(fk.sum(0))
        for s in range(0, n_q, L):  # then every block of queries
            e = min(s + L, n_q)
            fq = into(phi, Q[b, s:e], feats[: e - s], tmp[: e - s])
            o, dn = out[b, s:e], den[b, s:e]
            torch.mm(fq, S, out=o)  # phi(q_i)^T S
            torch.mv(fq, z, out=dn)  # phi(q_i) . z
            o.mul_(dn.clamp_min(eps).reciprocal_()[:, None])
    return out, den
