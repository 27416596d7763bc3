"""Decay and gating: a state that forgets, ``S_t = diag(g_t) S_{t-1} + phi(k_t) v_t^T``.

With a constant ``g_t = gamma`` (RetNet's retention), a gate per step computed from the data
(Mamba-2's scalar gate) or a gate per step *and per key channel* (Gated Linear Attention, GLA),
each earlier pair is down-weighted by the product of the gates it has lived through. Writing the
gates as cumulative sums of logs, ``b_ic = sum_{l <= i} log g_lc``::

    w_ij  = sum_c phi(q_i)_c phi(k_j)_c exp(b_ic - b_jc)                 (j <= i)
    out_i = sum_j w_ij v_j / max(sum_j w_ij, eps)

A scalar gate (the same for every channel ``c``) factors out of the sum:
``w_ij = phi(q_i) . phi(k_j) * prod_{j < l <= i} g_l``. The normalizer decays with the state
(``z_t = g_t * z_{t-1} + phi(k_t)``); with ``normalize=False`` the output is the numerator alone, as
RetNet and GLA use it (they normalize afterwards).

Three forms, like :mod:`linattn_core.linear`: the quadratic masked reference
:func:`decayed_kernel_attention`, and :func:`decayed_linear_attention` with ``method="recurrent"``
(the step loop) or ``"chunked"`` (masked ``C x C`` products inside a chunk, the decayed state carried
across). Products of gates are kept as sums of ``log g``, and every exponent the forms evaluate is
``<= 0``, so long sequences neither overflow, underflow to 0/0, nor lose precision. The gates can be
given as ``log_decay`` directly, so that a gate like ``exp(logsigmoid(a) / 16)`` never rounds to 1.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _backend as ops
from . import fast, linear_grad
from .attention import normalized, warn_nonpositive
from .feature_maps import as_feature_map, require_exact_products
from .streaming import LinearAttentionState, read

__all__ = ["DECAY_METHODS", "DecayedState", "decayed_kernel_attention", "decayed_linear_attention",
           "decayed_step"]

DECAY_METHODS = ("auto", "recurrent", "chunked")
DEFAULT_DECAY = 0.9  # gamma when neither decay nor log_decay is given


# --- the gates --------------------------------------------------------------------------------------


def log_gates(decay: Any, log_decay: Any, like: Any, lead: tuple[int, ...], d_phi: int, *,
              texts: tuple[str, str] = ("(..., N)", "(..., N, d_phi)"),
              names: tuple[str, str] = ("decay", "log_decay")) -> Any:
    """``log g`` from the gates (``decay``) or their logs (``log_decay``): at most one is given.

    Accepted: one number, an array of shape ``lead`` (one gate per token) or ``lead + (d_phi,)`` (one
    per token and key channel), written ``texts`` in messages. -> ``(*lead, 1)`` or
    ``(*lead, d_phi)``, so that both broadcast against the features ``(*lead, d_phi)``.
    """
    if decay is not None and log_decay is not None:
        raise ValueError(f"give {names[0]} or {names[1]}, not both: they are two spellings of the same gates")
    shapes = {texts[0]: lead, texts[1]: lead + (d_phi,)}
    if log_decay is not None:
        log_g = ops.checked_values(log_decay, names[1], like, shapes, interval="(-inf, 0]",
                               valid=lambda x: x <= 0)
    else:
        g = ops.checked_values(DEFAULT_DECAY if decay is None else decay, names[0], like, shapes,
                           interval="(0, 1]", valid=lambda x: (x > 0) & (x <= 1))
        log_g = ops.lib(g).log(g)
    per_token = tuple(int(s) for s in log_g.shape) == lead
    return log_g[..., None] if per_token else log_g


def _prepare(q: Any, k: Any, v: Any, feature_map: Any, decay: Any, log_decay: Any, normalize: bool,
             where: str) -> tuple:
    """Validate the inputs shared by both forms; return the features and the log-gates.

    -> backend, phi, phi(q), phi(k): (..., N, d_phi), v in the compute dtype, log g: (..., N, 1 or d_phi)
    """
    be = ops.check_qkv(q, k, v, causal=True)
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    if not normalize:
        require_exact_products(phi, where, "normalize")
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    phi_q, phi_k = phi.pair(q, k, causal=True)
    log_g = log_gates(decay, log_decay, phi_q, tuple(int(s) for s in q.shape[:-1]), int(phi_q.shape[-1]))
    return be, phi, phi_q, phi_k, v, log_g


def _never_decays(log_g: Any) -> bool:
    """Every gate is exactly 1 (``log g = 0``) and none is learned: ``S_t = S_{t-1} + ...``."""
    return not (ops.is_torch(log_g) and log_g.requires_grad) and not bool((log_g != 0).any())


def _scores(phi_q: Any, phi_k: Any, b: Any) -> Any:
    """Decayed scores of a span of tokens, masked to ``j <= i``: ``(..., c, c)``.

    phi_q, phi_k: (..., c, f); b: (..., c, 1 or f), the cumulative log-gates from the span's start.
    ``A_ij = sum_c phi(q_i)_c phi(k_j)_c exp(b_ic - b_jc)``: every exponent kept is <= 0.
    """
    xp, c = ops.lib(phi_q), int(phi_q.shape[-2])
    mask = ops.causal_mask(c, phi_q)  # (c, c): key j <= query i
    if int(b.shape[-1]) == 1:  # one gate for every channel: it factors out of the sum over c
        b = b[..., 0]  # (..., c)
        gap = xp.where(mask, b[..., :, None] - b[..., None, :], -math.inf)  # -inf above the diagonal
        return (phi_q @ ops.swap_last(phi_k)) * xp.exp(gap)
    gap = xp.where(mask[..., None], b[..., :, None, :] - b[..., None, :, :], -math.inf)  # (..., c, c, f)
    return ops.total(phi_q[..., :, None, :] * phi_k[..., None, :, :] * xp.exp(gap), -1)


def decayed_step(S: Any, z: Any, phi_k_t: Any, v_t: Any, g_t: Any) -> tuple[Any, Any]:
    """One token, forget then add: ``S <- diag(g_t) S + phi(k_t) v_t^T``, ``z <- g_t * z + phi(k_t)``.

    S: (..., f, d_v), z: (..., f) or None (no normalizer), phi_k_t: (..., f), v_t: (..., d_v),
    g_t: (..., 1 or f) -> the new S, z. The recurrent form, :class:`DecayedState` and the model's
    decayed layers (through the state) all step with it.
    """
    S = g_t[..., :, None] * S + phi_k_t[..., :, None] * v_t[..., None, :]  # row c of S decays by g_c
    return S, None if z is None else g_t * z + phi_k_t


# --- the forms --------------------------------------------------------------------------------------


def decayed_kernel_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    decay: Any = None,
    log_decay: Any = None,
    normalize: bool = True,
    eps: float = 1e-6,
    return_weights: bool = False,
) -> Any:
    """Causal kernel attention with a decaying state, in its direct quadratic form (the reference).

    Parameters
    ----------
    q, k : array or tensor, shape (..., N, d)
    v : array or tensor, shape (..., N, d_v)
    feature_map : str, FeatureMap or callable
    decay : float, or array of shape (..., N) or (..., N, d_phi); values in (0, 1]
        The gates ``g_t``: one number for every token and channel (``1`` is plain causal linear
        attention), one per token (a scalar gate), or one per token and key-feature channel (GLA:
        ``S_t = diag(g_t) S_{t-1} + phi(k_t) v_t^T``). 0.9 when neither ``decay`` nor ``log_decay``
        is given.
    log_decay : float or array, optional
        ``log g_t`` instead (values <= 0, the same shapes); give at most one of the two.
    normalize : bool
        Divide by the decayed normalizer ``max(phi(q_i) . z_i, eps)`` (True) or return the numerator.
        The numerator is exact for any feature map whose products ``phi(q) . phi(k)`` are the kernel
        itself; a stabilised Performer's are so only up to per-query constants, which cancel in the
        normalized output alone, so ``normalize=False`` refuses it (``ValueError``): build it with
        ``stabilize=False`` for the raw numerator.
    eps : float
    return_weights : bool
        Also return the implied ``(..., N, N)`` weights (normalized when ``normalize`` is True).

    Returns
    -------
    out : shape (..., N, d_v), and the weights when asked for.

    Notes
    -----
    Per-channel gates build an ``(..., N, N, d_phi)`` array: this is the reference, for short sequences.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> out, w = decayed_kernel_attention(q, k, v, decay=0.5, return_weights=True)
    >>> bool(np.allclose(w.sum(-1), 1.0))
    True
    """
    # q, k: (..., N, d), v: (..., N, d_v)
    ops.check_flag(return_weights, "return_weights")
    eps, normalize = ops.check_eps(eps), ops.check_flag(normalize, "normalize")
    where = "decayed_kernel_attention"
    be, phi, phi_q, phi_k, v, log_g = _prepare(q, k, v, feature_map, decay, log_decay, normalize, where)
    b = ops.cumsum(log_g, -2)  # (..., N, 1 or d_phi): b_i = sum_{l <= i} log g_l
    A = _scores(phi_q, phi_k, b)  # (..., N, N)
    if normalize:
        den = ops.total(A, -1)
        warn_nonpositive(den, phi)
        A = A / ops.clamp_min(den, eps)[..., None]
    out = be.to_output(A @ v)
    return (out, be.to_output(A)) if return_weights else out


def decayed_linear_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    decay: Any = None,
    log_decay: Any = None,
    normalize: bool = True,
    eps: float = 1e-6,
    method: str = "auto",
    chunk_size: int = 64,
    return_state: bool = False,
) -> Any:
    """Causal linear attention with a decaying state: the recurrence, or its chunkwise-parallel form.

    Same arguments as :func:`decayed_kernel_attention` (gates: one number, ``(..., N)`` or
    ``(..., N, d_phi)``), plus ``method`` (``"recurrent"``, ``"chunked"`` or ``"auto"``),
    ``chunk_size`` and ``return_state``: also return the final state ``(S, z)`` with shapes
    ``(..., d_phi, d_v)`` and ``(..., d_phi)``. Never builds an ``N x N`` array. (With a stabilised
    Performer, ``S`` and ``z`` share one constant factor per batch entry, which cancels in
    ``phi(q)^T S / phi(q) . z``.)

    Torch inputs that need a gradient train through :mod:`linattn_core.linear_grad` (O(N) memory)
    when there is one gate per token; per-channel gates train by autograd through the chosen form,
    which keeps what it allocates (the chunked form here: ``(C, C, d_phi)`` decay factors per chunk).
    For torch tensors the chunked form runs as :func:`linattn_core.fast.gated_chunked`, which writes
    ``exp(b_i - b_j) = exp(b_i - r) exp(r - b_j)`` (``(C, d_phi)`` factors and one matrix product per
    chunk) where no factor can overflow, and leaves the call to the log-space form here otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 50, 4))
    >>> fast = decayed_linear_attention(q, k, v, decay=0.8, chunk_size=16)
    >>> bool(np.allclose(fast, decayed_kernel_attention(q, k, v, decay=0.8)))
    True
    >>> gates = rng.uniform(0.5, 1.0, (2, 50, 4))  # GLA: a gate per token and per key channel
    >>> fast = decayed_linear_attention(q, k, v, "relu+1", decay=gates, chunk_size=16)
    >>> bool(np.allclose(fast, decayed_kernel_attention(q, k, v, "relu+1", decay=gates)))
    True
    """
    # q, k: (..., N, d), v: (..., N, d_v)
    if method not in DECAY_METHODS:
        raise ValueError(f"method must be one of {DECAY_METHODS}, got {method!r}")
    chunk_size = ops.check_positive_int(chunk_size, "chunk_size")
    ops.check_flag(return_state, "return_state")
    eps, normalize = ops.check_eps(eps), ops.check_flag(normalize, "normalize")
    where = "decayed_linear_attention"
    be, phi, phi_q, phi_k, v, log_g = _prepare(q, k, v, feature_map, decay, log_decay, normalize, where)
    if int(log_g.shape[-1]) == 1 and not return_state:  # one gate per token: the autograd Function can train
        # gates of exactly 1 that are not learned are no decay: the plain form, whose backward is compiled
        gates = None if _never_decays(log_g) else log_g[..., 0]  # (..., N)
        plan = fast.which(phi_q, phi_k, v, phi, causal=True, method="chunked", log_g=gates,
                          normalize=normalize, features=True)
        if plan.backward is not None:  # training: O(N) memory
            out = linear_grad.causal_linear_attention(phi_q, phi_k, v, phi, plan, log_g=gates,
                                                      normalize=normalize, eps=eps, chunk_size=chunk_size,
                                                      features=True)
            return be.to_output(out)
    if method == "recurrent":
        num, den, S, z = _recurrent(phi_q, phi_k, v, log_g)
    else:  # torch, gates per channel: the speed tier's factored scores where the gates allow them
        found = fast.gated_chunked(phi_q, phi_k, v, log_g, chunk_size)
        num, den, S, z = found if found is not None else _chunked(phi_q, phi_k, v, log_g, chunk_size)
    if normalize:
        warn_nonpositive(den, phi)
        out = normalized(num, den, eps)
    else:
        out = num
    out = be.to_output(out)
    return (out, (be.to_output(S), be.to_output(z))) if return_state else out


def _recurrent(phi_q: Any, phi_k: Any, v: Any, log_g: Any) -> tuple[Any, Any, Any, Any]:
    """The step loop: ``S_t = diag(g_t) S_{t-1} + phi(k_t) v_t^T``, ``z_t = g_t * z_{t-1} + phi(k_t)``.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v), log_g: (..., N, 1 or f) -> num, den, S, z
    """
    f, d_v = int(phi_k.shape[-1]), int(v.shape[-1])
    lead = tuple(phi_k.shape[:-2])
    S, z = ops.zeros(lead + (f, d_v), phi_k), ops.zeros(lead + (f,), phi_k)
    g = ops.lib(log_g).exp(log_g)  # (..., N, 1 or f)
    nums, dens = [], []
    for t in range(int(phi_k.shape[-2])):
        S, z = decayed_step(S, z, phi_k[..., t, :], v[..., t, :], g[..., t, :])
        num, den = read(S, z, phi_q[..., t, :])
        nums.append(num)
        dens.append(den)
    return ops.stack(nums, -2), ops.stack(dens, -1), S, z


def _chunked(phi_q: Any, phi_k: Any, v: Any, log_g: Any, C: int) -> tuple[Any, Any, Any, Any]:
    """Chunkwise parallel form with decay, one chunk of ``C`` tokens at a time.

    Inside a chunk, with ``b_i`` the cumulative log-gate from the chunk's start (per channel), the
    scores ``A`` of :func:`_scores` and ``*`` a product per channel::

        num_i = sum_{j <= i in chunk} A_ij v_j  +  (e^{b_i} * q_i)^T S
        S    <- diag(e^{b_last}) S + sum_j (e^{b_last - b_j} * k_j) v_j^T

    Every exponent is <= 0, so nothing overflows however long the sequence.
    phi_q, phi_k: (..., N, f), v: (..., N, d_v), log_g: (..., N, 1 or f) -> num, den, S, z
    """
    xp = ops.lib(phi_q)
    n, f, d_v = int(phi_q.shape[-2]), int(phi_q.shape[-1]), int(v.shape[-1])
    lead = tuple(phi_q.shape[:-2])
    S, z = ops.zeros(lead + (f, d_v), phi_k), ops.zeros(lead + (f,), phi_k)
    nums, dens = [], []
    for s in range(0, n, C):
        Q, K, V = phi_q[..., s : s + C, :], phi_k[..., s : s + C, :], v[..., s : s + C, :]
        b = ops.cumsum(log_g[..., s : s + C, :], -2)  # (..., c, 1 or f)
        A = _scores(Q, K, b)  # (..., c, c): decayed scores inside the chunk
        Q_in = Q * xp.exp(b)  # (..., c, f): phi(q_i), decayed from the chunk's start to token i
        nums.append(A @ V + Q_in @ S)
        dens.append(ops.total(A, -1) + (Q_in @ z[..., None])[..., 0])
        K_out = K * xp.exp(b[..., -1:, :] - b)  # (..., c, f): phi(k_j), decayed from j to the chunk's end
        last = xp.exp(b[..., -1, :])  # (..., 1 or f): the whole chunk's decay
        S = last[..., :, None] * S + ops.swap_last(K_out) @ V
        z = last * z + ops.total(K_out, -2)
    return ops.concat(nums, -2), ops.concat(dens, -1), S, z


# --- one token at a time ----------------------------------------------------------------------------


class DecayedState(LinearAttentionState):
    """The state of :func:`decayed_linear_attention`: forget, then add, one token at a time.

    ``S <- diag(g_t) S + phi(k_t) v_t^T`` and ``z <- g_t * z + phi(k_t)`` (:func:`decayed_step`); the
    answer is ``phi(q_t)^T S / max(phi(q_t) . z, eps)``, or the numerator alone with ``normalize=False``
    (then there is no ``z``). The gate ``g_t`` is one number, one per batch entry (a scalar gate per
    head), or one per batch entry and key channel (GLA).

    Parameters
    ----------
    d, d_v, feature_map, batch_shape, eps, dtype, like
        As for :class:`~linattn_core.LinearAttentionState`.
    normalize : bool
        As in :func:`decayed_linear_attention`; ``False`` refuses a stabilised Performer (its constants
        cancel only in a normalized output).

    Attributes
    ----------
    S : (*batch_shape, d_phi, d_v)
    z : (*batch_shape, d_phi), or None when ``normalize`` is False
    t : int

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import DecayedState
    >>> from linattn_core.decay import decayed_linear_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> g = rng.uniform(0.5, 1.0, (10, 4))  # a gate per token and key channel
    >>> state = DecayedState(4, 4)
    >>> ys = np.stack([state.step(q[t], k[t], v[t], g[t]) for t in range(10)])
    >>> bool(np.allclose(ys, decayed_linear_attention(q, k, v, decay=g)))
    True
    """

    def __init__(self, d: int, d_v: int, feature_map: Any = "elu+1", *, normalize: bool = True,
                 batch_shape: tuple[int, ...] = (), eps: float = 1e-6, dtype: Any = np.float64,
                 like: Any = None) -> None:
        self.normalize = ops.check_flag(normalize, "normalize")
        super().__init__(d, d_v, feature_map, batch_shape=batch_shape, eps=eps, dtype=dtype, like=like)
        if not self.normalize:
            require_exact_products(self.phi, "DecayedState", "normalize")

    def reset(self) -> None:
        """Forget every token: ``S = 0``, ``z = 0`` (None without normalization), ``t = 0``."""
        super().reset()
        if not self.normalize:
            self.z = None

    def _held(self) -> tuple:
        return (self.S, self.z) if self.normalize else (self.S,)

    def update(self, k_t: Any, v_t: Any, g_t: Any = None, *, log_g_t: Any = None) -> None:
        """Forget, then add one pair: ``S <- diag(g_t) S + phi(k_t) v_t^T``, ``z <- g_t * z + phi(k_t)``.

        k_t: (*batch_shape, d), v_t: (*batch_shape, d_v); g_t: a number, (*batch_shape,) or
        (*batch_shape, d_phi), in (0, 1]; or ``log_g_t`` (<= 0, the same shapes) instead.
        """
        if g_t is None and log_g_t is None:
            raise TypeError("DecayedState.update needs the gate g_t (or its log, log_g_t=)")
        log_g = log_gates(g_t, log_g_t, self._proto, self.batch_shape, self.d_phi,
                          texts=("(*batch_shape,)", "(*batch_shape, d_phi)"), names=("g_t", "log_g_t"))
        g = ops.lib(log_g).exp(log_g)  # (*batch, 1 or d_phi)
        k_t, v_t = self._token(k_t, "k_t", self.d), self._token(v_t, "v_t", self.d_v)
        f = self._key_features(k_t)  # (*batch, d_phi); first: it may rescale S and z
        self.S, self.z = decayed_step(self.S, self.z, f, v_t, g)
        self.t += 1

    def query(self, q_t: Any) -> Any:
        """``phi(q_t)^T S / max(phi(q_t) . z, eps)``, or ``phi(q_t)^T S`` without normalization.

        q_t: (*batch_shape, d) -> (*batch_shape, d_v)
        """
        if self.normalize:
            return super().query(q_t)
        num, _ = read(self.S, None, self._query_features(self._token(q_t, "q_t", self.d)))
        return self._out(num)

    def step(self, q_t: Any, k_t: Any, v_t: Any, g_t: Any = None, *, log_g_t: Any = None) -> Any:
        """``update(k_t, v_t, g_t)`` then ``query(q_t)``: one step of decoding."""
        self.update(k_t, v_t, g_t, log_g_t=log_g_t)
        return self.query(q_t)
