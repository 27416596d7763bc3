"""The feature-map protocol and the maps that need nothing but ``x``: each with its derivative.

``phi(x)`` maps ``x: (..., N, d)`` to ``(..., N, d_phi)``. The elementwise maps also give
``phi(x)`` and ``dphi/dx`` in one pass (:meth:`value_and_slope`, torch): the backward pass of
the speed tier's torch engine (:mod:`linattn_core.fast.blocked`) multiplies the features' gradient by it,
block by block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _backend as ops

__all__ = ["CallableFeatureMap", "CosFormer", "EluPlusOne", "FeatureMap", "Identity", "ReLU", "ReLUPlusOne",
           "Softplus", "feature_slope"]


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
    normalized_only : bool
        True when ``phi(q_i)`` and ``phi(k_j)`` carry data-dependent constant factors that cancel
        only in a normalized output (the stabilised Performer). Forms that do not normalize refuse
        such a map (see :func:`require_exact_products`).
    """

    name: str = "feature map"
    d_phi: int | None = None
    positive: bool = False
    elementwise: bool = False
    normalized_only: bool = False

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

    def value_and_slope(self, x: Any, slope: bool = True) -> tuple[Any, Any]:
        """``phi(x)`` and ``dphi/dx`` (None unless ``slope``) in one pass, for a torch tensor ``x``.

        Only the elementwise maps whose derivative is written out have it; :func:`feature_slope`
        says which (any other map is differentiated by autograd).
        """
        raise NotImplementedError(f"{self!r} has no written-out derivative: use autograd")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Identity(FeatureMap):
    """``phi(x) = x``: plain (unnormalized-softmax-free) linear attention; denominators can be <= 0."""

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
        if ops.is_torch(x):
            torch = ops.torch_module()
            return torch.where(x > 0, x + 1, torch.exp(torch.clamp(x, max=0)))
        return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))

    def value_and_slope(self, x: Any, slope: bool = True) -> tuple[Any, Any]:
        # phi = exp(min(x, 0)) + max(x, 0); dphi/dx = exp(min(x, 0)): 1 for x > 0, phi otherwise
        torch = ops.torch_module()
        e = torch.clamp(x, max=0).exp_()
        return torch.clamp(x, min=0).add_(e), e


class ReLU(FeatureMap):
    """``phi(x) = max(x, 0)``: non-negative, and a query with no positive entry has a zero row."""

    name = "relu"
    elementwise = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        if ops.is_torch(x):
            return ops.torch_module().relu(x)
        return np.maximum(x, 0)

    def value_and_slope(self, x: Any, slope: bool = True) -> tuple[Any, Any]:
        # phi = max(x, 0), dphi/dx = [x > 0]
        return ops.torch_module().clamp(x, min=0), ((x > 0).to(x.dtype) if slope else None)


class ReLUPlusOne(FeatureMap):
    """``phi(x) = max(x, 0) + 1``: ReLU shifted so that every feature, hence every denominator, is > 0."""

    name = "relu+1"
    elementwise = True
    positive = True

    def __call__(self, x: Any, *, offset: int = 0) -> Any:
        # x: (..., N, d) -> (..., N, d)
        return ReLU()(x) + 1

    def value_and_slope(self, x: Any, slope: bool = True) -> tuple[Any, Any]:
        F, dF = ReLU().value_and_slope(x, slope)  # the same slope as ReLU
        return F.add_(1), dF


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
        if ops.is_torch(x):
            return ops.torch_module().logaddexp(x, x.new_zeros(()))
        return np.logaddexp(0, x)

    def value_and_slope(self, x: Any, slope: bool = True) -> tuple[Any, Any]:
        # phi = log(1 + exp(x)), dphi/dx = sigmoid(x)
        torch = ops.torch_module()
        return torch.logaddexp(x, x.new_zeros(())), (torch.sigmoid(x) if slope else None)


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
        self.max_len = None if max_len is None else ops.check_positive_int(max_len, "max_len")

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
        cos = ops.from_numpy(np.cos(angle)[:, None], x)  # (N, 1)
        sin = ops.from_numpy(np.sin(angle)[:, None], x)
        r = ReLU()(x)
        return ops.concat([r * cos, r * sin], -1)

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
        if ops.is_torch(x) != ops.is_torch(y) or not hasattr(y, "shape"):
            raise TypeError(
                f"feature map {self.name!r} returned {type(y).__name__} for a"
                f" {type(x).__name__} input: it must return the same kind of array"
            )
        if tuple(y.shape[:-1]) != tuple(x.shape[:-1]):
            raise ValueError(
                f"feature map {self.name!r} maps shape {ops.shape_str(x)} to {ops.shape_str(y)}:"
                " it must keep every dim but the last, (..., N, d) -> (..., N, d_phi)"
            )
        return y

    def __repr__(self) -> str:
        return f"CallableFeatureMap({self.name})"


# The maps whose derivative is written out, by exact type: a subclass may change the formula.
_WITH_SLOPE = (EluPlusOne, ReLU, ReLUPlusOne, Softplus)


def feature_slope(phi: Any) -> Callable[[Any, bool], tuple[Any, Any]] | None:
    """``phi.value_and_slope`` for the elementwise maps whose derivative is known (elu+1, relu, relu+1,
    softplus; exact types only); None for any other map (differentiate it with autograd)."""
    return phi.value_and_slope if type(phi) in _WITH_SLOPE else None
