"""The inputs of the checks: cases, feature maps with readable names, seeded q, k, v.

Every input is float64 and seeded, so a check prints the same feedback on every run and machine.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# Batch dimensions used in the checks: (batch, heads).
BATCH = (2, 3)
# The library's default clamp of the denominator: max(den, eps).
EPS = 1e-6


class Phi:
    """A library feature map with a readable name (what the reader sees in the feedback).

    Calling it calls the library object; attribute access (``phi.d_phi``, ``phi.projection``) is
    forwarded to it.
    """

    def __init__(self, feature_map: Callable, label: str):
        self._fm = feature_map
        self.label = label

    def __call__(self, x):
        return self._fm(x)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy and pickle probe dunders before _fm exists
            raise AttributeError(name)
        return getattr(self._fm, name)

    def __repr__(self) -> str:
        return f"phi = {self.label}"


def lib_phi(phi: Any) -> Any:
    """The library's own feature map behind a :class:`Phi` (what the references pass on)."""
    return phi._fm if isinstance(phi, Phi) else phi


def elu_phi() -> Phi:
    from linattn_core import get_feature_map

    return Phi(get_feature_map("elu+1"), "elu+1")


def relu_phi() -> Phi:
    from linattn_core import get_feature_map

    return Phi(get_feature_map("relu"), "relu")


def identity_phi() -> Phi:
    from linattn_core import get_feature_map

    return Phi(get_feature_map("identity"), "identity (signed features)")


def performer_phi(d: int, m: int, seed: int) -> Phi:
    from linattn_core import get_feature_map

    fm = get_feature_map("performer", d=d, num_features=m, seed=seed, stabilize=False)
    return Phi(fm, f"performer (unstabilised, m = {m} random features)")


@dataclass
class Case:
    """One input of a check: the arguments and a line that describes them.

    ``batch_ndim`` counts the leading batch dimensions of every array argument (0: none), so that
    the checker can try the reader's function on one slice of a batched input.
    """

    title: str
    args: tuple
    batch_ndim: int = 0
    large: bool = False  # large-magnitude inputs: tests numerical stability
    group: str | None = None  # its group of inputs for partial credit (None: read from the rest)

    @property
    def batched(self) -> bool:
        return self.batch_ndim > 0

    def describe(self, names: Sequence[str]) -> str:
        parts = []
        for name, arg in zip(names, self.args, strict=False):
            if isinstance(arg, np.ndarray):
                parts.append(f"{name} {tuple(arg.shape)}")
            elif isinstance(arg, Phi):
                parts.append(repr(arg))
            else:
                parts.append(f"{name} = {arg!r}")
        return f"{self.title}: " + ", ".join(parts)

    def fresh_args(self) -> tuple:
        """Deep copies of the arguments (feature-map objects included)."""
        return copy.deepcopy(self.args)

    def first_slice(self) -> tuple:
        """Deep copies of the arguments with every batch index at 0 (same feature map)."""
        idx = (0,) * self.batch_ndim
        return tuple(a[idx].copy() if isinstance(a, np.ndarray) else a for a in self.fresh_args())


def qkv(rng: np.random.Generator, n_q: int, n_k: int, d: int = 4, d_v: int = 3,
        batch: tuple = (), scale: float = 1.0):
    # q: (*batch, n_q, d), k: (*batch, n_k, d), v: (*batch, n_k, d_v); signed values
    q = scale * rng.standard_normal((*batch, n_q, d))
    k = scale * rng.standard_normal((*batch, n_k, d))
    v = rng.standard_normal((*batch, n_k, d_v))
    return q, k, v


def zero_denominator_qkv(rng: np.random.Generator, n: int, d: int = 4, d_v: int = 3):
    """Inputs on which relu features give denominators at, near and far from zero.

    Query 0 is all negative (phi(q_0) = 0: denominator exactly 0), query 1 is tiny and positive
    (denominator between 0 and eps), the rest are ordinary; every key has a positive entry, so
    only the queries decide. Key 0 is all negative, so a causal prefix starts from z_0 = 0.
    """
    q, k, v = qkv(rng, n, n, d=d, d_v=d_v)
    q[0] = -np.abs(q[0]) - 0.1
    q[1] = np.where(np.arange(d) == 0, 1e-8, -1.0)
    k[1:, 0] = np.abs(k[1:, 0]) + 0.1
    k[0] = -np.abs(k[0]) - 0.1
    return q, k, v


