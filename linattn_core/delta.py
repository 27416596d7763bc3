"""The delta rule: a state that corrects its own error instead of only adding to it.

Plain linear attention writes ``S_t = S_{t-1} + phi(k_t) v_t^T``: an old value stored under a
similar key is never removed, it only piles up. The delta rule (Schlag et al. 2021 made it an
attention layer, DeltaNet; Yang et al. 2024 parallelised it over the sequence and trained it at scale)
first reads what the state already predicts for ``k_t`` and writes only the correction::

    S_t = S_{t-1} + beta_t phi(k_t) (v_t - S_{t-1}^T phi(k_t))^T,        y_t = S_t^T phi(q_t)

With unit-norm features and ``beta_t = 1`` the write replaces the value stored under ``k_t``.
Features are L2-normalized by default (``normalize_qk=True``), which keeps the update non-expansive
for ``0 <= beta_t <= 2``: the old state is multiplied by ``I - beta_t phi(k_t) phi(k_t)^T``, whose
eigenvalues are ``1 - beta_t`` (along ``phi(k_t)``) and 1 (every direction orthogonal to it), so nothing
is amplified, and the orthogonal directions are kept exactly (not a contraction). There is no
normalizer ``z``: the state is a fast-weight memory read by a product.

DeltaNet (Yang et al.) applies SiLU to ``q`` and ``k`` and then the L2 normalization, after a short
causal convolution; this function's default feature map is the identity before the L2 normalization,
``phi(k) = k / ||k||``, which the book uses for clarity. Pass ``feature_map=`` (any callable, a SiLU
included) for DeltaNet's features.

Three forms, all exact:

- ``"recurrent"``: the step loop above, the literal reference;
- ``"quadratic"``: all at once. Writing ``S_t = sum_{j <= t} phi(k_j) u_j^T``, the corrections solve a
  unit lower-triangular system ``(I + tril(diag(beta) K K^T, -1)) U = diag(beta) V`` (DeltaNet's GPU
  kernels compute the same thing as the WY representation of the product of the transitions, with the
  UT transform), then ``Y = tril(Q K^T) U``: an ``N x N`` form like kernel attention's;
- ``"chunked"``: the same solve inside chunks of ``C`` tokens, with the state carried between them
  (``U_c = T_c^{-1} diag(beta_c) (V_c - K_c S)``, ``Y_c = Q_c S + tril(Q_c K_c^T) U_c``,
  ``S <- S + K_c^T U_c``).

``"chunked"`` (and ``"auto"``) hands CPU float32 torch tensors to the speed tier first
(:func:`linattn_core.fast.delta_chunked`): the compiled recurrence, forward and backward, which
computes the same function without the per-chunk solves (the tests compare the two).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _backend as ops
from . import fast
from .feature_maps import as_feature_map, require_exact_products

__all__ = ["DELTA_METHODS", "delta_rule_attention"]

DELTA_METHODS = ("auto", "recurrent", "quadratic", "chunked")


def _betas(beta: Any, q: Any, be: ops.Backend) -> Any:
    """Write strengths ``beta_t`` as an array shaped ``(..., N)``; a number is used at every step."""
    return ops.per_token(beta, q, be, "beta", interval="[0, 2]", valid=lambda b: (b >= 0) & (b <= 2))


def _unit_rows(x: Any) -> Any:
    """``x / ||x||`` along the last dim (a zero row stays zero)."""
    norm = ops.total(x * x, -1, keepdims=True)
    return x / ops.lib(x).sqrt(ops.clamp_min(norm, 1e-12))


def delta_rule_attention(
    q: Any,
    k: Any,
    v: Any,
    beta: Any = 1.0,
    feature_map: Any = "identity",
    *,
    normalize_qk: bool = True,
    method: str = "auto",
    chunk_size: int = 64,
    return_state: bool = False,
) -> Any:
    """Causal attention whose state is updated by the delta rule.

    Parameters
    ----------
    q, k : array or tensor, shape (..., N, d)
    v : array or tensor, shape (..., N, d_v)
    beta : float in [0, 2], or array of shape (..., N)
        The write strength ``beta_t`` of each token (1: overwrite the value stored under ``k_t``).
    feature_map : str, FeatureMap or callable
        ``phi``, applied before the L2 normalization. The default is the identity, used by the book for
        clarity; DeltaNet applies SiLU here (a callable such as ``lambda x: x / (1 + np.exp(-x))``).
    normalize_qk : bool
        Scale ``phi(q_t)`` and ``phi(k_t)`` to unit length (True keeps the update stable). Unit rows
        also remove any positive constant a map multiplies a row by, so a stabilised Performer is exact
        here; with ``normalize_qk=False`` its constants would act like a rescaled ``beta``, so that
        combination is refused (``ValueError``): build it with ``stabilize=False``.
    method : {"auto", "recurrent", "quadratic", "chunked"}
    chunk_size : int
    return_state : bool
        Also return the final state ``S`` of shape ``(..., d_phi, d_v)``.

    Returns
    -------
    y : shape (..., N, d_v), ``y_t = S_t^T phi(q_t)``; and ``S`` when asked for.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 40, 8))
    >>> y = delta_rule_attention(q, k, v, beta=0.5, method="chunked", chunk_size=16)
    >>> bool(np.allclose(y, delta_rule_attention(q, k, v, beta=0.5, method="recurrent")))
    True
    """
    # q, k: (..., N, d), v: (..., N, d_v)
    if method not in DELTA_METHODS:
        raise ValueError(f"method must be one of {DELTA_METHODS}, got {method!r}")
    chunk_size = ops.check_positive_int(chunk_size, "chunk_size")
    be = ops.check_qkv(q, k, v, causal=True)
    normalize_qk = ops.check_flag(normalize_qk, "normalize_qk")
    ops.check_flag(return_state, "return_state")
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    if not normalize_qk:
        require_exact_products(phi, "delta_rule_attention", "normalize_qk")
    beta = _betas(beta, q, be)  # (..., N)
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    phi_q, phi_k = phi.pair(q, k, causal=True)  # (..., N, f)
    if normalize_qk:
        phi_q, phi_k = _unit_rows(phi_q), _unit_rows(phi_k)
    if method == "recurrent":
        y, S = _recurrent(phi_q, phi_k, v, beta)
    elif method == "quadratic":
        y, S = _quadratic(phi_q, phi_k, v, beta)
    else:
        found = fast.delta_chunked(phi_q, phi_k, v, beta, chunk_size, _chunked)
        y, S = found if found is not None else _chunked(phi_q, phi_k, v, beta, chunk_size)
    y = be.to_output(y)
    return (y, be.to_output(S)) if return_state else y


def _recurrent(Q: Any, K: Any, V: Any, beta: Any) -> tuple[Any, Any]:
    """The literal recurrence. Q, K: (..., N, f), V: (..., N, d_v), beta: (..., N)."""
    lead, f, d_v = tuple(K.shape[:-2]), int(K.shape[-1]), int(V.shape[-1])
    S = ops.zeros(lead + (f, d_v), K)  # (..., f, d_v)
    ys = []
    for t in range(int(K.shape[-2])):
        k_t, v_t, q_t = K[..., t, :], V[..., t, :], Q[..., t, :]
        predicted = (k_t[..., None, :] @ S)[..., 0, :]  # S_{t-1}^T phi(k_t): what the memory recalls
        S = S + beta[..., t, None, None] * k_t[..., :, None] * (v_t - predicted)[..., None, :]
        ys.append((q_t[..., None, :] @ S)[..., 0, :])
    return ops.stack(ys, -2), S


def _solve_unit_lower(L: Any, rhs: Any) -> Any:
    """Solve ``(I + tril(L, -1)) X = rhs``: only the entries of ``L: (..., c, c)`` below the diagonal
    are read (torch's triangular solve reads nothing else, so no mask is built for it)."""
    if ops.is_torch(L):
        return ops.torch_module().linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    c = int(L.shape[-1])
    strict = ops.causal_mask(c, L) & ~np.eye(c, dtype=bool)  # j < i: earlier tokens only
    return np.linalg.solve(np.eye(c) + np.where(strict, L, 0.0), rhs)


def _corrections(K: Any, rhs: Any, beta: Any) -> Any:
    """``U = (I + tril(diag(beta) K K^T, -1))^{-1} diag(beta) rhs``: the value each token writes.

    K: (..., c, f), rhs: (..., c, d_v), beta: (..., c) -> U: (..., c, d_v)
    """
    return _solve_unit_lower(beta[..., :, None] * (K @ ops.swap_last(K)), beta[..., :, None] * rhs)


def _quadratic(Q: Any, K: Any, V: Any, beta: Any) -> tuple[Any, Any]:
    """All tokens at once (``N x N``): ``U`` from one triangular solve, ``Y = tril(Q K^T) U``."""
    U = _corrections(K, V, beta)
    A = ops.lib(Q).where(ops.causal_mask(int(Q.shape[-2]), Q), Q @ ops.swap_last(K), 0.0)
    return A @ U, ops.swap_last(K) @ U


def _chunked(Q: Any, K: Any, V: Any, beta: Any, C: int) -> tuple[Any, Any]:
    """Chunks of ``C`` tokens: a ``C x C`` solve each, the state ``S`` carried between them."""
    lead, n, f, d_v = tuple(K.shape[:-2]), int(K.shape[-2]), int(K.shape[-1]), int(V.shape[-1])
    S = ops.zeros(lead + (f, d_v), K)
    ys = []
    for s in range(0, n, C):
        Qc, Kc, Vc = Q[..., s : s + C, :], K[..., s : s + C, :], V[..., s : s + C, :]
        U = _corrections(Kc, Vc - Kc @ S, beta[..., s : s + C])  # corrections against the carried S
        A = ops.lib(Qc).where(ops.causal_mask(int(Qc.shape[-2]), Qc), Qc @ ops.swap_last(Kc), 0.0)
        ys.append(Qc @ S + A @ U)
        S = S + ops.swap_last(Kc) @ U
    return ops.concat(ys, -2), S
