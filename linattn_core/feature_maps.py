"""Feature maps ``phi``: the kernel ``phi(q) . phi(k)`` that replaces ``exp(q . k / sqrt(d))``.

A feature map is a small object: ``phi(x)`` maps ``x: (..., N, d)`` to ``(..., N, d_phi)``.

====================  ==========  =======================================================
name                  ``d_phi``   features
====================  ==========  =======================================================
``"identity"``        ``d``       ``x`` (not positive: denominators can be <= 0)
``"elu+1"``           ``d``       ``elu(x) + 1`` (strictly positive; Katharopoulos et al.)
``"relu"``            ``d``       ``max(x, 0)`` (non-negative; a row can be all zeros)
``"relu+1"``          ``d``       ``max(x, 0) + 1`` (strictly positive)
``"softplus"``        ``d``       ``log(1 + exp(x))`` (strictly positive)
``"performer"``       ``m``       FAVOR+ positive random features (Choromanski et al.)
``"cosformer"``       ``2 d``     ReLU features re-weighted by ``cos``/``sin`` of the position
====================  ==========  =======================================================

Attention functions ask a map for *both* sides at once with :meth:`FeatureMap.pair`, because two maps
need more than ``x``: cosFormer needs token positions, and the stabilised Performer subtracts
different constants from queries and keys (constants that cancel in the normalised output).
A streaming state asks for one token at a time, at its position: :meth:`FeatureMap.queries`,
:meth:`FeatureMap.running_keys`. Any plain callable ``phi(x)`` works too; it is used for queries and
keys alike. The Performer lives in :mod:`linattn_core.performer`.

:func:`as_feature_map` is the one resolver of ``feature_map=`` arguments: every function that takes
one, and the book's tools, call it.
"""

from __future__ import annotations

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
    "ReLUPlusOne",
    "Softplus",
    "get_feature_map",
]

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

    def check_input_dim(self, d: int) -> None:
        """Raise ``ValueError`` when this map cannot take inputs whose last dim is ``d``."""

    def pair(self, q: Any, k: Any, *, causal: bool = False) -> tuple[Any, Any]:
        """Features of queries and keys for one attention call.

        q: (..., N_q, d), k: (..., N_k, d) -> (..., N_q, d_phi), (..., N_k, d_phi).
        """
        return self.queries(q), self.keys(k)

    def queries(self, x: Any, *, offset: int = 0) -> Any:
        """Query features of tokens at positions ``offset .. offset + N - 1``: (..., N, d_phi)."""
        return self(x, offset=offset)

    def keys(self, x: Any, *, offset: int = 0) -> Any:
        """Key features of tokens at positions ``offset .. offset + N - 1``: (..., N, d_phi)."""
        return self(x, offset=offset)

    def running_keys(self, x: Any, shift: Any, *, offset: int = 0) -> tuple[Any, Any, Any]:
        """Key features for a running sum ``S, z`` that grows one block of tokens at a time.

        ``shift`` is what the map's stabiliser has seen so far, one number per batch entry (``-inf``
        before the first key). Returns ``(features, shift, rescale)``: the features (..., N, d_phi)
        in the units of the new ``shift``, and the factor (per batch entry) by which the sums built
        so far must be multiplied to be in those units, or ``None`` when they need none (every map
        but the stabilised Performer).
        """
        return self.keys(x, offset=offset), shift, None

    def check_streamable(self) -> None:
        """Raise ``ValueError`` when a streaming state cannot use this map (it needs to know more)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(FeatureMap):
    """``phi(x) = x``: plain (unnormalised-softmax-free) linear attention; denominators can be <= 0."""

    name = "identity"
    elementwise = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        return x


class EluPlusOne(FeatureMap):
    """``phi(x) = elu(x) + 1``: ``x + 1`` for ``x > 0``, ``exp(x)`` otherwise; always > 0."""

    name = "elu+1"
    elementwise = True
    positive = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        # exp(min(x, 0)) so the unused branch cannot overflow (and not elu(x) + 1, whose -1 + 1 rounds
        # the features of very negative x to 0)
        if B.is_torch(x):
            torch = B.torch_module()
            return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))
        return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


class ReLU(FeatureMap):
    """``phi(x) = max(x, 0)``: non-negative, and a query with no positive entry has a zero row."""

    name = "relu"
    elementwise = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        if B.is_torch(x):
            return B.torch_module().relu(x)
        return np.maximum(x, 0)


class ReLUPlusOne(FeatureMap):
    """``phi(x) = max(x, 0) + 1``: ReLU shifted so that every feature, hence every denominator, is > 0."""

    name = "relu+1"
    elementwise = True
    positive = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        return ReLU()(x) + 1


class Softplus(FeatureMap):
    """``phi(x) = log(1 + exp(x))``, computed without overflow; always > 0 (until it underflows).

    Both backends use ``logaddexp(x, 0) = max(x, 0) + log1p(exp(-|x|))``, so numpy and torch give the
    same values to rounding at every ``x`` (torch's own ``softplus`` returns ``x`` itself above 20),
    and the gradient is ``sigmoid(x)`` everywhere.
    """

    name = "softplus"
    elementwise = True
    positive = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        if B.is_torch(x):
            return B.torch_module().logaddexp(x, x.new_zeros(()))
        return np.logaddexp(0, x)


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

    def check_streamable(self) -> None:
        if self.max_len is None:
            raise ValueError(
                "streaming with the cosformer feature map needs its max_len (M), e.g."
                " get_feature_map('cosformer', max_len=1024): positions are unknown in advance"
            )

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


# The Performer builds on FeatureMap above; it is imported here, where the registry needs it.
from .performer import Performer, draw_projection  # noqa: E402, F401  (draw_projection: re-exported)

FEATURE_MAPS: dict[str, type[FeatureMap]] = {
    "identity": Identity,
    "elu+1": EluPlusOne,
    "relu": ReLU,
    "relu+1": ReLUPlusOne,
    "softplus": Softplus,
    "performer": Performer,
    "cosformer": CosFormer,
}


def get_feature_map(name: str, **options: Any) -> FeatureMap:
    """Build a feature map by name.

    Parameters
    ----------
    name : str
        One of ``"identity"``, ``"elu+1"``, ``"relu"``, ``"relu+1"``, ``"softplus"``,
        ``"performer"``, ``"cosformer"``.
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


def as_feature_map(feature_map: Any, d: int | None = None, **options: Any) -> FeatureMap:
    """The one resolver of ``feature_map=``: a name, a :class:`FeatureMap` or any callable.

    A name is built by :func:`get_feature_map` with ``options`` (the same defaults everywhere: a
    ``"performer"`` gets ``d`` from the inputs, 256 features, seed 0, stabilised); ``options`` are
    only for names. With ``d``, the map is checked against (or, for a Performer built without
    ``d``, fitted to) inputs of that last dim.
    """
    if isinstance(feature_map, str):
        phi = get_feature_map(feature_map, **options)
    elif options:
        raise TypeError(
            f"options {sorted(options)} only apply to a feature-map name, not to {type(feature_map).__name__}"
        )
    elif isinstance(feature_map, FeatureMap):
        phi = feature_map
    elif callable(feature_map):
        phi = CallableFeatureMap(feature_map)
    else:
        raise TypeError(
            f"feature_map must be a name, a FeatureMap or a callable, got {type(feature_map).__name__}"
        )
    if d is not None:
        phi.check_input_dim(d)
    return phi
