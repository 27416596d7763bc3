"""FAVOR+ random features (Choromanski et al. 2021): a feature map whose products estimate softmax's kernel.

``phi(q) . phi(k)`` is an unbiased estimate of ``exp(q . k / sqrt(d))``; see :class:`Performer`.
The projection is drawn with numpy, so numpy and torch inputs get the same features.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _backend as ops
from .base import FeatureMap

__all__ = ["Performer", "draw_projection"]

# exp() of a stabiliser shift is clipped here so that float32 products stay finite (e^40 ~ 2e17).
_MAX_SHIFT = 40.0


def draw_projection(m: int, d: int, seed: int | None, orthogonal: bool = True) -> np.ndarray:
    """The Performer's random matrix ``W: (m, d)``, drawn with numpy (the same for numpy and torch).

    Orthogonal: stacked ``d x d`` blocks whose rows are orthonormal (QR of a Gaussian matrix with the
    signs of ``diag(R)`` folded into ``Q``, which makes ``Q`` uniformly distributed), then each row
    rescaled to a length drawn from chi(d), so each row has the marginal law of a Gaussian vector.
    Otherwise: i.i.d. standard normal rows.
    """
    rng = np.random.default_rng(seed)
    if not orthogonal:
        return rng.standard_normal((m, d))
    blocks = []
    for _ in range(-(-m // d)):
        Q, R = np.linalg.qr(rng.standard_normal((d, d)))
        signs = np.where(np.diag(R) >= 0, 1.0, -1.0)
        blocks.append((Q * signs).T)  # rows orthonormal
    W = np.concatenate(blocks, axis=0)[:m]
    norms = np.sqrt(rng.chisquare(d, size=m))
    return W * norms[:, None]


class Performer(FeatureMap):
    """FAVOR+ random features for the softmax kernel ``exp(q . k / sqrt(d))``.

    With ``x' = x * d**-0.25`` and the rows ``w_i`` of :attr:`projection` (``m x d``):

    - ``kind="positive"`` (default): ``phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m)``, ``d_phi = m``;
      every feature is > 0.
    - ``kind="trig"``: ``phi(x) = exp(|x'|^2 / 2) [sin(W x'), cos(W x')] / sqrt(m)``, ``d_phi = 2 m``;
      the classic random Fourier estimator. Its features are signed, so denominators can be <= 0:
      it is here to show why FAVOR+ uses the positive one.

    Without stabilisation ``phi(q) . phi(k)`` is an unbiased estimate of ``exp(q . k / sqrt(d))``.
    With ``stabilize=True`` (default) the exponent is shifted before ``exp`` so inputs of magnitude
    1e3 stay finite: queries by their own row maximum, keys by one maximum over all tokens and
    features (per batch entry). Both are constants in the key index ``j`` for a given query, so they
    cancel in the normalized output (as the max-shift does in softmax); the *values* of ``phi`` are
    then scaled by that constant. In causal attention a query additionally uses the maximum over its
    own prefix of keys, which is again a constant in ``j`` for that query; it is what a streaming
    state can reproduce (see :class:`linattn_core.LinearAttentionState`).

    Parameters
    ----------
    d : int, optional
        Input dimension. When omitted it is taken from the first input, and the projection is drawn
        then.
    num_features : int
        ``m``, the number of random features (256 by default).
    seed : int
        Seed of the numpy generator that draws the projection.
    orthogonal : bool
        Orthogonal random features (lower variance) rather than i.i.d. Gaussian rows.
    stabilize : bool
        Shift exponents by maxima (see above).
    kind : {"positive", "trig"}
        Positive (FAVOR+) or trigonometric random features.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import get_feature_map
    >>> phi = get_feature_map("performer", d=8, num_features=64, seed=0, stabilize=False)
    >>> x = np.random.default_rng(0).standard_normal((5, 8)) * 0.3
    >>> phi(x).shape, phi.projection.shape
    ((5, 64), (64, 8))
    """

    name = "performer"

    def __init__(
        self,
        d: int | None = None,
        num_features: int = 256,
        *,
        seed: int | None = 0,
        orthogonal: bool = True,
        stabilize: bool = True,
        kind: str = "positive",
    ) -> None:
        if d is not None:
            d = ops.check_positive_int(d, "d")
        self.num_features = ops.check_positive_int(num_features, "num_features")
        if kind not in ("positive", "trig"):
            raise ValueError(f"kind must be 'positive' or 'trig', got {kind!r}")
        self.kind = kind
        self.orthogonal = ops.check_flag(orthogonal, "orthogonal")
        self.stabilize = ops.check_flag(stabilize, "stabilize")
        self.positive = kind == "positive"
        self.d_phi = self.num_features * (1 if self.positive else 2)
        self.d = d
        self.seed = seed
        self.projection: np.ndarray | None = None
        self._cache: dict = {}
        if d is not None:
            self.redraw(seed)

    @property
    def normalized_only(self) -> bool:
        """The stabiliser's shifts cancel only in a normalized output."""
        return self.stabilize

    def redraw(self, seed: int | None = None) -> None:
        """Draw a new random projection (``seed=None``: fresh entropy, not reproducible)."""
        if self.d is None:
            raise ValueError("Performer.redraw needs the input dimension: construct it with d=...")
        self.seed = seed
        self.projection = draw_projection(self.num_features, self.d, seed, self.orthogonal)
        self._cache = {}

    def check_input_dim(self, d: int) -> None:
        if self.d is None:
            self.d = d
            self.redraw(self.seed)
        elif d != self.d:
            raise ValueError(
                f"this Performer feature map was built for d={self.d}, but the input has last dim {d}"
            )

    def _W(self, x: Any) -> Any:
        # the projection on x's backend, dtype and device (cached)
        key = (ops.is_torch(x), str(x.dtype), str(getattr(x, "device", "")))
        if key not in self._cache:
            self._cache[key] = ops.from_numpy(self.projection, x)
        return self._cache[key]

    def _parts(self, x: Any) -> tuple[Any, Any]:
        """``phi(x) = base * exp(logits - shift)``; returns ``(base, logits)`` before any shift.

        positive: base = 1/sqrt(m) (a number), logits = W x' - |x'|^2/2: (..., N, m)
        trig:     base = [sin W x', cos W x'] / sqrt(m): (..., N, 2m), logits = |x'|^2/2: (..., N, 1)
        """
        # x: (..., N, d)
        self.check_input_dim(int(x.shape[-1]))
        xs = x * (self.d ** -0.25)
        proj = xs @ ops.swap_last(self._W(x))  # (..., N, m)
        half_sq = ops.total(xs * xs, -1, keepdims=True) / 2  # (..., N, 1)
        if self.positive:
            return 1.0 / math.sqrt(self.num_features), proj - half_sq
        xp = ops.lib(x)
        base = ops.concat([xp.sin(proj), xp.cos(proj)], -1) / math.sqrt(self.num_features)
        return base, half_sq

    @staticmethod
    def _exp(base: Any, logits: Any, shift: Any) -> Any:
        return base * ops.lib(logits).exp(logits - shift)

    def _shift(self, logits: Any, axes: int | tuple[int, ...]) -> Any:
        if not self.stabilize:
            return 0.0
        m = ops.amax(logits, axes)
        return m.detach() if ops.is_torch(m) else m

    def queries(self, x: Any, *, offset: int = 0) -> Any:
        """Query features: each row shifted by its own maximum."""
        base, logits = self._parts(x)
        return self._exp(base, logits, self._shift(logits, -1))

    def keys(self, x: Any, *, offset: int = 0) -> Any:
        """Key features: one shift for all tokens and features (per batch entry)."""
        base, logits = self._parts(x)
        return self._exp(base, logits, self._shift(logits, (-2, -1)))

    def running_keys(self, x: Any, shift: Any, *, offset: int = 0) -> tuple[Any, Any, Any]:
        """Key features shifted by the running maximum of the key exponents, as online softmax does.

        x: (..., N, d), shift: (...,) the maximum so far -> features (..., N, d_phi), the new maximum,
        and ``exp(old - new) <= 1``: the factor that puts the sums built so far in the new units.
        """
        if not self.stabilize:
            return self.keys(x), shift, None
        base, logits = self._parts(x)
        c = self._shift(logits, (-2, -1))[..., 0, 0]  # (...,): this block's maximum
        xp = ops.lib(c)
        new = xp.maximum(shift, c)
        return self._exp(base, logits, new[..., None, None]), new, xp.exp(shift - new)

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d_phi); the key-side stabiliser, safe for either side
        return self.keys(x)

    def pair(self, q: Any, k: Any, *, causal: bool = False) -> tuple[Any, Any]:
        # q: (..., N_q, d), k: (..., N_k, d) -> (..., N_q, d_phi), (..., N_k, d_phi)
        if not (causal and self.stabilize):
            return self.queries(q), self.keys(k)
        fq_base, lq = self._parts(q)
        fk_base, lk = self._parts(k)
        R = self._shift(lk, (-2, -1))  # (..., 1, 1): one key shift for the call
        # r_i = max of the key logits over tokens j <= i: the key shift a streaming state would use.
        # Query i gets the factor exp(R - r_i) (a constant in j, so it cancels), which makes its
        # effective key features exp(lk_j - r_i): never all tiny, so the clamp stays inactive.
        r = ops.amax(lk, -1)  # (..., N, 1)
        if ops.is_torch(r):
            r = ops.torch_module().cummax(r.detach(), dim=-2).values
        else:
            r = np.maximum.accumulate(r, axis=-2)
        extra = ops.clamp_min(r - R, -_MAX_SHIFT)  # = -(R - r_i) clipped, so exp stays finite
        fq = self._exp(fq_base, lq, self._shift(lq, -1) + extra)
        return fq, self._exp(fk_base, lk, R)

    def __repr__(self) -> str:
        return (
            f"Performer(d={self.d}, num_features={self.num_features}, seed={self.seed},"
            f" orthogonal={self.orthogonal}, stabilize={self.stabilize}, kind={self.kind!r})"
        )
