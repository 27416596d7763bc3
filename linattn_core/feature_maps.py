"""Feature maps ``phi``: the kernel ``phi(q) . phi(k)`` that replaces ``exp(q . k / sqrt(d))``.

A feature map is a small object: ``phi(x)`` maps ``x: (..., N, d)`` to ``(..., N, d_phi)``.

====================  ==========  =======================================================
name                  ``d_phi``   features
====================  ==========  =======================================================
``"identity"``        ``d``       ``x`` (not positive: denominators can be <= 0)
``"elu+1"``           ``d``       ``elu(x) + 1`` (strictly positive; Katharopoulos et al.)
``"relu"``            ``d``       ``max(x, 0)`` (non-negative; a row can be all zeros)
``"softplus"``        ``d``       ``log(1 + exp(x))`` (strictly positive)
``"performer"``       ``m``       FAVOR+ positive random features (Choromanski et al.)
``"cosformer"``       ``2 d``     ReLU features re-weighted by ``cos``/``sin`` of the position
====================  ==========  =======================================================

Attention functions ask a map for *both* sides at once with :meth:`FeatureMap.pair`, because two maps
need more than ``x``: cosFormer needs token positions, and the stabilised Performer subtracts
different constants from queries and keys (constants that cancel in the normalised output).
Any plain callable ``phi(x)`` works too; it is used for queries and keys alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _backend as B

__all__ = [
    "FEATURE_MAPS",
    "CallableFeatureMap",
    "CosFormer",
    "EluPlusOne",
    "FeatureMap",
    "Identity",
    "Performer",
    "ReLU",
    "Softplus",
    "get_feature_map",
]

# exp() of a stabiliser shift is clipped here so that float32 products stay finite (e^40 ~ 2e17).
_MAX_SHIFT = 40.0
_LOG2E = 1.0 / math.log(2.0)


class FeatureMap:
    """Base class: ``phi(x: (..., N, d)) -> (..., N, d_phi)``.

    Attributes
    ----------
    d_phi : int or None
        The feature dimension when it is fixed; ``None`` when it follows the input (``d_phi = d``
        for the elementwise maps). :meth:`output_dim` gives it for a given ``d``.
    positive : bool
        True when every feature is > 0, so every denominator ``phi(q) . z`` is > 0.
    elementwise : bool
        True when ``phi`` acts on each token alone, the same way at every position (so it can be
        applied a block of tokens at a time, and to queries and keys alike).
    normalised_only : bool
        True when ``phi(q_i)`` and ``phi(k_j)`` carry data-dependent constant factors that cancel
        only in a normalised output (the stabilised Performer). Forms that do not normalise refuse
        such a map (see :func:`require_exact_products`).
    """

    name: str = "feature map"
    d_phi: int | None = None
    positive: bool = False
    elementwise: bool = False
    normalised_only: bool = False

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d_phi)
        raise NotImplementedError

    def output_dim(self, d: int) -> int:
        """``d_phi`` for inputs of dimension ``d``."""
        return self.d_phi if self.d_phi is not None else d

    def into(self, x: Any, out: Any, tmp: Any) -> Any:
        """Write ``phi(x)`` into ``out`` (torch, no autograd); ``tmp``, shaped like ``x``, is scratch.

        The CPU fast path calls this on a block of tokens at a time. Maps that can, override it so
        that no block-sized temporary is allocated (fresh memory costs page faults every block).
        """
        return out.copy_(self(x))

    def check_input_dim(self, d: int) -> None:
        """Raise ``ValueError`` when this map cannot take inputs whose last dim is ``d``."""

    def pair(self, q: Any, k: Any, *, causal: bool = False) -> tuple[Any, Any]:
        """Features of queries and keys for one attention call.

        q: (..., N_q, d), k: (..., N_k, d) -> (..., N_q, d_phi), (..., N_k, d_phi).
        """
        return self(q), self(k)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(FeatureMap):
    """``phi(x) = x``: plain (unnormalised-softmax-free) linear attention; denominators can be <= 0."""

    name = "identity"
    elementwise = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        return x

    def into(self, x: Any, out: Any, tmp: Any) -> Any:
        return out.copy_(x)


class EluPlusOne(FeatureMap):
    """``phi(x) = elu(x) + 1``: ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise; always > 0."""

    name = "elu+1"
    elementwise = True
    positive = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        if B.is_torch(x):
            torch = B.torch_module()
            if torch.is_grad_enabled() and x.requires_grad:
                return torch.nn.functional.elu(x) + 1
            return self.into(x, torch.empty_like(x), torch.empty_like(x))
        # exp(min(x, 0)) so the unused branch cannot overflow
        return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))

    def into(self, x: Any, out: Any, tmp: Any) -> Any:
        # exp(min(x, 0)) + max(x, 0): the same function as elu(x) + 1. The exp is taken as
        # exp2(log2(e) * min(x, 0)): on CPUs exp2 runs about 1.7x faster than exp (and 3x faster than
        # the expm1 inside elu), and this map is a visible part of the cost of linear attention.
        # (Half precision keeps exp: there the rounding of log2(e) * x would cost visible accuracy.)
        torch = B.torch_module()
        if x.dtype in (torch.float32, torch.float64):
            torch.clamp(x, max=0, out=out).mul_(_LOG2E).exp2_()
        else:
            torch.clamp(x, max=0, out=out).exp_()
        return out.add_(torch.clamp(x, min=0, out=tmp))


class ReLU(FeatureMap):
    """``phi(x) = max(x, 0)``: non-negative, and a query with no positive entry has a zero row."""

    name = "relu"
    elementwise = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        if B.is_torch(x):
            return B.torch_module().relu(x)
        return np.maximum(x, 0)

    def into(self, x: Any, out: Any, tmp: Any) -> Any:
        return B.torch_module().clamp(x, min=0, out=out)


class Softplus(FeatureMap):
    """``phi(x) = log(1 + exp(x))``, computed without overflow; always > 0 (until it underflows)."""

    name = "softplus"
    elementwise = True
    positive = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        if B.is_torch(x):
            return B.torch_module().nn.functional.softplus(x)
        return np.logaddexp(0, x)


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
    cancel in the normalised output (as the max-shift does in softmax); the *values* of ``phi`` are
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
            d = B.check_positive_int(d, "d")
        self.num_features = B.check_positive_int(num_features, "num_features")
        if kind not in ("positive", "trig"):
            raise ValueError(f"kind must be 'positive' or 'trig', got {kind!r}")
        self.kind = kind
        self.orthogonal = B.check_flag(orthogonal, "orthogonal")
        self.stabilize = B.check_flag(stabilize, "stabilize")
        self.positive = kind == "positive"
        self.d_phi = self.num_features * (1 if self.positive else 2)
        self.normalised_only = self.stabilize  # the shifts cancel only after normalisation
        self.d = d
        self.seed = seed
        self.projection: np.ndarray | None = None
        self._cache: dict = {}
        if d is not None:
            self.redraw(seed)

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
        key = (B.is_torch(x), str(x.dtype), str(getattr(x, "device", "")))
        if key not in self._cache:
            self._cache[key] = B.from_numpy(self.projection, x)
        return self._cache[key]

    def _parts(self, x: Any) -> tuple[Any, Any]:
        """``phi(x) = base * exp(logits - shift)``; returns ``(base, logits)`` before any shift.

        positive: base = 1/sqrt(m) (a number), logits = W x' - |x'|^2/2: (..., N, m)
        trig:     base = [sin W x', cos W x'] / sqrt(m): (..., N, 2m), logits = |x'|^2/2: (..., N, 1)
        """
        # x: (..., N, d)
        self.check_input_dim(int(x.shape[-1]))
        xs = x * (self.d ** -0.25)
        proj = xs @ B.swap_last(self._W(x))  # (..., N, m)
        half_sq = B.total(xs * xs, -1, keepdims=True) / 2  # (..., N, 1)
        if self.positive:
            return 1.0 / math.sqrt(self.num_features), proj - half_sq
        xp = B.lib(x)
        base = B.concat([xp.sin(proj), xp.cos(proj)], -1) / math.sqrt(self.num_features)
        return base, half_sq

    @staticmethod
    def _exp(base: Any, logits: Any, shift: Any) -> Any:
        return base * B.lib(logits).exp(logits - shift)

    def _shift(self, logits: Any, axes: int | tuple[int, ...]) -> Any:
        if not self.stabilize:
            return 0.0
        m = B.amax(logits, axes)
        return m.detach() if B.is_torch(m) else m

    def queries(self, x: Any) -> Any:
        """Query features: each row shifted by its own maximum."""
        base, logits = self._parts(x)
        return self._exp(base, logits, self._shift(logits, -1))

    def keys(self, x: Any) -> Any:
        """Key features: one shift for all tokens and features (per batch entry)."""
        base, logits = self._parts(x)
        return self._exp(base, logits, self._shift(logits, (-2, -1)))

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
        r = B.amax(lk, -1)  # (..., N, 1)
        if B.is_torch(r):
            r = B.torch_module().cummax(r.detach(), dim=-2).values
        else:
            r = np.maximum.accumulate(r, axis=-2)
        extra = B.clamp_min(r - R, -_MAX_SHIFT)  # = -(R - r_i) clipped, so exp stays finite
        fq = self._exp(fq_base, lq, self._shift(lq, -1) + extra)
        return fq, self._exp(fk_base, lk, R)

    def __repr__(self) -> str:
        return (
            f"Performer(d={self.d}, num_features={self.num_features}, seed={self.seed},"
            f" orthogonal={self.orthogonal}, stabilize={self.stabilize}, kind={self.kind!r})"
        )


class CosFormer(FeatureMap):
    """cosFormer: ``phi(x_i) = [relu(x_i) cos(pi i / 2M), relu(x_i) sin(pi i / 2M)]``, ``d_phi = 2 d``.

    Then ``phi(q_i) . phi(k_j) = relu(q_i) . relu(k_j) cos(pi (i - j) / 2M)``: a locality bias that
    decays with the distance ``|i - j| < M``. Positions are 0-based; ``offset`` is the position of
    ``x[..., 0, :]`` (streaming feeds one token at a time). ``max_len`` is ``M``; when it is not set,
    a direct call uses ``M = offset + N`` and the attention functions use ``M = max(N_q, N_k)``.
    A position at or past ``M`` is a ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import get_feature_map
    >>> phi = get_feature_map("cosformer", max_len=16)
    >>> phi(np.ones((4, 3))).shape
    (4, 6)
    """

    name = "cosformer"

    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = None if max_len is None else B.check_positive_int(max_len, "max_len")

    def output_dim(self, d: int) -> int:
        return 2 * d

    def features(self, x: Any, *, offset: int = 0, length: int | None = None) -> Any:
        """``x: (..., N, d) -> (..., N, 2d)`` for tokens at positions ``offset .. offset + N - 1``."""
        n = int(x.shape[-2])
        M = self.max_len or length or offset + n
        if offset < 0 or offset + n > M:
            raise ValueError(
                f"cosformer: positions {offset}..{offset + n - 1} do not fit in max_len M={M}"
                " (a position must be < M); construct it with a larger max_len"
            )
        angle = np.pi * np.arange(offset, offset + n) / (2 * M)  # (N,)
        cos = B.from_numpy(np.cos(angle)[:, None], x)  # (N, 1)
        sin = B.from_numpy(np.sin(angle)[:, None], x)
        r = ReLU()(x)
        return B.concat([r * cos, r * sin], -1)

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        return self.features(x, offset=offset)

    def pair(self, q: Any, k: Any, *, causal: bool = False) -> tuple[Any, Any]:
        M = max(int(q.shape[-2]), int(k.shape[-2]))
        return self.features(q, length=M), self.features(k, length=M)

    def __repr__(self) -> str:
        return f"CosFormer(max_len={self.max_len})"


class CallableFeatureMap(FeatureMap):
    """Wraps any callable ``fn(x) -> (..., N, d_phi)`` and checks what it returns."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def output_dim(self, d: int) -> int:
        probe = self(np.zeros((1, d)))
        return int(probe.shape[-1])

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        y = self.fn(x)
        if B.is_torch(x) != B.is_torch(y) or not hasattr(y, "shape"):
            raise TypeError(
                f"feature map {self.name!r} returned {type(y).__name__} for a"
                f" {type(x).__name__} input: it must return the same kind of array"
            )
        if tuple(y.shape[:-1]) != tuple(x.shape[:-1]):
            raise ValueError(
                f"feature map {self.name!r} maps shape {B.shape_str(x)} to {B.shape_str(y)}:"
                " it must keep every dim but the last, (..., N, d) -> (..., N, d_phi)"
            )
        return y

    def __repr__(self) -> str:
        return f"CallableFeatureMap({self.name})"


