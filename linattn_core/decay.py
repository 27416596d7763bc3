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

__all__ = ["DECAY_METHODS", "decayed_kernel_attention", "decayed_linear_attention"]

DECAY_METHODS = ("auto", "recurrent", "chunked")
DEFAULT_DECAY = 0.9  # gamma when neither decay nor log_decay is given


# --- the gates --------------------------------------------------------------------------------------


def checked_values(value: Any, name: str, like: Any, shapes: dict[str, tuple[int, ...]], *,
                   interval: str, valid: Any) -> Any:
    """A number or an array of one of ``shapes``, checked, on ``like``'s backend, dtype and device.

    ``shapes`` maps how a shape is written in messages (``"(..., N)"``) to the shape itself; a number
    fills the first. ``valid(x)`` says elementwise whether a value is allowed (``interval`` writes the
    range). Used for the gates here and, one token at a time, by the streaming states.
    """
    first = next(iter(shapes.values()))
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        if not (math.isfinite(value) and valid(np.float64(value))):
            raise ValueError(f"{name} must lie in {interval}, got {value!r}")
        return ops.from_numpy(np.full(first, float(value)), like)
    accepted = ", ".join(f"{text} = {shape}" for text, shape in shapes.items())
    is_array = ops.is_torch(value) or isinstance(value, np.ndarray)
    if not is_array or ops.is_torch(value) != ops.is_torch(like):
        kind = "torch tensor" if ops.is_torch(like) else "numpy array"
        raise TypeError(f"{name} must be a number in {interval} or a {kind} of shape {accepted};"
                        f" got {type(value).__name__}")
    if tuple(int(s) for s in value.shape) not in shapes.values():
        raise ValueError(f"{name} has shape {ops.shape_str(value)}; the accepted shapes are () (one number),"
                         f" {accepted}")
    if ops.is_torch(value):
        if value.device != like.device:
            raise TypeError(f"{name} is on {value.device} but the inputs are on {like.device}")
        value = value.to(like.dtype)
    else:
        value = value.astype(like.dtype, copy=False)
    bad = int((~ops.lib(value).isfinite(value) | ~valid(value)).sum())
    if bad:
        raise ValueError(f"{name} must lie in {interval}; {bad} of its {int(math.prod(value.shape))}"
                         " entries do not")
    return value


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
        log_g = checked_values(log_decay, names[1], like, shapes, interval="(-inf, 0]",
                               valid=lambda x: x <= 0)
    else:
        g = checked_values(DEFAULT_DECAY if decay is None else decay, names[0], like, shapes,
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
    scalar_gates = int(log_g.shape[-1]) == 1
    if scalar_gates and not return_state and linear_grad.needs_grad(phi_q, phi_k, v, log_g):
        # gates of exactly 1 that are not learned are no decay: the plain form, whose backward is compiled
        log_g = None if _never_decays(log_g) else log_g[..., 0]
        out = linear_grad.causal_linear_attention(phi_q, phi_k, v, phi, log_g=log_g,
                                                  normalize=normalize, eps=eps, chunk_size=chunk_size,
                                                  features=True)
        return be.to_output(out)  # training: O(N) memory
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
        k_t, v_t, q_t, g_t = phi_k[..., t, :], v[..., t, :], phi_q[..., t, :], g[..., t, :]
        S = g_t[..., :, None] * S + k_t[..., :, None] * v_t[..., None, :]  # row c of S decays by g_tc
        z = g_t * z + k_t
        nums.append((q_t[..., None, :] @ S)[..., 0, :])
        dens.append(ops.total(q_t * z, -1))
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
