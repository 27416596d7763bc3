"""Small numpy helpers shared by the references and the typical mistakes of several chapters."""

from __future__ import annotations

import numpy as np

from .inputs import EPS


def t(x: np.ndarray) -> np.ndarray:
    """Transpose the last two axes (batch dimensions pass through)."""
    return np.swapaxes(x, -1, -2)


def softmax_rows(s: np.ndarray, axis: int = -1) -> np.ndarray:
    s = s - s.max(axis=axis, keepdims=True)
    w = np.exp(s)
    return w / w.sum(axis=axis, keepdims=True)


def row_normalize(a: np.ndarray, v: np.ndarray, eps: float | None = EPS) -> np.ndarray:
    # a: (..., N_q, N_k) scores, v: (..., N_k, d_v); eps=None: no clamp
    den = a.sum(-1) if eps is None else np.maximum(a.sum(-1), eps)
    return (a @ v) / den[..., None]


def causal_mask(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))


NO_PHI = ("you left out phi: q k^T is not the kernel (and can be negative). Apply phi to q and to k "
          "first.")
