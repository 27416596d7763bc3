"""The blocked torch engine of causal linear attention: the chunked form, forward and backward, a block
of chunks at a time, on any device.

The chunked form of :func:`linattn_core.linear.causal_chunked` (inside a chunk of ``C`` tokens the
masked ``C x C`` products, across chunks the state), with each torch op covering a whole block of
chunks of every sequence, so that the fixed cost of an op is paid rarely while the block's scores
``(rows x C)`` and states ``(chunks x d_phi x d_v)`` stay small. :func:`forward` gives the outputs (the
speed tier's causal torch form without autograd, and the forward pass of the autograd Function of
:mod:`linattn_core.linear_grad`); :func:`backward` gives the gradients of the same inputs, the equations
of :mod:`linattn_core.linear_grad` (its reference, token by token, is what the tests hold it to)
arranged the same way: it runs the state recurrence again and keeps only the state at the start of each
block (``N / L`` states of ``d_phi x d_v``, ``L`` tokens a block), then walks the blocks from the last to
the first, recomputing inside each block the per-chunk states, the scores and the outputs, and carrying
the suffix states ``R, r`` backwards. Nothing per token is kept beyond the inputs, and never an
``N x d_phi x d_v`` tensor. A decay (``S_t = g_t S_{t-1} + phi(k_t) v_t^T``, one gate per token) scales
every pair by ``exp(b_i - b_j)``, ``b_i = sum_{l<=i} log g_l``; every exponent taken is <= 0.

For an elementwise feature map the inputs are ``q`` and ``k`` themselves: ``phi`` is applied a block at
a time, in the backward too, so neither ``phi(q)`` nor its gradient is ever stored whole. Its own
gradient is ``dphi/dx`` times the features' gradient: for the maps whose derivative is known (elu+1,
relu, relu+1, softplus) ``phi`` and ``dphi/dx`` come from one pass over the block
(:func:`linattn_core.feature_maps.feature_slope`); for any other map from ordinary autograd on that
block. The backward is written with differentiable torch ops, so second derivatives (double backward)
work too; :func:`forward` writes into its results and runs without autograd.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _backend as ops
from ..feature_maps import FeatureMap, feature_slope
from . import pages

__all__ = ["backward", "forward"]

# Tokens per block of chunks: the block's scores, (rows x C), and states, (chunks x d_phi x d_v),
# stay small while each torch op still covers many chunks (the fixed cost of an op is paid rarely).
_BLOCK_ROWS = 2048


def _blocks(n: int, C: int, nb: int) -> list[tuple[int, int, int]]:
    """Token ranges ``[a, b)`` of whole chunks of ``c`` tokens, about ``_BLOCK_ROWS / nb`` tokens
    each, then the shorter last chunk on its own: ``[(a, b, c), ...]``."""
    L = max(C, _BLOCK_ROWS // nb // C * C)
    full = n // C * C
    blocks = [(a, min(a + L, full), C) for a in range(0, full, L)]
    if full < n:
        blocks.append((full, n, n - full))
    return blocks


def _chunks(x: Any, a: int, b: int, c: int, copy: bool = True) -> Any:
    """Tokens ``[a, b)`` of ``x: (nb, N, w)`` as chunks: ``(nb, G, c, w)``, contiguous (one bmm takes
    them) unless ``copy=False`` (a strided view, for a map that writes fresh features anyway)."""
    view = x[:, a:b].reshape(int(x.shape[0]), (b - a) // c, c, int(x.shape[-1]))
    return view.contiguous() if copy else view


class _Decay:
    """The decay factors of a block, from ``lam``: the cumulative log-gate inside each chunk.

    lam: (nb, G, c) -> D (nb, G, c, c): ``exp(lam_i - lam_j)`` for ``j <= i``, else 0;
    into (nb, G, c, 1): ``exp(lam_i)``, from the chunk's start to token i; tail (nb, G, c, 1):
    ``exp(lam_last - lam_j)``, from token j to the chunk's end; gamma (nb, G): the whole chunk's.
    Every exponent is <= 0: nothing overflows however long the sequence.
    """

    def __init__(self, lam: Any, mask: Any) -> None:
        torch = ops.torch_module()
        into = torch.exp(lam)
        if float(-lam[..., -1].detach().min()) < 0.5 * math.log(torch.finfo(lam.dtype).max):
            # exp(lam_i - lam_j) = exp(lam_i) exp(-lam_j): c exponentials instead of c x c, several
            # times faster; safe while no factor, nor the product above the diagonal that the mask
            # then zeroes, can overflow (lam is <= 0 and falls along the chunk, its lowest is last)
            self.D = into[..., :, None] * torch.exp(-lam)[..., None, :] * mask.to(lam.dtype)
        else:
            self.D = torch.exp(torch.where(mask, lam[..., :, None] - lam[..., None, :], -math.inf))
        self.into = into[..., None]
        self.tail = torch.exp(lam[..., -1:] - lam)[..., None]
        self.gamma = torch.exp(lam[..., -1])


def _decay(log_g: Any, a: int, b: int, c: int, mask: Any) -> _Decay | None:
    if log_g is None:
        return None
    lam = log_g[:, a:b].reshape(int(log_g.shape[0]), (b - a) // c, c).cumsum(-1)  # (nb, G, c)
    return _Decay(lam, mask)


def _scan(S0: Any, parts: Any, decay: _Decay | None) -> tuple[Any, Any]:
    """States before each chunk and after the block: ``S_{g+1} = gamma_g S_g + parts_g``.

    S0: (nb, *s), parts: (nb, G, *s) -> before (nb, G, *s), after (nb, *s).
    (G adds of nb states: torch's cumsum along a middle dimension is far slower on a CPU.)
    """
    torch = ops.torch_module()
    G = int(parts.shape[1])
    states = [S0]
    for g in range(G):
        decayed = states[-1] if decay is None else _gamma(decay, g, S0) * states[-1]
        states.append(decayed + parts[:, g])
    return torch.stack(states[:G], 1), states[G]


def _scan_back(R_end: Any, parts: Any, decay: _Decay | None) -> tuple[Any, Any]:
    """Suffix states after each chunk and before the block: ``R_{g-1} = gamma_g R_g + parts_g``.

    R_end: (nb, *s) (all later blocks), parts: (nb, G, *s) -> after (nb, G, *s), before (nb, *s)
    """
    torch = ops.torch_module()
    G = int(parts.shape[1])
    states = [R_end]  # states[-1]: the state after chunk g, walking back
    for g in range(G - 1, -1, -1):
        decayed = states[-1] if decay is None else _gamma(decay, g, R_end) * states[-1]
        states.append(decayed + parts[:, g])
    return torch.stack(states[G - 1 :: -1], 1), states[G]


def _gamma(decay: _Decay, g: int, like: Any) -> Any:
    """The decay over chunk g, shaped to scale states like ``like: (nb, *s)``."""
    return decay.gamma[:, g].reshape((-1,) + (1,) * (like.dim() - 1))


def _mm(x: Any, y: Any, add: Any = None, fresh: bool = False) -> Any:
    """Products chunk by chunk, ``add + x @ y``: (nb, G, m, k) @ (nb, G, k, n) -> (nb, G, m, n).

    One bmm (it takes transposed operands as they are, where a 4-D matmul would copy them); ``add``
    (broadcast to the result) is added inside it, which saves a pass over the result. A ``fresh``
    ``add`` (a temporary of the result's shape that nothing reads afterwards) becomes the result,
    accumulated in place, when no graph is being recorded: that saves copying it.
    """
    torch = ops.torch_module()
    lead, x, y = tuple(x.shape[:2]), x.flatten(0, 1), y.flatten(0, 1)
    if add is None:
        out = torch.bmm(x, y)
    elif fresh and not torch.is_grad_enabled():
        out = add.flatten(0, 1).baddbmm_(x, y)
    else:
        out = torch.baddbmm(add.flatten(0, 1), x, y)
    return out.unflatten(0, lead)


def _masked(A: Any, decay: _Decay | None) -> Any:
    """Scores or their gradients inside chunks, (nb, G, c, c): keep ``j <= i``, decayed."""
    return A.tril_() if decay is None else A * decay.D


def _T(x: Any) -> Any:
    return x.transpose(-1, -2)


def _decayed(x: Any, factor: Any, decay: _Decay | None) -> Any:
    """``x * decay.<factor>`` (one of D, into, tail); ``x`` itself without decay."""
    return x if decay is None else x * getattr(decay, factor)


def _block_forward(Q: Any, K: Any, V: Any, decay: _Decay | None, S0: Any, z0: Any,
                   with_num: bool = True) -> tuple:
    """One block: Q, K: (nb, G, c, f), V: (nb, G, c, d_v); S0: (nb, f, d_v), z0: (nb, f) or None,
    the state before it.

    -> scores A (nb, G, c, c) (masked, decayed), num (nb, G, c, d_v) (None unless ``with_num``), den
    (nb, G, c) or None, the states before each chunk (S: (nb, G, f, d_v), z: (nb, G, f)) and after
    the block.
    """
    A = _masked(_mm(Q, _T(K)), decay)  # (nb, G, c, c)
    Kt = _decayed(K, "tail", decay)  # phi(k_j), decayed to the chunk's end
    S_before, S_after = _scan(S0, _mm(_T(Kt), V), decay)
    num = None  # inside the chunk + before it
    if with_num:
        num = _mm(A, V, add=_decayed(_mm(Q, S_before), "into", decay), fresh=True)
    if z0 is None:
        return A, num, None, (S_before, None), (S_after, None)
    z_before, z_after = _scan(z0, Kt.sum(-2), decay)  # (nb, G, f)
    # phi(q_i) . z as a row times a matrix, (1 x f) @ (f x c): several times faster than a column
    Qz = _mm(z_before[:, :, None], _T(Q))[:, :, 0]  # (nb, G, c)
    den = A.sum(-1) + (Qz if decay is None else Qz * decay.into[..., 0])
    return A, num, den, (S_before, z_before), (S_after, z_after)


def _features(phi: FeatureMap | None, x: Any) -> Any:
    """phi(x) of a block, (..., d) -> (..., f), a fresh contiguous tensor."""
    if phi is None:
        return x.contiguous()
    known = feature_slope(phi)
    return phi(x).contiguous() if known is None else known(x, False)[0]


def _dim(phi: FeatureMap | None, x: Any) -> int:
    return phi.output_dim(int(x.shape[-1])) if phi is not None else int(x.shape[-1])


def _zero_state(X: Any, f: int, d_v: int, normalize: bool) -> tuple[Any, Any]:
    """``S = 0: (nb, f, d_v)`` and ``z = 0: (nb, f)`` (None when there is no denominator)."""
    nb = int(X.shape[0])
    return X.new_zeros((nb, f, d_v)), (X.new_zeros((nb, f)) if normalize else None)


def forward(x_q: Any, x_k: Any, v: Any, log_g: Any, phi: FeatureMap | None, eps: float, C: int,
            normalize: bool) -> tuple[Any, Any]:
    """The chunked forward, a block of chunks at a time: out (..., N, d_v), den (..., N) or None.

    x_q, x_k: (..., N, d) the inputs of ``phi`` (its features when ``phi`` is None), v: (..., N, d_v),
    log_g: (..., N) or None. Runs without autograd: each block is written into the results.
    """
    torch = ops.torch_module()
    lead, n, d_v = tuple(v.shape[:-2]), int(v.shape[-2]), int(v.shape[-1])
    X_q, X_k, V, lg, nb = _flat(x_q, x_k, v, log_g)
    out = pages.empty((nb, n, d_v), V)  # (nb, N, d_v): a result of its own, large ones on huge pages
    den = V.new_empty((nb, n)) if normalize else None
    S, z = _zero_state(X_q, _dim(phi, X_q), d_v, normalize)
    for a, b, c in _blocks(n, C, nb):
        mask = ops.causal_mask(c, X_q)
        Q, K = (_features(phi, _chunks(X, a, b, c, copy=False)) for X in (X_q, X_k))
        _, num, block_den, _, (S, z) = _block_forward(Q, K, _chunks(V, a, b, c), _decay(lg, a, b, c, mask),
                                                      S, z)
        rows = out[:, a:b].view(nb, (b - a) // c, c, d_v)  # (nb, G, c, d_v): this block's outputs
        if normalize:
            den[:, a:b] = block_den.reshape(nb, b - a)
            recip = block_den.clamp_min(eps).reciprocal_()[..., None]  # (nb, G, c, 1): mul is faster than div
            torch.mul(num, recip, out=rows)
        else:
            rows.copy_(num)
    return out.reshape(lead + (n, d_v)), (den.reshape(lead + (n,)) if normalize else None)


def _flat(x_q: Any, x_k: Any, v: Any, log_g: Any) -> tuple:
    """Leading dims flattened: (nb, N, .) and log_g (nb, N) (or None); and nb."""
    n = int(v.shape[-2])
    X_q, X_k = x_q.reshape(-1, n, int(x_q.shape[-1])), x_k.reshape(-1, n, int(x_k.shape[-1]))
    V = v.reshape(-1, n, int(v.shape[-1]))
    lg = None if log_g is None else log_g.reshape(-1, n)
    return X_q, X_k, V, lg, int(V.shape[0])


def backward(x_q: Any, x_k: Any, v: Any, log_g: Any, dout: Any, phi: FeatureMap | None, eps: float,
             C: int, normalize: bool) -> tuple[Any, Any, Any, Any]:
    """Gradients with respect to ``x_q, x_k, v, log_g`` (``None`` for ``log_g`` when it is None).

    x_q, x_k: (..., N, d), v, dout: (..., N, d_v), log_g: (..., N) or None, as for :func:`forward`.
    Pass 1 runs the state recurrence forwards and keeps the state at the start of each block; pass 2
    walks the blocks backwards (the formulas: :mod:`linattn_core.linear_grad`).
    """
    create_graph = ops.torch_module().is_grad_enabled()  # double backward: keep the graph of these ops
    X_q, X_k, V, lg, nb = _flat(x_q, x_k, v, log_g)
    dOut = dout.reshape(V.shape)  # (nb, N, d_v)
    n, f, d_v = int(V.shape[1]), _dim(phi, X_q), int(V.shape[-1])
    blocks = _blocks(n, C, nb)
    # pass 1: (S, z) at the start of each block (N / L states of f x d_v)
    S, z = _zero_state(X_q, f, d_v, normalize)
    starts = []
    for a, b, c in blocks:
        starts.append((S, z))
        S, z = _advance(S, z, phi, X_k, V, lg, a, b, c)
    # pass 2: from the last block to the first, carrying the suffix states (R, r)
    grads = _Grads(X_q, X_k, V, lg, create_graph)
    R, r = _zero_state(X_q, f, d_v, normalize)
    for (a, b, c), (S0, z0) in zip(reversed(blocks), reversed(starts), strict=True):
        mask = ops.causal_mask(c, X_q)
        decay = _decay(lg, a, b, c, mask)
        (Q, xq), (K, xk) = (_features_grad(phi, _chunks(X, a, b, c, copy=False), create_graph)
                            for X in (X_q, X_k))
        Vc = _chunks(V, a, b, c)
        A, _, den, before, _ = _block_forward(Q, K, Vc, decay, S0, z0, with_num=False)
        dQ, dK, dV, (R, r) = _block_backward(Q, K, Vc, A, den, eps, before, _chunks(dOut, a, b, c),
                                             decay, (R, r))
        grads.put(a, b, phi, (Q, xq, dQ), (K, xk, dK), dV)
    dx_q, dx_k, dv, dlog_g = grads.result()
    return (dx_q.reshape(x_q.shape), dx_k.reshape(x_k.shape), dv.reshape(v.shape),
            None if log_g is None else dlog_g.reshape(log_g.shape))


def _advance(S: Any, z: Any, phi: FeatureMap | None, X_k: Any, V: Any, lg: Any, a: int, b: int,
             c: int) -> tuple[Any, Any]:
    """The state after tokens ``[a, b)`` from the state before them: S (nb, f, d_v), z (nb, f) or None.

    Without decay ``S + sum_j phi(k_j) v_j^T`` is one product over the whole block; a decay needs the
    chunks (each chunk's contribution decays by the later chunks' gamma).
    """
    if lg is None:
        K = _features(phi, X_k[:, a:b])  # (nb, L, f)
        S = ops.torch_module().baddbmm(S, _T(K), V[:, a:b])  # V read in place: (nb, L, d_v)
        return S, (None if z is None else z + K.sum(-2))
    decay = _decay(lg, a, b, c, ops.causal_mask(c, X_k))
    Kt = _decayed(_features(phi, _chunks(X_k, a, b, c, copy=False)), "tail", decay)
    S = _scan(S, _mm(_T(Kt), _chunks(V, a, b, c)), decay)[1]
    return S, (None if z is None else _scan(z, Kt.sum(-2), decay)[1])


def _features_grad(phi: FeatureMap | None, x: Any, create_graph: bool) -> tuple[Any, Any]:
    """phi of a block and what maps the features' gradient back to x: dphi/dx (a tensor) for a map
    known to :func:`linattn_core.feature_maps.feature_slope`, else the input and the features with the
    graph of phi alone (a tuple)."""
    if phi is None:
        return x.contiguous(), None
    known = feature_slope(phi)
    if known is not None and not create_graph:  # double backward differentiates phi by autograd
        return known(x, True)
    torch = ops.torch_module()
    with torch.enable_grad():
        x_in = x if create_graph else x.detach().requires_grad_()
        feats = phi(x_in)
    return (feats if create_graph else feats.detach()), (x_in, feats)


def _block_backward(Q: Any, K: Any, V: Any, A: Any, den: Any, eps: float, before: tuple, dout: Any,
                    decay: _Decay | None, later: tuple) -> tuple:
    """One block backwards.

    Q, K: (nb, G, c, f), V, dout: (nb, G, c, d_v), A: (nb, G, c, c) the masked, decayed scores, den:
    (nb, G, c) or None, before: the states (S, z) before each chunk, later: the suffix states
    (R: (nb, f, d_v), r: (nb, f)) of the later blocks -> dQ, dK (nb, G, c, f), dV (nb, G, c, d_v)
    and the suffix states before the block.
    """
    (S_before, z_before), (R_end, r_end) = before, later
    c_i = None if den is None else den.clamp_min(eps)[..., None]  # (nb, G, c, 1)
    g = dout if den is None else dout / c_i  # a_i = dL/dnum_i: (nb, G, c, d_v)
    P = _mm(g, _T(V))  # (nb, G, c, c): a_i . v_j
    dQ_earlier = _decayed(_mm(g, _T(S_before)), "into", decay)  # S_i a_i from the earlier chunks
    with_eta = None
    if den is not None:
        # eta_i = -(a_i . num_i) / c_i with a_i . num_i = sum_j A_ij (a_i . v_j) + phi(q_i) . (S_i a_i):
        # from the products already at hand, without recomputing num
        a_num = (A * P).sum(-1) + (Q * dQ_earlier).sum(-1)
        with_eta = (-a_num / c_i[..., 0] * (den >= eps))[..., None]  # (nb, G, c, 1); 0 where clamped
        P = P + with_eta  # P_ij = a_i . v_j + eta_i
        dQ_earlier = dQ_earlier + _decayed(with_eta * z_before[:, :, None], "into", decay)
    P = _masked(P, decay)
    dQ = _mm(P, K, add=dQ_earlier, fresh=True)
    Qi = _decayed(Q, "into", decay)  # phi(q_i), decayed from the chunk's start
    R_after, R_before = _scan_back(R_end, _mm(_T(Qi), g), decay)  # (nb, G, f, d_v)
    r_after, r_before = None, None
    if with_eta is not None:  # r_j = sum_{i>=j} eta_i phi(q_i): (nb, G, f)
        r_after, r_before = _scan_back(r_end, _mm(_T(Qi), with_eta)[..., 0], decay)
    # R_j v_j + r_j from the later chunks: (nb, G, c, f)
    dK_later = _mm(V, _T(R_after), add=None if with_eta is None else r_after[:, :, None])
    dK = _mm(_T(P), Q, add=_decayed(dK_later, "tail", decay), fresh=True)
    dV = _mm(_T(A), g, add=_decayed(_mm(K, R_after), "tail", decay), fresh=True)
    return dQ, dK, dV, (R_before, r_before)


class _Grads:
    """Collects the blocks' gradients: written into whole tensors, or (double backward) kept as
    differentiable pieces and joined at the end. Maps features' gradients through phi's autograd."""

    def __init__(self, X_q: Any, X_k: Any, V: Any, lg: Any, create_graph: bool) -> None:
        torch = ops.torch_module()
        self.create_graph, self.decay = create_graph, lg is not None
        self.pieces: list[tuple] = []
        if not create_graph:
            self.whole = [torch.empty_like(X_q), torch.empty_like(X_k), torch.empty_like(V)]
            self.dB = torch.empty_like(lg) if lg is not None else None

    def put(self, a: int, b: int, phi: FeatureMap | None, q: tuple, k: tuple, dV: Any) -> None:
        torch = ops.torch_module()
        nb = int(dV.shape[0])
        rows = []
        dB = None
        if self.decay:  # d b_l = phi(q_l) . dphi(q_l) - phi(k_l) . dphi(k_l)
            dB = ((q[0] * q[2]).sum(-1) - (k[0] * k[2]).sum(-1)).reshape(nb, b - a)
        for i, (_, x, dF) in enumerate((q, k)):
            dF = dF.reshape(nb, b - a, int(dF.shape[-1]))
            if ops.is_torch(x) and not self.create_graph:  # dphi/dx: dX = dphi/dx * dF, into the result
                torch.mul(dF, x.reshape(dF.shape), out=self.whole[i][:, a:b])
                dF = None
            elif x is not None:
                x_in, f = x
                dF = torch.autograd.grad(f, x_in, dF.reshape(f.shape), create_graph=self.create_graph)[0]
            rows.append(None if dF is None else dF.reshape(nb, b - a, int(dF.shape[-1])))
        rows.append(dV.reshape(nb, b - a, int(dV.shape[-1])))
        if self.create_graph:
            self.pieces.append((*rows, dB))
            return
        for whole, piece in zip(self.whole, rows, strict=True):
            if piece is not None:
                whole[:, a:b] = piece
        if dB is not None:
            self.dB[:, a:b] = dB

    def result(self) -> tuple[Any, Any, Any, Any]:
        torch = ops.torch_module()
        if self.create_graph:
            parts = list(zip(*reversed(self.pieces), strict=True))  # blocks came last to first
            dq, dk, dv = (torch.cat(p, 1) for p in parts[:3])
            dB = torch.cat(parts[3], 1) if self.decay else None
        else:
            (dq, dk, dv), dB = self.whole, self.dB
        # b_l = sum_{t<=l} log g_t, so d log g_t = sum_{l>=t} d b_l (a suffix sum)
        dlog_g = None if dB is None else dB.flip(-1).cumsum(-1).flip(-1)
        return dq, dk, dv, dlog_g
