"""Decay and gating: a state that forgets, ``S_t = g_t S_{t-1} + phi(k_t) v_t^T``.

With a constant ``g_t = gamma`` (RetNet's retention) or a gate per step computed from the data
(Gated Linear Attention, Mamba-2's scalar gate), each earlier pair is down-weighted by the product
of the gates it has lived through::

    w_ij  = phi(q_i) . phi(k_j) * prod_{j < l <= i} g_l          (j <= i)
    out_i = sum_j w_ij v_j / max(sum_j w_ij, eps)

The normalizer decays with the state (``z_t = g_t z_{t-1} + phi(k_t)``); with ``normalize=False``
the output is the numerator alone, as RetNet and GLA use it (they normalize afterwards).

Three forms, like :mod:`linattn_core.linear`: the quadratic masked reference
:func:`decayed_kernel_attention`, and :func:`decayed_linear_attention` with ``method="recurrent"``
(the step loop) or ``"chunked"`` (masked ``C x C`` products inside a chunk, the decayed state carried
across). Products of gates are kept as sums of ``log g`` so that long sequences neither underflow
nor lose precision.
"""

from __future__ import annotations

import math
from typing import Any

from . import _backend as ops
from . import linear_grad
from .attention import normalized, warn_nonpositive
from .feature_maps import as_feature_map, require_exact_products

__all__ = ["DECAY_METHODS", "decayed_kernel_attention", "decayed_linear_attention"]

DECAY_METHODS = ("auto", "recurrent", "chunked")


def _log_gates(decay: Any, q: Any, be: ops.Backend) -> Any:
    """``log g_t`` for every step, ``(..., N)``: ``decay`` is one ``gamma`` or a gate per token, in (0, 1]."""
    gates = ops.per_token(decay, q, be, "decay", interval="(0, 1]", valid=lambda g: (g > 0) & (g <= 1),
                        array_name="decay gates")
    return ops.lib(gates).log(gates)


def _prepare(q: Any, k: Any, v: Any, feature_map: Any, decay: Any, normalize: bool, where: str) -> tuple:
    """Validate the inputs shared by both forms (before any work); return the features and log-gates.

    -> backend, phi, phi(q), phi(k): (..., N, d_phi), v in the compute dtype, log g: (..., N)
    """
    be = ops.check_qkv(q, k, v, causal=True)
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    if not normalize:
        require_exact_products(phi, where, "normalize")
    log_g = _log_gates(decay, q, be)
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    phi_q, phi_k = phi.pair(q, k, causal=True)
    return be, phi, phi_q, phi_k, v, log_g


def decayed_kernel_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    decay: Any = 0.9,
    normalize: bool = True,
    eps: float = 1e-6,
    return_weights: bool = False,
) -> Any:
    """Causal kernel attention with a decaying state, in its direct quadratic form (the reference).

    Parameters
    ----------
    q, k : array or tensor, shape (..., N, d)
    v : array or tensor, shape (..., N, d_v)
    feature_map : str, FeatureMap or callable
    decay : float in (0, 1], or array of gates with shape (..., N) and values in (0, 1]
        ``g_t``; ``1`` is plain causal linear attention.
    normalize : bool
        Divide by the decayed normalizer ``max(phi(q_i) . z_i, eps)`` (True) or return the numerator.
        The numerator is exact for any feature map whose products ``phi(q) . phi(k)`` are the kernel
        itself; a stabilised Performer's are so only up to per-query constants, which cancel in the
        normalized output alone, so ``normalize=False`` refuses it (``ValueError``): build it with
        ``stabilize=False`` for the raw numerator.
    eps : float
    return_weights : bool
        Also return the implied ``(..., N, N)`` weights (normalized when ``normalize`` is True).

    Returns
    -------
    out : shape (..., N, d_v), and the weights when asked for.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> out, w = decayed_kernel_attention(q, k, v, decay=0.5, return_weights=True)
    >>> bool(np.allclose(w.sum(-1), 1.0))
    True
    """
    # q, k: (..., N, d), v: (..., N, d_v)
    ops.check_flag(return_weights, "return_weights")
    eps, normalize = ops.check_eps(eps), ops.check_flag(normalize, "normalize")
    where = "decayed_kernel_attention"
    be, phi, phi_q, phi_k, v, log_g = _prepare(q, k, v, feature_map, decay, normalize, where)
    b = ops.cumsum(log_g, -1)  # b_i = sum_{l <= i} log g_l, so prod_{j < l <= i} g_l = exp(b_i - b_j)
    mask = ops.causal_mask(int(phi_q.shape[-2]), phi_q)
    xp = ops.lib(phi_q)
    gap = xp.where(mask, b[..., :, None] - b[..., None, :], -math.inf)  # -inf above the diagonal
    A = (phi_q @ ops.swap_last(phi_k)) * xp.exp(gap)  # (..., N, N)
    if normalize:
        den = ops.total(A, -1)
        warn_nonpositive(den, phi)
        A = A / ops.clamp_min(den, eps)[..., None]
    out = be.to_output(A @ v)
    return (out, be.to_output(A)) if return_weights else out


