"""Shared fixtures for every tier of the suite: backends, devices, seeded inputs, feature maps, hypothesis.

Conventions (from CONTRIBUTING.md): seeded randomness only, float64 to check exactness, signed inputs
(``standard_normal``) so sign bugs in feature maps cannot hide, CUDA only when it is available.
"""

from __future__ import annotations

import os

# OpenMP threads that sleep as soon as they are idle. With the default (spin a while first), each
# torch.set_num_threads() call (the memory tests measure on one thread, then restore two) leaves the
# thread pool spinning between ops: every later test of many small ops (gradcheck) then ran 15-40x
# slower on a busy 2-core machine. Read when torch loads, so it is set before any test imports it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# --- hypothesis ------------------------------------------------------------------------------------
# "ci" (the default) is derandomized and small enough that the whole core suite stays well under
# 3 minutes on 2 cores; "dev" searches harder. Choose with HYPOTHESIS_PROFILE=dev.
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=300, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --- backends and devices --------------------------------------------------------------------------
BACKENDS = ["numpy", "torch"]


def _devices() -> list[str]:
    try:
        import torch
    except ImportError:  # torch is an optional dependency of the package
        return ["cpu"]
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


DEVICES = _devices()

# Every named feature map of the contract. "performer" and "cosformer" need options, so tests build
# them through the ``feature_map`` fixture below rather than passing the bare name.
FEATURE_MAPS = ["identity", "elu+1", "relu", "softplus", "performer", "cosformer"]
# Maps whose implied attention weights are non-negative (phi >= 0).
NONNEG_MAPS = ["elu+1", "relu", "softplus", "performer", "cosformer"]
# The causal methods of linear_attention.
CAUSAL_METHODS = ["recurrent", "cumsum", "chunked", "auto"]


# Batch shapes: none, (batch,), (batch, heads).
BATCHES = [(), (2,), (2, 3)]


def batch_id(batch) -> str:
    """Test-id fragment for a batch shape: ``B0``, ``B2``, ``B2x3``."""
    return "B" + ("x".join(map(str, batch)) or "0")


TIERS = ("core", "fast", "lm", "tools", "book", "machine")


def pytest_collection_modifyitems(config, items):
    """Mark every test with its tier, the folder it lives in (``pytest -m core``), and every test that
    reads the built site (its fixtures include ``site``) with ``site``: ``make test`` runs those after
    the build and the others while the site builds."""
    root = Path(__file__).resolve().parent
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(root).parts
        if parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
        if "site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.site)


def pytest_generate_tests(metafunc):
    """Tests that take ``map_name``, ``nonneg_map``, ``causal_method`` or ``batch`` run once per
    value (ids read like ``elu+1``, ``chunked``, ``B2x3``), unless the test parametrizes it itself
    or a fixture of that name is defined closer to the test."""
    explicit = set(getattr(metafunc, "_arg2fixturedefs", {}))
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        explicit.update(names.replace(" ", "").split(",") if isinstance(names, str) else names)
    for arg, values, ids in (("map_name", FEATURE_MAPS, None), ("nonneg_map", NONNEG_MAPS, None),
                             ("causal_method", CAUSAL_METHODS, None),
                             ("batch", BATCHES, [batch_id(b) for b in BATCHES])):
        if arg in metafunc.fixturenames and arg not in explicit:
            metafunc.parametrize(arg, values, ids=ids)


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240607)


# --- inputs ----------------------------------------------------------------------------------------
def randn(shape, *, seed: int, backend: str = "numpy", dtype: str = "float64", device: str = "cpu",
          scale: float = 1.0, shift: float = 0.0):
    """Seeded signed normal values ``shift + scale * N(0, 1)`` as a numpy array or torch tensor.

    The values are drawn in float64 by numpy, so the numpy and torch inputs for a seed are the same
    numbers (up to the rounding to ``dtype``).
    """
    x = shift + scale * np.random.default_rng(seed).standard_normal(tuple(shape))
    if backend == "numpy":
        return x.astype(dtype)
    if backend == "torch":
        import torch

        return torch.from_numpy(x).to(device=device, dtype=getattr(torch, dtype))
    raise ValueError(f"unknown backend {backend!r}")


def qkv(batch=(), n_q=16, n_k=None, d=8, d_v=5, *, seed=0, shift=0.0, **kw):
    """``q: (*batch, n_q, d)``, ``k: (*batch, n_k, d)``, ``v: (*batch, n_k, d_v)``, seeded."""
    n_k = n_q if n_k is None else n_k
    batch = tuple(batch)
    q = randn((*batch, n_q, d), seed=seed, shift=shift, **kw)
    k = randn((*batch, n_k, d), seed=seed + 1, shift=shift, **kw)
    v = randn((*batch, n_k, d_v), seed=seed + 2, **kw)
    return q, k, v


def shift_for(map_name: str) -> float:
    """Input mean per map. The identity map's denominators ``q . sum_j k_j`` can be near zero for
    zero-mean inputs, which makes any two summation orders disagree by an unbounded factor (that
    behaviour is tested on its own in test_core_errors.py); a positive mean keeps the comparisons
    well conditioned while the values stay signed."""
    return 1.0 if map_name == "identity" else 0.0


def make_feature_map(name: str, d: int, *, num_features: int = 32, seed: int = 0, max_len=None,
                     **options):
    """A feature map from the contract's ``get_feature_map``, with the options it needs: performer
    gets ``d``, ``num_features`` and ``seed``; cosformer gets ``max_len`` when one is given (the
    other maps ignore it, so a test can pass it for every map)."""
    from linattn_core import get_feature_map

    if name == "performer":
        return get_feature_map("performer", d=d, num_features=num_features, seed=seed, **options)
    if name == "cosformer" and max_len is not None:
        options["max_len"] = max_len
    return get_feature_map(name, **options)


@pytest.fixture(scope="session")
def mk() -> SimpleNamespace:
    """The seeded input and feature-map factories: ``mk.randn``, ``mk.qkv``, ``mk.feature_map``,
    ``mk.shift_for``. Session-scoped, so hypothesis tests may use it too."""
    return SimpleNamespace(randn=randn, qkv=qkv, feature_map=make_feature_map, shift_for=shift_for)
