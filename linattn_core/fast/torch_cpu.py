"""The torch forms of the CPU fast path: the same algorithms as ``linear.py``, arranged for speed.

Features are computed a block of tokens at a time into reused buffers (phi(q), phi(k) are never
stored whole, and nothing block-sized is allocated per block: fresh memory costs a page fault per
4 KiB), the working set stays within the last-level cache, and each op covers as many chunks as
possible so that the fixed cost of an op is paid rarely. The buffers are written with ``out=`` and
in-place ops, which is why this path runs only without autograd. Each call allocates its buffers once
(a few MiB, which glibc hands back from its heap on the next call: measured, no page is faulted in
afresh) and its results ``out`` and ``den`` as fresh tensors of their own.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from .. import _backend as ops
from . import pages
from .features import into

# Work a block at a time, carrying (S, z) between blocks, so that the intermediates stay small enough
# to live in cache: tokens per block (non-causal), rows of batch x tokens (chunked).
_BLOCK_TOKENS = 4096
_BLOCK_ROWS = 4096


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


def chunked(Q: Any, K: Any, V: Any, phi: Any, eps: float, C: int) -> tuple[Any, Any]:
    """Q, K: (B, N, d), V: (B, N, d_v) -> out (B, N, d_v), den (B, N); torch, CPU, no grad, 1 <= C <= N.

    All sequences advance together, a block of G chunks at a time (at most ``_BLOCK_ROWS`` rows of
    ``B x tokens``; many sequences are taken a group at a time).
    """
    nb, n = int(Q.shape[0]), int(Q.shape[1])
    out, den = _results(nb, n, int(V.shape[-1]), V)
    group = max(1, _BLOCK_ROWS // C)  # sequences per pass: a block of one chunk each stays small
    for b in range(0, nb, group):
        e = min(b + group, nb)
        _chunked_group(Q[b:e], K[b:e], V[b:e], phi, eps, C, out[b:e], den[b:e])
    return out, den


def _chunked_group(Q: Any, K: Any, V: Any, phi: Any, eps: float, C: int, out: Any, den: Any) -> None:
    """Q, K: (B, N, d), V: (B, N, d_v); writes out: (B, N, d_v) and den: (B, N)."""
    nb, n, d = (int(s) for s in Q.shape)
    d_v, f = int(V.shape[-1]), phi.output_dim(d)
    L = max(C, _BLOCK_ROWS // nb // C * C)  # tokens per block: a whole number of chunks
    L = min(L, -(-n // C) * C)
    rows = nb * L
    # state at the chunk boundaries of a block, for every sequence: S[0], z[0] is the state carried
    # in from earlier blocks, S[g], z[g] the state after the block's chunk g; then the block buffers
    bufs = _buffers(V, S=(L // C + 1, nb, f, d_v), z=(L // C + 1, nb, f), fq=(rows * f,),
                    fk=(rows * f,), tmp=(rows * d,), v=(rows * d_v,), Y=(rows * d_v,),
                    A=(rows * C,), den=(rows,))
    S, z = bufs["S"].zero_(), bufs["z"].zero_()
    views = {}  # (G, c) -> the buffers' views for a block of G chunks of c tokens, made once
    for s in range(0, n, L):
        e = min(s + L, n)
        full = s + (e - s) // C * C  # [s, full): whole chunks; [full, e): one shorter chunk
        for a, b, c in ((s, full, C), (full, e, e - full)):
            if b > a:
                G = (b - a) // c
                if (G, c) not in views:
                    views[G, c] = _block_views(bufs, S, z, nb, G, c, d, f, d_v)
                _chunked_block(Q[:, a:b], K[:, a:b], V[:, a:b], phi, eps, views[G, c],
                               out[:, a:b], den[:, a:b])


def _block_views(bufs: dict, S: Any, z: Any, nb: int, G: int, c: int, d: int, f: int,
                 d_v: int) -> SimpleNamespace:
    """Views of the flat buffers for a block of G chunks of c tokens of every sequence.

    The block's tensors are stored chunk-major, (G, B, c, .), so its n = G*B chunks flatten into one
    batch for bmm (``fq: (n, c, f)``), and chunk g of every sequence lines up with the state S[g]
    before it. ``*_seq`` views see the same memory in the inputs' order, (B, G, c, .).
    """
    n = G * nb

    def chunks(name: str, width: int) -> tuple[Any, Any]:
        flat = bufs[name][: n * c * width].view(n, c, width)
        return flat, flat.view(G, nb, c, width).transpose(0, 1)

    v = SimpleNamespace(G=G, c=c, S_rows=S.unbind(0), z=z)  # S_rows[g]: the states after chunk g
    v.fq, v.fq_seq = chunks("fq", f)
    v.fk, v.fk_seq = chunks("fk", f)
    _, v.tmp_seq = chunks("tmp", d)
    v.V, v.V_seq = chunks("v", d_v)
    v.Y, v.Y_seq = chunks("Y", d_v)
    v.A = bufs["A"][: n * c * c].view(n, c, c)
    v.den = bufs["den"][: n * c].view(n, c)
    v.den_seq = v.den.view(G, nb, c).transpose(0, 1)
    v.den_row = v.den.unsqueeze(1)  # (n, 1, c)
    v.recip_seq = v.den.view(G, nb, c, 1).transpose(0, 1)
    v.fk_T, v.fq_T = v.fk.transpose(1, 2), v.fq.transpose(1, 2)
    v.S_before, v.S_after = S[:G].view(n, f, d_v), S[1 : G + 1].view(n, f, d_v)
    v.z_before, v.z_after = z[:G].view(n, 1, f), z[1 : G + 1]
    v.z_upto, v.fk_g = z[: G + 1], v.fk.view(G, nb, c, f)
    return v


def _chunked_block(Q: Any, K: Any, V: Any, phi: Any, eps: float, v: SimpleNamespace, out: Any,
                   den: Any) -> None:
    """G chunks of c tokens of every sequence: Q, K: (B, G*c, d), V: (B, G*c, d_v); v: the buffers.

    Writes out: (B, G*c, d_v) and den: (B, G*c); moves the carried state S[0], z[0] past the block.
    """
    torch = ops.torch_module()
    nb, G, c = int(Q.shape[0]), v.G, v.c
    into(phi, Q.view(nb, G, c, -1), v.fq_seq, v.tmp_seq)
    into(phi, K.view(nb, G, c, -1), v.fk_seq, v.tmp_seq)
    v.V_seq.copy_(V.view(nb, G, c, -1))
    torch.bmm(v.fq, v.fk_T, out=v.A).tril_()  # scores inside each chunk, causally masked
    torch.bmm(v.A, v.V, out=v.Y)  # numerators from inside the chunk
    torch.sum(v.A, -1, out=v.den)  # denominators from inside the chunk
    # the states: S[g] = S[g - 1] + K_g^T V_g and z[g] = z[g - 1] + colsum K_g, a running sum
    torch.bmm(v.fk_T, v.V, out=v.S_after)
    torch.sum(v.fk_g, 2, out=v.z_after)
    for g in range(1, G + 1):  # G adds of B states each (torch's cumsum over dim 0 is far slower)
        v.S_rows[g].add_(v.S_rows[g - 1])
    v.z_upto.cumsum_(0)
    v.Y.baddbmm_(v.fq, v.S_before)  # chunk g reads the state before it
    v.den_row.baddbmm_(v.z_before, v.fq_T)  # z . phi(q), as a row times a matrix: 5x faster than a column
    den.view(nb, G, c).copy_(v.den_seq)
    v.den.clamp_min_(eps).reciprocal_()
    torch.mul(v.Y_seq, v.recip_seq, out=out.view(nb, G, c, -1))  # back to (B, tokens, d_v) order
    v.S_rows[0].copy_(v.S_rows[G])
    v.z[0].copy_(v.z[G])
