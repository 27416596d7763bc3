"""The quadratic forms: softmax attention and the direct kernel attention reference.

Both build the full ``N_q x N_k`` score matrix on purpose: they are the readable references that
every linear-time form in :mod:`linattn_core.linear` is checked against.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from . import _backend as ops
from .feature_maps import FeatureMap, as_feature_map

__all__ = ["kernel_attention", "normalized", "softmax_attention", "warn_nonpositive"]


def softmax_attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    causal: bool = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> Any:
    """Softmax attention, ``softmax(q k^T * scale) v``, computed stably.

    Parameters
    ----------
    q : array or tensor, shape (..., N_q, d)
    k : array or tensor, shape (..., N_k, d)
    v : array or tensor, shape (..., N_k, d_v)
    causal : bool
        Query ``i`` sees keys ``j <= i`` (needs ``N_q == N_k``).
    scale : float, optional
        Score scale, ``1 / sqrt(d)`` by default.
    return_weights : bool
        Also return the attention weights.

    Returns
    -------
    out : shape (..., N_q, d_v)
        Same type, dtype and device as ``q``.
    weights : shape (..., N_q, N_k)
        Only with ``return_weights=True``; every row sums to 1.

    Notes
    -----
    Each row of scores is shifted by its maximum before ``exp`` (this changes nothing after the
    normalization and keeps ``exp`` from overflowing).

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import softmax_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 6, 4))
    >>> out, w = softmax_attention(q, k, v, causal=True, return_weights=True)
    >>> out.shape, bool(np.allclose(w.sum(-1), 1)), bool(np.allclose(out[:, 0], v[:, 0]))
    ((2, 6, 4), True, True)
    """
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)
    be = ops.check_qkv(q, k, v, causal=ops.check_flag(causal, "causal"))
    ops.check_flag(return_weights, "return_weights")
    scale = ops.check_scale(scale, int(q.shape[-1]))
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    scores = (q @ ops.swap_last(k)) * scale  # (..., N_q, N_k)
    if causal:
        mask = ops.causal_mask(int(q.shape[-2]), q)
        scores = ops.lib(q).where(mask, scores, -math.inf)
    scores = scores - ops.amax(scores, -1)  # every row has a finite max: the diagonal is never masked
    weights = ops.lib(q).exp(scores)
    weights = weights / ops.total(weights, -1, keepdims=True)
    out = be.to_output(weights @ v)  # (..., N_q, d_v)
    return (out, be.to_output(weights)) if return_weights else out



def normalized(num: Any, den: Any, eps: float) -> Any:
    """``num / max(den, eps)``, the stabiliser shared by every form.

    num: (..., N, d_v), den: (..., N) -> (..., N, d_v)
    """
    return num / ops.clamp_min(den, eps)[..., None]


def warn_nonpositive(den: Any, phi: FeatureMap, stacklevel: int = 3) -> None:
    """Warn once per call, with the count, when some denominators ``phi(q_i) . z`` are <= 0."""
    if phi.positive:
        return  # strictly positive features: nothing to count (and no device sync)
    bad = ops.count_nonpositive(den)
    if bad:
        warnings.warn(
            f"{bad} of {int(math.prod(den.shape))} denominators phi(q_i) . z were <= 0 with the"
            f" {phi.name!r} feature map; they were clamped to eps (the outputs stay finite but"
            " those rows are not a weighted average)",
            RuntimeWarning,
            stacklevel=stacklevel + 1,
        )


def kernel_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    causal: bool = False,
    eps: float = 1e-6,
    return_weights: bool = False,
) -> Any:
    """Kernel attention in its direct quadratic form: the reference for every linear form.

    ``A_ij = phi(q_i) . phi(k_j)`` (masked to ``j <= i`` if causal), then
    ``out_i = sum_j A_ij v_j / max(sum_j A_ij, eps)``.

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
        Denominators are clamped to at least ``eps``.
    return_weights : bool
        Also return the normalized weights ``A_ij / max(sum_j A_ij, eps)``.

    Returns
    -------
    out : shape (..., N_q, d_v)
    weights : shape (..., N_q, N_k), only with ``return_weights=True``

    Warns
    -----
    RuntimeWarning
        When some denominators are <= 0 (possible with signed features such as ``"identity"``).

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import kernel_attention, linear_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 7, 4))
    >>> out, w = kernel_attention(q, k, v, causal=True, return_weights=True)
    >>> bool(np.allclose(out, linear_attention(q, k, v, causal=True))), w.shape
    (True, (2, 7, 7))
    """
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)
    be = ops.check_qkv(q, k, v, causal=ops.check_flag(causal, "causal"))
    eps = ops.check_eps(eps)
    ops.check_flag(return_weights, "return_weights")
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    phi_q, phi_k = phi.pair(q, k, causal=causal)  # (..., N_q, d_phi), (..., N_k, d_phi)
    A = phi_q @ ops.swap_last(phi_k)  # (..., N_q, N_k): every pairwise score
    if causal:
        A = ops.lib(A).where(ops.causal_mask(int(q.shape[-2]), q), A, 0.0)
    den = ops.total(A, -1)  # (..., N_q)
    warn_nonpositive(den, phi)
    weights = A / ops.clamp_min(den, eps)[..., None]  # (..., N_q, N_k), rows sum to 1 when den >= eps
    out = be.to_output(weights @ v)
    return (out, be.to_output(weights)) if return_weights else out
