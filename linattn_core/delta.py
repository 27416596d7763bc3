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
from .streaming import StepState, read

__all__ = ["DELTA_METHODS", "DeltaRuleState", "delta_rule_attention", "delta_step", "unit_rows"]

DELTA_METHODS = ("auto", "recurrent", "quadratic", "chunked")


def _betas(beta: Any, q: Any, be: ops.Backend) -> Any:
    """Write strengths ``beta_t`` as an array shaped ``(..., N)``; a number is used at every step."""
    return ops.per_token(beta, q, be, "beta", interval="[0, 2]", valid=lambda b: (b >= 0) & (b <= 2))


def unit_rows(x: Any) -> Any:
    """``x / ||x||`` along the last dim, for every nonzero row; a zero row stays zero.

    Each row is first divided by its largest ``|x_i|``, so the sum of squares lies in ``[1, f]``: no row
    is too short (its squares underflowing) or too long (overflowing) for the dtype, and a row of any
    nonzero length comes out of unit length. Under autograd that divisor is a constant (the result does
    not depend on it), so the gradient is the one of ``x / ||x||``. x: (..., f) -> (..., f)
    """
    xp = ops.lib(x)
    m = ops.amax(abs(x), -1)  # (..., 1): the largest entry's size
    if ops.is_torch(m):
        m = m.detach()
    y = x / xp.where(m > 0, m, xp.ones_like(m))  # largest entry +-1; a zero row stays 0
    # the sum of squares is >= 1 for a nonzero row: the clamp touches only zero rows (and keeps their
    # gradient finite, where sqrt's would be infinite at 0)
    return y / xp.sqrt(ops.clamp_min(ops.total(y * y, -1, keepdims=True), 1.0))


def delta_step(S: Any, phi_k_t: Any, v_t: Any, beta_t: Any) -> Any:
    """One token of the rule: ``S <- S + beta_t phi(k_t) (v_t - S^T phi(k_t))^T``.

    S: (..., f, d_v), phi_k_t: (..., f), v_t: (..., d_v), beta_t: (...,) -> the new S. The recurrent
    form, :class:`DeltaRuleState` and the model's DeltaNet layer (through the state) all step with it.
    """
    predicted, _ = read(S, None, phi_k_t)  # S^T phi(k_t): what the memory recalls for k_t
    return S + beta_t[..., None, None] * phi_k_t[..., :, None] * (v_t - predicted)[..., None, :]


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
        phi_q, phi_k = unit_rows(phi_q), unit_rows(phi_k)
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
        S = delta_step(S, K[..., t, :], V[..., t, :], beta[..., t])
        ys.append(read(S, None, Q[..., t, :])[0])  # S_t^T phi(q_t)
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


# --- one token at a time ----------------------------------------------------------------------------


class DeltaRuleState(StepState):
    """The state of :func:`delta_rule_attention`: a memory that corrects itself, one token at a time.

    ``S <- S + beta_t phi(k_t) (v_t - S^T phi(k_t))^T`` (:func:`delta_step`) and ``y_t = S^T phi(q_t)``,
    with ``phi(q_t)`` and ``phi(k_t)`` scaled to unit length when ``normalize_qk`` (as in the function).
    No ``z``.

    Parameters
    ----------
    d, d_v, batch_shape, dtype, like
        As for :class:`~linattn_core.LinearAttentionState`.
    feature_map : str, FeatureMap or callable
        ``phi``, the identity by default (as in DeltaNet).
    normalize_qk : bool
        Unit-length features (True keeps the update a contraction for ``0 <= beta_t <= 2``);
        ``False`` refuses a stabilised Performer.

    Attributes
    ----------
    S : (*batch_shape, d_phi, d_v)
    t : int

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import DeltaRuleState
    >>> from linattn_core.delta import delta_rule_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> state = DeltaRuleState(4, 4)
    >>> ys = np.stack([state.step(q[t], k[t], v[t], 0.5) for t in range(10)])
    >>> bool(np.allclose(ys, delta_rule_attention(q, k, v, 0.5)))
    True
    """

    def __init__(self, d: int, d_v: int, feature_map: Any = "identity", *, normalize_qk: bool = True,
                 batch_shape: tuple[int, ...] = (), dtype: Any = np.float64, like: Any = None) -> None:
        self.normalize_qk = ops.check_flag(normalize_qk, "normalize_qk")
        super().__init__(d, d_v, feature_map, batch_shape, dtype, like)
        if not self.normalize_qk:
            require_exact_products(self.phi, "DeltaRuleState", "normalize_qk")
        self.reset()

    def reset(self) -> None:
        """Forget every token: ``S = 0``, ``t = 0``."""
        self.S = ops.zeros(self.batch_shape + (self.d_phi, self.d_v), self._proto)
        self.t = 0

    def _held(self) -> tuple:
        return (self.S,)

    def _unit(self, f: Any) -> Any:
        return unit_rows(f) if self.normalize_qk else f

    def update(self, k_t: Any, v_t: Any, beta_t: Any) -> None:
        """Write the correction: ``S <- S + beta_t phi(k_t) (v_t - S^T phi(k_t))^T``.

        k_t: (*batch_shape, d), v_t: (*batch_shape, d_v); beta_t: a number or (*batch_shape,), in [0, 2]
        """
        beta = ops.checked_values(beta_t, "beta_t", self._proto, {"(*batch_shape,)": self.batch_shape},
                                  interval="[0, 2]", valid=lambda b: (b >= 0) & (b <= 2))
        k_t, v_t = self._token(k_t, "k_t", self.d), self._token(v_t, "v_t", self.d_v)
        f = self._unit(self.phi.keys(k_t[..., None, :], offset=self.t)[..., 0, :])  # (*batch, d_phi)
        self.S = delta_step(self.S, f, v_t, beta)
        self.t += 1

    def query(self, q_t: Any) -> Any:
        """Read the memory: ``S^T phi(q_t)``. q_t: (*batch_shape, d) -> (*batch_shape, d_v)"""
        f = self._unit(self._query_features(self._token(q_t, "q_t", self.d)))  # (*batch, d_phi)
        return self._out(read(self.S, None, f)[0])

    def step(self, q_t: Any, k_t: Any, v_t: Any, beta_t: Any) -> Any:
        """``update(k_t, v_t, beta_t)`` then ``query(q_t)``: one step of decoding."""
        self.update(k_t, v_t, beta_t)
        return self.query(q_t)
