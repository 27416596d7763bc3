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
different constants from queries and keys (constants that cancel in the normalized output).
A streaming state asks for one token at a time, at its position: :meth:`FeatureMap.queries`,
:meth:`FeatureMap.running_keys`. Any plain callable ``phi(x)`` works too; it is used for queries and
keys alike. The maps and their protocol live in :mod:`.base`, the Performer in :mod:`.performer`;
this module is the registry.

:func:`as_feature_map` is the one resolver of ``feature_map=`` arguments: every function that takes
one, and the book's tools, call it.
"""

from __future__ import annotations

from typing import Any

from .base import (
    CallableFeatureMap,
    CosFormer,
    EluPlusOne,
    FeatureMap,
    Identity,
    ReLU,
    ReLUPlusOne,
    Softplus,
    feature_slope,
)
from .performer import Performer

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
    "as_feature_map",
    "feature_slope",
    "get_feature_map",
    "require_exact_products",
]

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

    ``where`` is the function, ``option`` its normalization flag: called when that flag is False.
    """
    if phi.normalized_only:
        raise ValueError(
            f"{where}({option}=False) with {phi!r}: a stabilised map scales each query's and key's"
            " features by data-dependent constants that cancel only in a normalized output, so the"
            f" unnormalized result would be wrong. Build the map with stabilize=False, or pass {option}=True"
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