FEATURE_MAPS: dict[str, type[FeatureMap]] = {
    "identity": Identity,
    "elu+1": EluPlusOne,
    "relu": ReLU,
    "softplus": Softplus,
    "performer": Performer,
    "cosformer": CosFormer,
}


def get_feature_map(name: str, **options: Any) -> FeatureMap:
    """Build a feature map by name.

    Parameters
    ----------
    name : str
        One of ``"identity"``, ``"elu+1"``, ``"relu"``, ``"softplus"``, ``"performer"``,
        ``"cosformer"``.
    **options
        Passed to the class: ``d``, ``num_features``, ``seed``, ``orthogonal``, ``stabilize``,
        ``kind`` for ``"performer"``; ``max_len`` for ``"cosformer"``.

    Returns
    -------
    FeatureMap
        A callable ``phi(x: (..., N, d)) -> (..., N, d_phi)``.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import get_feature_map
    >>> phi = get_feature_map("elu+1")
    >>> phi(np.array([[-1.0, 0.0, 2.0]])).round(3)
    array([[0.368, 1.   , 3.   ]])
    """
    if not isinstance(name, str) or name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map {name!r}; choose one of {sorted(FEATURE_MAPS)}")
    cls = FEATURE_MAPS[name]
    try:
        return cls(**options)
    except TypeError as err:
        raise TypeError(f"feature map {name!r}: {err}") from None


def require_exact_products(phi: FeatureMap, where: str, option: str) -> None:
    """Refuse a map whose products ``phi(q) . phi(k)`` are the kernel only up to constants.

    ``where`` is the function, ``option`` its normalisation flag: called when that flag is False.
    """
    if phi.normalised_only:
        raise ValueError(
            f"{where}({option}=False) with {phi!r}: a stabilised map scales each query's and key's"
            " features by data-dependent constants that cancel only in a normalised output, so the"
            f" unnormalised result would be wrong. Build the map with stabilize=False, or pass {option}=True"
        )


def as_feature_map(feature_map: Any, d: int) -> FeatureMap:
    """Resolve ``feature_map=`` (a name, a :class:`FeatureMap` or any callable) for inputs of dim d."""
    if isinstance(feature_map, str):
        phi = get_feature_map(feature_map, d=d) if feature_map == "performer" else None
        phi = phi or get_feature_map(feature_map)
    elif isinstance(feature_map, FeatureMap):
        phi = feature_map
    elif callable(feature_map):
        phi = CallableFeatureMap(feature_map)
    else:
        raise TypeError(
            f"feature_map must be a name, a FeatureMap or a callable, got {type(feature_map).__name__}"
        )
    phi.check_input_dim(d)
    return phi
