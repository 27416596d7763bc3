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


def clamp(den: np.ndarray, eps: float | None = EPS, absolute: bool = False) -> np.ndarray:
    """max(den, eps), or a typical wrong clamp: none (eps=None), or of |den| (absolute=True)."""
    den = np.abs(den) if absolute else den
    return den if eps is None else np.maximum(den, eps)


def row_normalize(a: np.ndarray, v: np.ndarray, eps: float | None = EPS,
                  absolute: bool = False) -> np.ndarray:
    # a: (..., N_q, N_k) scores, v: (..., N_k, d_v); eps=None: no clamp; absolute: clamp |den|
    return (a @ v) / clamp(a.sum(-1), eps, absolute)[..., None]


def causal_mask(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))


NO_PHI = ("you left out phi: q k^T is not the kernel (and can be negative). Apply phi to q and to k "
          "first.")

ABS_CLAMP = ("you clamped |den| instead of den (np.maximum(np.abs(den), eps)): with signed features "
             "(the identity map) a denominator can be negative, and the clamp max(den, 1e-6) "
             "replaces it by eps; taking |den| flips its sign instead.")

FLOAT_COUNT = ("you computed the count in floating point (np.float32, float(...), or `/`) and "
               "converted it to an int: floats hold every integer only up to 2**24 (float32) or "
               "2**53 (float64), so a large count comes out rounded. Multiply the arguments as "
               "Python ints: `*` only, no float on the way.")


def float32_count(*factors) -> int:
    """A product of counts computed in float32, as a typical wrong answer converts it back."""
    out = np.float32(1)
    for f in factors:
        out = out * np.float32(f)
    return int(out)


def float64_count(*factors) -> int:
    """The same product computed in float64 (exact only below 2**53)."""
    out = 1.0
    for f in factors:
        out *= float(f)
    return int(out)
