"""Linear attention: the associative forms that never build the ``N x N`` matrix.

Non-causal, change the order of the products::

    out_i = phi(q_i)^T S / max(phi(q_i) . z, eps),   S = sum_j phi(k_j) v_j^T,   z = sum_j phi(k_j)

Causal, the same with prefix sums ``S_i = sum_{j <= i}``, computed three ways:

- ``"recurrent"``: a step loop over ``t`` (the readable reference of the recurrence);
- ``"cumsum"``: prefix sums of all outer products at once (``N x d_phi x d_v`` memory);
- ``"chunked"``: split the sequence into chunks of ``C`` tokens; inside a chunk use the masked
  quadratic form (``C x C``), across chunks carry ``S`` and ``z`` (chunkwise parallel form).

``"auto"`` picks the fastest for the input: chunked, except the recurrent loop for a few tokens.

These are the reference forms. :func:`linear_attention` asks the speed tier (``linattn_core.fast``:
the same maths in fewer, larger steps, or the compiled kernel) which forms run, once, as a plan: a
fast forward, training through the O(N)-memory backward of :mod:`linattn_core.linear_grad`, or the
forms here (where the plan names no fast form; ``"auto"`` counts as chunked for the fast forms).
"""

from __future__ import annotations

from typing import Any

from . import _backend as ops  # the array helpers, one spelling for numpy and torch
from . import fast, linear_grad
from .attention import normalized, warn_nonpositive
from .feature_maps import as_feature_map
from .streaming import linear_step, read

__all__ = ["METHODS", "linear_attention"]

METHODS = ("auto", "recurrent", "cumsum", "chunked")

# Up to this length "auto" uses the recurrent loop: for a handful of tokens a few small ops beat the
# chunked form's set-up (measured on a 2-core CPU, numpy and torch, d = d_v = 64).
_AUTO_RECURRENT_MAX_N = 8


def linear_attention(
    q: Any,
    k: Any,
    v: Any,
    feature_map: Any = "elu+1",
    *,
    causal: bool = False,
    eps: float = 1e-6,
    method: str = "auto",
    chunk_size: int = 64,
) -> Any:
    """Kernel attention in linear time and memory (the associative form).

    Parameters
    ----------
    q : array or tensor, shape (..., N_q, d)
    k : array or tensor, shape (..., N_k, d)
    v : array or tensor, shape (..., N_k, d_v)
    feature_map : str, FeatureMap or callable
        ``phi``; a name for :func:`get_feature_map`, a feature map, or any ``phi(x) -> (..., N, d_phi)``.
    causal : bool
        Query ``i`` sees keys ``j <= i`` (needs ``N_q == N_k``).
    eps : float
        Denominators are clamped to at least ``eps`` (as in :func:`kernel_attention`).
    method : {"auto", "recurrent", "cumsum", "chunked"}
        How to compute the causal prefix sums (validated, and ignored, when not causal). With torch
        inputs that need gradients, ``"auto"`` and ``"chunked"`` train through the hand-written
        backward pass in O(N) memory (:mod:`linattn_core.linear_grad`); ``"recurrent"`` and
        ``"cumsum"`` run their reference form under plain autograd, which keeps what that form
        allocates (to compare with, or to measure it).
    chunk_size : int
        ``C`` for ``method="chunked"``; any ``N`` works with any ``C``.

    Returns
    -------
    out : shape (..., N_q, d_v)
        Same type, dtype and device as ``q``; equal to :func:`kernel_attention` up to rounding.

    Notes
    -----
    Memory: ``O(N (d + d_v) + d_phi d_v)``; time ``O(N d_phi d_v)``, plus ``O(N C d_phi)`` for
    the chunked form. No ``N x N`` array is ever allocated.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import kernel_attention, linear_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 100, 8))
    >>> out = linear_attention(q, k, v, causal=True, method="chunked", chunk_size=16)
    >>> bool(np.allclose(out, kernel_attention(q, k, v, causal=True), atol=1e-12))
    True
    """
    # q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)
    causal = ops.check_flag(causal, "causal")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    chunk_size = ops.check_positive_int(chunk_size, "chunk_size")
    be = ops.check_qkv(q, k, v, causal=causal)
    eps = ops.check_eps(eps)
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    plan = fast.which(q, k, v, phi, causal=causal, method=method)  # which forms run, forwards and backwards
    if plan.backward is not None:  # training: the chunked form with a backward pass in O(N) memory
        out = linear_grad.causal_linear_attention(q, k, v, phi, plan, eps=eps, chunk_size=chunk_size)
        return be.to_output(out)
    if plan.forward is not None:  # the speed tier (linattn_core.fast): the same maths arranged for a CPU
        out, den = fast.linear_attention(plan, q, k, v, phi, causal=causal, eps=eps, chunk_size=chunk_size)
    else:
        out, den = _reference(q, k, v, phi, causal, eps, method, chunk_size)
    warn_nonpositive(den, phi)
    return be.to_output(out)