def signed_qkv(rng: np.random.Generator, n: int, d: int = 4, d_v: int = 3):
    """Inputs on which the identity map gives negative denominators, none of them near the clamp.

    The sign of each query is chosen so that phi(q_t) . z_t (the causal denominator, z_t the sum of
    keys 0..t) alternates, positive at even t and negative at odd t; the last query's causal
    denominator is also its non-causal one. Every |phi(q_t) . z_t| is at least 0.1, so an answer
    that clamps |den| instead of den is far from the right one, and rounding cannot move a
    denominator across the clamp.
    """
    while True:
        q, k, v = qkv(rng, n, n, d=d, d_v=d_v)
        z = np.cumsum(k, axis=-2)                              # z_t: (n, d)
        den = np.einsum("nd,nd->n", q, z)
        want = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
        q = q * np.where(np.sign(den) == want, 1.0, -1.0)[:, None]
        total = q @ z[-1]                                      # the non-causal denominators
        if np.abs(den).min() >= 0.1 and np.abs(total).min() >= 0.1:
            return q, k, v


def signed_step(rng: np.random.Generator, n: int, d: int = 4, d_v: int = 3, g: float = 1.0):
    """A state after ``n`` identity-feature tokens (decayed by ``g``) and a token whose denominator
    phi(q_t) . z_new is negative, at most -0.1 (so clamping |den| is far from clamping den).

    Returns (S, z, q_t, k_t, v_t): S (d, d_v), z (d,), q_t, k_t (d,), v_t (d_v,).
    """
    S, z = np.zeros((d, d_v)), np.zeros(d)
    for k, v in zip(rng.standard_normal((n, d)), rng.standard_normal((n, d_v)), strict=True):
        S, z = g * S + np.outer(k, v), g * z + k
    while True:
        q_t, k_t, v_t = rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal(d_v)
        den = float(q_t @ (g * z + k_t))
        if abs(den) >= 0.1:
            return S, z, (q_t if den < 0 else -q_t), k_t, v_t


def attention_cases(seed: int, *, cross: bool = True, performer: bool = True,
                    with_phi: bool = True, signed: bool = True) -> list[Case]:
    """The standard inputs of the attention exercises (d = 4, d_v = 3 so that d != d_v)."""
    rng = np.random.default_rng(seed)

    def phi_args():
        return (elu_phi(),) if with_phi else ()

    cases = [
        Case("small", (*qkv(rng, 5, 5), *phi_args())),
        Case("one token (N = 1)", (*qkv(rng, 1, 1), *phi_args())),
        Case("odd length (N = 7)", (*qkv(rng, 7, 7), *phi_args())),
        Case("d = 5, d_v = 2", (*qkv(rng, 6, 6, d=5, d_v=2), *phi_args())),
    ]
    if cross:
        cases.append(Case("cross-attention (3 queries, 6 keys)", (*qkv(rng, 3, 6), *phi_args())))
    cases.append(Case(f"batch dims {BATCH}", (*qkv(rng, 7, 7, batch=BATCH), *phi_args()),
                      batch_ndim=len(BATCH)))
    cases.append(Case("batch dims (1,)", (*qkv(rng, 4, 4, batch=(1,)), *phi_args()), batch_ndim=1))
    if with_phi and performer:
        q, k, v = qkv(rng, 6, 6, scale=0.5)
        cases.append(Case("a feature map with d_phi != d", (q, k, v, performer_phi(4, 6, seed))))
    if with_phi:
        cases.append(Case("relu features, denominators 0 and below eps",
                          (*zero_denominator_qkv(rng, 5), relu_phi())))
    if with_phi and signed:
        cases.append(Case("identity features, negative denominators",
                          (*signed_qkv(rng, 6), identity_phi())))
    return cases