def decayed_linear_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    decay: Any = 0.9,
    normalize: bool = True,
    eps: float = 1e-6,
    method: str = "auto",
    chunk_size: int = 64,
    return_state: bool = False,
) -> Any:
    """Causal linear attention with a decaying state: the recurrence, or its chunkwise-parallel form.

    Same arguments as :func:`decayed_kernel_attention`, plus ``method`` (``"recurrent"``,
    ``"chunked"`` or ``"auto"``), ``chunk_size`` and ``return_state``: also return the final state
    ``(S, z)`` with shapes ``(..., d_phi, d_v)`` and ``(..., d_phi)``. Never builds an ``N x N`` array.
    (With a stabilised Performer, ``S`` and ``z`` share one constant factor per batch entry, which
    cancels in ``phi(q)^T S / phi(q) . z``.)

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 50, 4))
    >>> fast = decayed_linear_attention(q, k, v, decay=0.8, chunk_size=16)
    >>> bool(np.allclose(fast, decayed_kernel_attention(q, k, v, decay=0.8)))
    True
    """
    # q, k: (..., N, d), v: (..., N, d_v)
    if method not in DECAY_METHODS:
        raise ValueError(f"method must be one of {DECAY_METHODS}, got {method!r}")
    chunk_size = ops.check_positive_int(chunk_size, "chunk_size")
    ops.check_flag(return_state, "return_state")
    eps, normalize = ops.check_eps(eps), ops.check_flag(normalize, "normalize")
    where = "decayed_linear_attention"
    be, phi, phi_q, phi_k, v, log_g = _prepare(q, k, v, feature_map, decay, normalize, where)
    if not return_state and linear_grad.needs_grad(phi_q, phi_k, v, log_g):  # training: O(N) memory
        out = linear_grad.causal_linear_attention(phi_q, phi_k, v, phi, log_g=log_g, normalize=normalize,
                                                  eps=eps, chunk_size=chunk_size, features=True)
        return be.to_output(out)
    if method == "recurrent":
        num, den, S, z = _recurrent(phi_q, phi_k, v, log_g)
    else:
        num, den, S, z = _chunked(phi_q, phi_k, v, log_g, chunk_size)
    if normalize:
        warn_nonpositive(den, phi)
        out = normalized(num, den, eps)
    else:
        out = num
    out = be.to_output(out)
    return (out, (be.to_output(S), be.to_output(z))) if return_state else out


def _recurrent(phi_q: Any, phi_k: Any, v: Any, log_g: Any) -> tuple[Any, Any, Any, Any]:
    """The step loop: ``S_t = g_t S_{t-1} + phi(k_t) v_t^T``, ``z_t = g_t z_{t-1} + phi(k_t)``.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v), log_g: (..., N) -> num, den, S, z
    """
    f, d_v = int(phi_k.shape[-1]), int(v.shape[-1])
    lead = tuple(phi_k.shape[:-2])
    S, z = ops.zeros(lead + (f, d_v), phi_k), ops.zeros(lead + (f,), phi_k)
    g = ops.lib(log_g).exp(log_g)  # (..., N)
    nums, dens = [], []
    for t in range(int(phi_k.shape[-2])):
        k_t, v_t, q_t, g_t = phi_k[..., t, :], v[..., t, :], phi_q[..., t, :], g[..., t]
        S = g_t[..., None, None] * S + k_t[..., :, None] * v_t[..., None, :]
        z = g_t[..., None] * z + k_t
        nums.append((q_t[..., None, :] @ S)[..., 0, :])
        dens.append(ops.total(q_t * z, -1))
    return ops.stack(nums, -2), ops.stack(dens, -1), S, z


def _chunked(phi_q: Any, phi_k: Any, v: Any, log_g: Any, C: int) -> tuple[Any, Any, Any, Any]:
    """Chunkwise parallel form with decay, one chunk of ``C`` tokens at a time.

    Inside a chunk, with ``b_i`` the cumulative log-gate from the chunk's start::

        num_i = sum_{j <= i in chunk} (q_i . k_j) e^{b_i - b_j} v_j  +  e^{b_i} q_i^T S
        S    <- e^{b_last} S + sum_j e^{b_last - b_j} k_j v_j^T

    Every exponent is <= 0, so nothing overflows however long the sequence.
    """
    xp = ops.lib(phi_q)
    n, f, d_v = int(phi_q.shape[-2]), int(phi_q.shape[-1]), int(v.shape[-1])
    lead = tuple(phi_q.shape[:-2])
    S, z = ops.zeros(lead + (f, d_v), phi_k), ops.zeros(lead + (f,), phi_k)
    nums, dens = [], []
    for s in range(0, n, C):
        Q, K, V = phi_q[..., s : s + C, :], phi_k[..., s : s + C, :], v[..., s : s + C, :]
        b = ops.cumsum(log_g[..., s : s + C], -1)  # (..., c)
        c = int(b.shape[-1])
        gap = xp.where(ops.causal_mask(c, Q), b[..., :, None] - b[..., None, :], -math.inf)
        A = (Q @ ops.swap_last(K)) * xp.exp(gap)  # (..., c, c): decayed scores inside the chunk
        into = xp.exp(b)[..., None]  # (..., c, 1): decay from the chunk start to token i
        nums.append(A @ V + into * (Q @ S))
        dens.append(ops.total(A, -1) + into[..., 0] * (Q @ z[..., None])[..., 0])
        tail = xp.exp(b[..., -1:] - b)[..., :, None]  # (..., c, 1): decay from token j to the chunk end
        S = xp.exp(b[..., -1])[..., None, None] * S + ops.swap_last(K * tail) @ V
        z = xp.exp(b[..., -1])[..., None] * z + ops.total(K * tail, -2)
    return ops.concat(nums, -2), ops.concat(dens, -1), S, z