def _reference(q: Any, k: Any, v: Any, phi: Any, causal: bool, eps: float, method: str,
               chunk_size: int) -> tuple[Any, Any]:
    """The readable forms below: features first, then the chosen form.

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v) -> out (..., N_q, d_v), den (..., N_q)
    """
    phi_q, phi_k = phi.pair(q, k, causal=causal)  # (..., N_q, d_phi), (..., N_k, d_phi)
    if not causal:
        return noncausal(phi_q, phi_k, v, eps)
    if method == "auto":
        method = _auto_method(int(q.shape[-2]))
    if method == "chunked":
        return causal_chunked(phi_q, phi_k, v, eps, chunk_size)
    return _CAUSAL[method](phi_q, phi_k, v, eps)


def _auto_method(n: int) -> str:
    return "recurrent" if n <= _AUTO_RECURRENT_MAX_N else "chunked"


def noncausal(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """Aggregate first, then query: ``S = phi(K)^T V``, ``z = sum_j phi(k_j)``.

    phi_q: (..., N_q, d_phi), phi_k: (..., N_k, d_phi), v: (..., N_k, d_v)
    -> out (..., N_q, d_v), den (..., N_q)
    """
    S = ops.swap_last(phi_k) @ v  # (..., d_phi, d_v): phi(K)^T V
    z = ops.total(phi_k, axis=-2)  # (..., d_phi): the sum of the key features
    num = phi_q @ S  # (..., N_q, d_v)
    den = (phi_q @ z[..., None])[..., 0]  # (..., N_q)
    return normalized(num, den, eps), den


def causal_recurrent(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """The recurrence, one token at a time: add ``(k_t, v_t)`` to the state, then answer ``q_t``.

    phi_q, phi_k: (..., N, d_phi), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    One step is :func:`~linattn_core.streaming.linear_step` (``S_t = S_{t-1} + phi(k_t) v_t^T``,
    ``z_t = z_{t-1} + phi(k_t)``), the rule :class:`~linattn_core.LinearAttentionState` steps with too.
    """
    d_phi, d_v = int(phi_k.shape[-1]), int(v.shape[-1])
    S = ops.zeros(tuple(phi_k.shape[:-2]) + (d_phi, d_v), phi_k)  # (..., d_phi, d_v)
    z = ops.zeros(tuple(phi_k.shape[:-2]) + (d_phi,), phi_k)  # (..., d_phi)
    nums, dens = [], []
    for t in range(int(phi_k.shape[-2])):
        S, z = linear_step(S, z, phi_k[..., t, :], v[..., t, :])
        num, den = read(S, z, phi_q[..., t, :])  # phi(q_t)^T S_t: (..., d_v), phi(q_t) . z_t: (...,)
        nums.append(num)
        dens.append(den)
    num, den = ops.stack(nums, axis=-2), ops.stack(dens, axis=-1)
    return normalized(num, den, eps), den


def causal_cumsum(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """All prefix states at once: cumulative sums of the outer products ``phi(k_j) v_j^T``.

    phi_q, phi_k: (..., N, d_phi), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    Memory ``N x d_phi x d_v``: fine for short sequences only.
    """
    S = ops.cumsum(phi_k[..., :, None] * v[..., None, :], axis=-3)  # (..., N, d_phi, d_v): S_0 .. S_{N-1}
    z = ops.cumsum(phi_k, axis=-2)  # (..., N, d_phi)
    num = (phi_q[..., None, :] @ S)[..., 0, :]  # (..., N, d_v)
    den = ops.total(phi_q * z, axis=-1)  # (..., N)
    return normalized(num, den, eps), den


_CAUSAL = {"recurrent": causal_recurrent, "cumsum": causal_cumsum}


def causal_chunked(phi_q: Any, phi_k: Any, v: Any, eps: float, chunk_size: int = 64) -> tuple[Any, Any]:
    """Chunkwise parallel form: masked ``C x C`` products inside a chunk, ``(S, z)`` carried across.

    phi_q, phi_k: (..., N, d_phi), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    For chunk ``c`` with rows ``Q_c, K_c, V_c`` and the state ``S, z`` of all earlier chunks::

        num_c = tril(Q_c K_c^T) V_c + Q_c S        den_c = rowsum(tril(Q_c K_c^T)) + Q_c z
        S <- S + K_c^T V_c                          z <- z + colsum(K_c)

    Work: ``4 N d_phi d_v`` (states in, states out) plus ``2 N C (d_phi + d_v)`` (inside the chunks).
    """
    lead, n = tuple(phi_q.shape[:-2]), int(phi_q.shape[-2])
    d_phi, d_v = int(phi_q.shape[-1]), int(v.shape[-1])
    Q = phi_q.reshape((-1, n, d_phi))  # (batch, N, d_phi): the leading dims flattened into one batch
    K = phi_k.reshape((-1, n, d_phi))
    V = v.reshape((-1, n, d_v))
    C = min(chunk_size, n)
    batch = int(Q.shape[0])
    S = ops.zeros((batch, d_phi, d_v), Q)  # the state before the first chunk
    z = ops.zeros((batch, d_phi), Q)
    outs, dens = [], []
    n_whole = n // C * C  # tokens [0, n_whole) fill whole chunks; [n_whole, n) is one shorter chunk
    for start, stop, size in ((0, n_whole, C), (n_whole, n, n - n_whole)):
        if stop > start:
            out, den, S, z = _chunks(Q[:, start:stop], K[:, start:stop], V[:, start:stop], S, z, size, eps)
            outs.append(out)
            dens.append(den)
    out = ops.concat(outs, axis=1) if len(outs) > 1 else outs[0]
    den = ops.concat(dens, axis=1) if len(dens) > 1 else dens[0]
    return out.reshape(lead + (n, d_v)), den.reshape(lead + (n,))


def _chunks(Q: Any, K: Any, V: Any, S: Any, z: Any, C: int, eps: float) -> tuple[Any, Any, Any, Any]:
    """A run of whole chunks of ``C`` tokens, all at once, starting from the state ``(S, z)`` before them.

    Q, K: (batch, n_chunks * C, d_phi), V: (batch, n_chunks * C, d_v), S: (batch, d_phi, d_v),
    z: (batch, d_phi) -> out (batch, n_chunks * C, d_v), den (batch, n_chunks * C), and the state
    ``(S, z)`` after the last chunk.
    """
    batch, n, d_phi = (int(s) for s in Q.shape)
    d_v, n_chunks = int(V.shape[-1]), n // C
    Q = Q.reshape((batch, n_chunks, C, d_phi))  # Q[:, c] is the chunk's Q_c
    K = K.reshape((batch, n_chunks, C, d_phi))
    V = V.reshape((batch, n_chunks, C, d_v))
    A = ops.tril(Q @ ops.swap_last(K))  # (batch, n_chunks, C, C): M * Q_c K_c^T inside each chunk
    num = A @ V  # (batch, n_chunks, C, d_v): the chunk's own tokens
    den = ops.total(A, axis=-1)  # (batch, n_chunks, C)
    # The state each chunk starts from, S_[c] = S + sum over the earlier chunks c' of K_c'^T V_c'.
    # One cumulative sum over [S, K_0^T V_0, K_1^T V_1, ...] gives every S_[c] at once; its one extra,
    # last entry is the state after the final chunk, which the caller carries on.
    S_before = ops.cumsum(ops.concat([S[:, None], ops.swap_last(K) @ V], axis=1), axis=1)
    z_before = ops.cumsum(ops.concat([z[:, None], ops.total(K, axis=-2)], axis=1), axis=1)
    # S_before: (batch, n_chunks + 1, d_phi, d_v), z_before: (batch, n_chunks + 1, d_phi)
    num = num + Q @ S_before[:, :n_chunks]  # the earlier chunks, through the carried state: Q_c S_[c]
    den = den + (Q @ z_before[:, :n_chunks, :, None])[..., 0]
    out = normalized(num, den, eps)
    S_after, z_after = S_before[:, n_chunks], z_before[:, n_chunks]
    return out.reshape((batch, n, d_v)), den.reshape((batch, n)), S_after, z_after
