"""Linear attention: the associative forms that never build the ``N x N`` matrix.

Non-causal, change the order of the products::

    out_i = phi(q_i)^T S / max(phi(q_i) . z, eps),   S = sum_j phi(k_j) v_j^T,   z = sum_j phi(k_j)

Causal, the same with prefix sums ``S_i = sum_{j <= i}``, computed three ways:

- ``"recurrent"``: a step loop over ``t`` (the readable reference of the recurrence);
- ``"cumsum"``: prefix sums of all outer products at once (``N x d_phi x d_v`` memory);
- ``"chunked"``: split the sequence into chunks of ``C`` tokens; inside a chunk use the masked
  quadratic form (``C x C``), across chunks carry ``S`` and ``z`` (chunkwise parallel form).

``"auto"`` picks the fastest for the input: chunked, except the recurrent loop for a few tokens.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from . import _backend as B
from . import _memory, native
from .attention import normalise, warn_nonpositive
from .feature_maps import Identity, as_feature_map

__all__ = ["METHODS", "linear_attention"]

METHODS = ("auto", "recurrent", "cumsum", "chunked")

# The CPU fast path works a block at a time, carrying (S, z) between blocks, so that its intermediates
# stay small enough to live in cache: tokens per block (non-causal), rows of batch x tokens (chunked).
_BLOCK_TOKENS = 4096
_BLOCK_ROWS = 4096
# Up to this length "auto" uses the recurrent loop: for a handful of tokens a few small ops beat the
# chunked form's set-up (measured on a 2-core CPU, numpy and torch, d = d_v = 64).
_AUTO_RECURRENT_MAX_N = 8


def linear_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    causal: bool = False,
    eps: float = 1e-6,
    method: str = "auto",
    chunk_size: int = 64,
) -> Any:
    """Kernel attention in linear time and memory (the associative form).

    Parameters
    ----------
    q : array or tensor, shape (..., N_q, d)
    k : array or tensor, shape (..., N_k, d)
    v : array or tensor, shape (..., N_k, d_v)
    feature_map : str, FeatureMap or callable
        ``phi``; a name for :func:`get_feature_map`, a feature map, or any ``phi(x) -> (..., N, d_phi)``.
    causal : bool
        Query ``i`` sees keys ``j <= i`` (needs ``N_q == N_k``).
    eps : float
        Denominators are clamped to at least ``eps`` (as in :func:`kernel_attention`).
    method : {"auto", "recurrent", "cumsum", "chunked"}
        How to compute the causal prefix sums (validated, and ignored, when not causal).
    chunk_size : int
        ``C`` for ``method="chunked"``; any ``N`` works with any ``C``.

    Returns
    -------
    out : shape (..., N_q, d_v)
        Same type, dtype and device as ``q``; equal to :func:`kernel_attention` up to rounding.

    Notes
    -----
    Memory: ``O(N (d + d_v) + d_phi d_v)``; time ``O(N d_phi d_v)``, plus ``O(N C d_phi)`` for
    the chunked form. No ``N x N`` array is ever allocated.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import kernel_attention, linear_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 100, 8))
    >>> out = linear_attention(q, k, v, causal=True, method="chunked", chunk_size=16)
    >>> bool(np.allclose(out, kernel_attention(q, k, v, causal=True), atol=1e-12))
    True
    """
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)
    causal = B.check_flag(causal, "causal")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    chunk_size = B.check_positive_int(chunk_size, "chunk_size")
    be = B.check_qkv(q, k, v, causal=causal)
    eps = B.check_eps(eps)
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    if causal and method == "auto":
        method = _auto_method(int(q.shape[-2]))
    if phi.elementwise and _use_fast_path(q, k, v, causal, method, phi):
        out, den = _fast_cpu(q, k, v, phi, eps, chunk_size, causal)  # same maths, faster on a CPU
    else:
        phi_q, phi_k = phi.pair(q, k, causal=causal)  # (..., N_q, d_phi), (..., N_k, d_phi)
        if not causal:
            out, den = noncausal(phi_q, phi_k, v, eps)
        elif method == "chunked":
            out, den = causal_chunked(phi_q, phi_k, v, eps, chunk_size)
        else:
            out, den = _CAUSAL[method](phi_q, phi_k, v, eps)
    warn_nonpositive(den, phi)
    return be.to_output(out)


def _auto_method(n: int) -> str:
    return "recurrent" if n <= _AUTO_RECURRENT_MAX_N else "chunked"


def noncausal(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """Aggregate first, then query: ``S = phi(K)^T V``, ``z = sum_j phi(k_j)``.

    phi_q: (..., N_q, f), phi_k: (..., N_k, f), v: (..., N_k, d_v) -> out (..., N_q, d_v), den (..., N_q)
    """
    S = B.swap_last(phi_k) @ v  # (..., f, d_v)
    z = B.total(phi_k, -2)  # (..., f)
    num = phi_q @ S  # (..., N_q, d_v)
    den = (phi_q @ z[..., None])[..., 0]  # (..., N_q)
    return normalise(num, den, eps), den


def causal_recurrent(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """The recurrence, one token at a time: add ``(k_t, v_t)`` to the state, then answer ``q_t``.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v) -> out (..., N, d_v), den (..., N)
    """
    f, d_v = int(phi_k.shape[-1]), int(v.shape[-1])
    S = B.zeros(tuple(phi_k.shape[:-2]) + (f, d_v), phi_k)  # (..., f, d_v)
    z = B.zeros(tuple(phi_k.shape[:-2]) + (f,), phi_k)  # (..., f)
    nums, dens = [], []
    for t in range(int(phi_k.shape[-2])):
        k_t, v_t, q_t = phi_k[..., t, :], v[..., t, :], phi_q[..., t, :]
        S = S + k_t[..., :, None] * v_t[..., None, :]  # S_t = S_{t-1} + phi(k_t) v_t^T
        z = z + k_t  # z_t = z_{t-1} + phi(k_t)
        nums.append((q_t[..., None, :] @ S)[..., 0, :])  # phi(q_t)^T S_t: (..., d_v)
        dens.append(B.total(q_t * z, -1))  # phi(q_t) . z_t: (...,)
    num, den = B.stack(nums, -2), B.stack(dens, -1)
    return normalise(num, den, eps), den


def causal_cumsum(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """All prefix states at once: cumulative sums of the outer products ``phi(k_j) v_j^T``.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    Memory ``N x f x d_v``: fine for short sequences only.
    """
    S = B.cumsum(phi_k[..., :, None] * v[..., None, :], -3)  # (..., N, f, d_v): S_1 .. S_N
    z = B.cumsum(phi_k, -2)  # (..., N, f)
    num = (phi_q[..., None, :] @ S)[..., 0, :]  # (..., N, d_v)
    den = B.total(phi_q * z, -1)  # (..., N)
    return normalise(num, den, eps), den


_CAUSAL = {"recurrent": causal_recurrent, "cumsum": causal_cumsum}


def causal_chunked(phi_q: Any, phi_k: Any, v: Any, eps: float, chunk_size: int = 64) -> tuple[Any, Any]:
    """Chunkwise parallel form: masked ``C x C`` products inside a chunk, ``(S, z)`` carried across.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    For chunk ``c`` with rows ``Q_c, K_c, V_c`` and the state ``S, z`` of all earlier chunks::

        num_c = tril(Q_c K_c^T) V_c + Q_c S        den_c = rowsum(tril(Q_c K_c^T)) + Q_c z
        S <- S + K_c^T V_c                          z <- z + colsum(K_c)

    Work: ``4 N f d_v`` (states in, states out) plus ``2 N C (f + d_v)`` (inside the chunks).
    """
    lead, n, f, d_v = tuple(phi_q.shape[:-2]), int(phi_q.shape[-2]), int(phi_q.shape[-1]), int(v.shape[-1])
    Q = phi_q.reshape((-1, n, f))  # (B, N, f): leading dims flattened
    K = phi_k.reshape((-1, n, f))
    V = v.reshape((-1, n, d_v))
    C = min(chunk_size, n)
    if _use_fast_path(Q, K, V, True, "chunked", Identity()):  # features already computed: phi = identity
        out, den = _fast_cpu(Q, K, V, Identity(), eps, C, causal=True)
        return out.reshape(lead + (n, d_v)), den.reshape(lead + (n,))
    S = B.zeros((Q.shape[0], f, d_v), Q)  # (B, f, d_v)
    z = B.zeros((Q.shape[0], f), Q)  # (B, f)
    outs, dens = [], []
    full = n // C * C  # [0, full): whole chunks; [full, n): one shorter chunk
    for a, b, c in ((0, full, C), (full, n, n - full)):
        if b > a:
            out, den, S, z = _chunks(Q[:, a:b], K[:, a:b], V[:, a:b], S, z, c, eps)
            outs.append(out)
            dens.append(den)
    out = B.concat(outs, 1) if len(outs) > 1 else outs[0]
    den = B.concat(dens, 1) if len(dens) > 1 else dens[0]
    return out.reshape(lead + (n, d_v)), den.reshape(lead + (n,))


def _chunks(Q: Any, K: Any, V: Any, S: Any, z: Any, C: int, eps: float) -> tuple[Any, Any, Any, Any]:
    """One segment of ``G`` whole chunks of ``C`` tokens, starting from the state ``(S, z)``.

    Q, K: (B, G*C, f), V: (B, G*C, d_v), S: (B, f, d_v), z: (B, f)
    -> out (B, G*C, d_v), den (B, G*C), and the state after the segment.
    """
    nb, n, f = (int(s) for s in Q.shape)
    d_v, G = int(V.shape[-1]), n // C
    Q, K, V = Q.reshape((nb, G, C, f)), K.reshape((nb, G, C, f)), V.reshape((nb, G, C, d_v))
    A = Q @ B.swap_last(K)  # (B, G, C, C): scores inside each chunk
    A = B.lib(A).where(B.causal_mask(C, A), A, 0.0)
    num = A @ V  # (B, G, C, d_v)
    den = B.total(A, -1)  # (B, G, C)
    # exclusive prefix states over the chunks, starting from the carried state:
    # prefix[:, c] = S + sum_{c' < c} K_c'^T V_c'; prefix[:, G] is the state after the segment
    S_pre = B.cumsum(B.concat([S[:, None], B.swap_last(K) @ V], 1), 1)  # (B, G+1, f, d_v)
    z_pre = B.cumsum(B.concat([z[:, None], B.total(K, -2)], 1), 1)  # (B, G+1, f)
    num = num + Q @ S_pre[:, :G]
    den = den + (Q @ z_pre[:, :G, :, None])[..., 0]
    out = normalise(num, den, eps)
    return out.reshape((nb, n, d_v)), den.reshape((nb, n)), S_pre[:, G], z_pre[:, G]


# --- the fast path: torch on the CPU, no autograd, an elementwise phi ---------------------------------
# The same algorithms, arranged for speed. The causal chunked form runs the compiled kernel of
# _chunked.c where it can (float32, phi identity/relu/elu+1; see native): each chunk is computed
# whole in cache, and only the score blocks on or below the diagonal are formed. Elsewhere torch ops
# do it: features are computed a block of tokens at a time into reused buffers (phi(q), phi(k) are
# never stored whole, and nothing block-sized is allocated: fresh memory costs a page fault per
# 4 KiB), the working set stays within the last-level cache, and each op covers as many chunks as
# possible so that the fixed cost of an op is paid rarely. Buffers are reused with out= and in-place
# ops, which is why this path is not used under autograd; on GPUs the batched forms above keep the
# device busy, so it is not used there either. The buffers, and results of 32 MiB or more, come from
# _memory, which keeps their memory for the next call (freed and allocated again, it would be faulted
# in afresh every time).
_FAST_MIN_N = 512  # the torch ops pay off from here; the compiled kernel at any length


def _use_fast_path(q: Any, k: Any, v: Any, causal: bool, method: str, phi: Any) -> bool:
    if not B.is_torch(q) or q.device.type != "cpu":
        return False
    if causal and method != "chunked":
        return False
    torch = B.torch_module()
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return False
    return int(k.shape[-2]) >= _FAST_MIN_N or (causal and native.supports(q, phi))


def _fast_cpu(q: Any, k: Any, v: Any, phi: Any, eps: float, C: int, causal: bool) -> tuple[Any, Any]:
    """q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v) -> out (..., N_q, d_v), den (..., N_q)."""
    torch = B.torch_module()
    lead, n_q, d, d_v = tuple(q.shape[:-2]), int(q.shape[-2]), int(q.shape[-1]), int(v.shape[-1])
    Q = q.reshape((-1, n_q, d)).contiguous()  # (B, N_q, d)
    K = k.reshape((-1, int(k.shape[-2]), d)).contiguous()
    V = v.reshape((-1, int(v.shape[-2]), d_v)).contiguous()
    with torch.no_grad():
        if causal:
            out, den = _chunked_cpu(Q, K, V, phi, eps, min(C, n_q))
        else:
            out, den = _noncausal_cpu(Q, K, V, phi, eps)
    return out.reshape(lead + (n_q, d_v)), den.reshape(lead + (n_q,))


def _results(nb: int, n: int, d_v: int, like: Any) -> tuple[Any, Any]:
    """out: (nb, n, d_v) and den: (nb, n), in one allocation from _memory (den alone, 512 KiB at
    N = 16,384, was above glibc's mmap threshold and at times faulted in afresh on every call)."""
    flat = _memory.empty((nb * n * (d_v + 1),), like)
    return flat[: nb * n * d_v].view(nb, n, d_v), flat[nb * n * d_v :].view(nb, n)


def _noncausal_cpu(Q: Any, K: Any, V: Any, phi: Any, eps: float) -> tuple[Any, Any]:
    """Q: (B, N_q, d), K: (B, N_k, d), V: (B, N_k, d_v) -> out (B, N_q, d_v), den (B, N_q)."""
    torch = B.torch_module()
    nb, n_q, n_k, d = (int(s) for s in (*Q.shape[:2], K.shape[1], Q.shape[2]))
    d_v, f = int(V.shape[-1]), phi.output_dim(d)
    out, den = _results(nb, n_q, d_v, V)
    L = _BLOCK_TOKENS
    bufs = _memory.scratch(V, S=(f, d_v), z=(f,), feats=(L, f), tmp=(L, d))
    S, z, feats, tmp = bufs["S"], bufs["z"], bufs["feats"], bufs["tmp"]
    for b in range(nb):
        S.zero_()
        z.zero_()
        for s in range(0, n_k, L):  # S = phi(K)^T V, z = sum_j phi(k_j), a block of keys at a time
            e = min(s + L, n_k)
            fk = phi.into(K[b, s:e], feats[: e - s], tmp[: e - s])  # (L, f)
            S.addmm_(fk.T, V[b, s:e])
            z.add_(fk.sum(0))
        for s in range(0, n_q, L):  # then every block of queries
            e = min(s + L, n_q)
            fq = phi.into(Q[b, s:e], feats[: e - s], tmp[: e - s])
            o, dn = out[b, s:e], den[b, s:e]
            torch.mm(fq, S, out=o)  # phi(q_i)^T S
            torch.mv(fq, z, out=dn)  # phi(q_i) . z
            o.mul_(dn.clamp_min(eps).reciprocal_()[:, None])
    return out, den


def _chunked_cpu(Q: Any, K: Any, V: Any, phi: Any, eps: float, C: int) -> tuple[Any, Any]:
    """Q, K: (B, N, d), V: (B, N, d_v) -> out (B, N, d_v), den (B, N); torch, CPU, no grad.

    All sequences advance together, a block of G chunks at a time (at most ``_BLOCK_ROWS`` rows of
    ``B x tokens``; many sequences are taken a group at a time).
    """
    nb, n = int(Q.shape[0]), int(Q.shape[1])
    out, den = _results(nb, n, int(V.shape[-1]), V)
    if native.supports(Q, phi):
        native.chunked(Q, K, V, phi, eps, C, out, den)
        return out, den
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
    bufs = _memory.scratch(V, S=(L // C + 1, nb, f, d_v), z=(L // C + 1, nb, f), fq=(rows * f,),
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
    torch = B.torch_module()
    nb, G, c = int(Q.shape[0]), v.G, v.c
    phi.into(Q.view(nb, G, c, -1), v.fq_seq, v.tmp_seq)
    phi.into(K.view(nb, G, c, -1), v.fk_seq, v.tmp_seq)
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
