"""Linear attention: the associative forms that never build the ``N x N`` matrix.

Non-causal, change the order of the products::

    out_i = phi(q_i)^T S / max(phi(q_i) . z, eps),   S = sum_j phi(k_j) v_j^T,   z = sum_j phi(k_j)

Causal, the same with prefix sums ``S_i = sum_{j <= i}``, computed three ways:

- ``"recurrent"``: a step loop over ``t`` (the readable reference of the recurrence);
- ``"cumsum"``: prefix sums of all outer products at once (``N x d_phi x d_v`` memory);
- ``"chunked"``: split the sequence into chunks of ``C`` tokens; inside a chunk use the masked
  quadratic form (``C x C``), across chunks carry ``S`` and ``z`` (chunkwise parallel form).

``"auto"`` picks the fastest for the input: chunked, except the recurrent loop for a few tokens.

These are the reference forms. On a CPU, :func:`linear_attention` hands a torch call to the speed
tier first (``linattn_core.fast``: the same maths in fewer, larger steps, or the compiled kernel),
which answers None where it does not apply.
"""

from __future__ import annotations

from typing import Any

from . import _backend as B
from . import fast, linear_grad
from .attention import normalise, warn_nonpositive
from .feature_maps import as_feature_map

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
        How to compute the causal prefix sums (validated, and ignored, when not causal).
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
    causal = B.check_flag(causal, "causal")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    chunk_size = B.check_positive_int(chunk_size, "chunk_size")
    be = B.check_qkv(q, k, v, causal=causal)
    eps = B.check_eps(eps)
    phi = as_feature_map(feature_map, int(q.shape[-1]))
    q, k, v = (be.to_compute(x) for x in (q, k, v))
    if causal and method == "auto":
        method = _auto_method(int(q.shape[-2]))
    if causal and linear_grad.needs_grad(q, k, v):  # training: a backward pass in O(N) memory
        return be.to_output(linear_grad.causal_linear_attention(q, k, v, phi, eps=eps, chunk_size=chunk_size))
    # the speed tier (linattn_core.fast): the same maths arranged for a CPU, or None where it does not apply
    result = fast.linear_attention(q, k, v, phi, causal=causal, eps=eps, method=method, chunk_size=chunk_size)
    out, den = result if result is not None else _reference(q, k, v, phi, causal, eps, method, chunk_size)
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
    if method == "chunked":
        return causal_chunked(phi_q, phi_k, v, eps, chunk_size)
    return _CAUSAL[method](phi_q, phi_k, v, eps)


def _auto_method(n: int) -> str:
    return "recurrent" if n <= _AUTO_RECURRENT_MAX_N else "chunked"


def noncausal(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """Aggregate first, then query: ``S = phi(K)^T V``, ``z = sum_j phi(k_j)``.

    phi_q: (..., N_q, f), phi_k: (..., N_k, f), v: (..., N_k, d_v) -> out (..., N_q, d_v), den (..., N_q)
    """
    S = B.swap_last(phi_k) @ v  # (..., f, d_v)
    z = B.total(phi_k, -2)  # (..., f)
    num = phi_q @ S  # (..., N_q, d_v)
    den = (phi_q @ z[..., None])[..., 0]  # (..., N_q)
    return normalise(num, den, eps), den


def causal_recurrent(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """The recurrence, one token at a time: add ``(k_t, v_t)`` to the state, then answer ``q_t``.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v) -> out (..., N, d_v), den (..., N)
    """
    f, d_v = int(phi_k.shape[-1]), int(v.shape[-1])
    S = B.zeros(tuple(phi_k.shape[:-2]) + (f, d_v), phi_k)  # (..., f, d_v)
    z = B.zeros(tuple(phi_k.shape[:-2]) + (f,), phi_k)  # (..., f)
    nums, dens = [], []
    for t in range(int(phi_k.shape[-2])):
        k_t, v_t, q_t = phi_k[..., t, :], v[..., t, :], phi_q[..., t, :]
        S = S + k_t[..., :, None] * v_t[..., None, :]  # S_t = S_{t-1} + phi(k_t) v_t^T
        z = z + k_t  # z_t = z_{t-1} + phi(k_t)
        nums.append((q_t[..., None, :] @ S)[..., 0, :])  # phi(q_t)^T S_t: (..., d_v)
        dens.append(B.total(q_t * z, -1))  # phi(q_t) . z_t: (...,)
    num, den = B.stack(nums, -2), B.stack(dens, -1)
    return normalise(num, den, eps), den


def causal_cumsum(phi_q: Any, phi_k: Any, v: Any, eps: float) -> tuple[Any, Any]:
    """All prefix states at once: cumulative sums of the outer products ``phi(k_j) v_j^T``.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    Memory ``N x f x d_v``: fine for short sequences only.
    """
    S = B.cumsum(phi_k[..., :, None] * v[..., None, :], -3)  # (..., N, f, d_v): S_1 .. S_N
    z = B.cumsum(phi_k, -2)  # (..., N, f)
    num = (phi_q[..., None, :] @ S)[..., 0, :]  # (..., N, d_v)
    den = B.total(phi_q * z, -1)  # (..., N)
    return normalise(num, den, eps), den


_CAUSAL = {"recurrent": causal_recurrent, "cumsum": causal_cumsum}


def causal_chunked(phi_q: Any, phi_k: Any, v: Any, eps: float, chunk_size: int = 64) -> tuple[Any, Any]:
    """Chunkwise parallel form: masked ``C x C`` products inside a chunk, ``(S, z)`` carried across.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v) -> out (..., N, d_v), den (..., N).
    For chunk ``c`` with rows ``Q_c, K_c, V_c`` and the state ``S, z`` of all earlier chunks::

        num_c = tril(Q_c K_c^T) V_c + Q_c S        den_c = rowsum(tril(Q_c K_c^T)) + Q_c z
        S <- S + K_c^T V_c                          z <- z + colsum(K_c)

    Work: ``4 N f d_v`` (states in, states out) plus ``2 N C (f + d_v)`` (inside the chunks).
    """
    lead, n, f, d_v = tuple(phi_q.shape[:-2]), int(phi_q.shape[-2]), int(phi_q.shape[-1]), int(v.shape[-1])
    Q = phi_q.reshape((-1, n, f))  # (B, N, f): leading dims flattened
    K = phi_k.reshape((-1, n, f))
    V = v.reshape((-1, n, d_v))
    C = min(chunk_size, n)
    S = B.zeros((Q.shape[0], f, d_v), Q)  # (B, f, d_v)
    z = B.zeros((Q.shape[0], f), Q)  # (B, f)
    outs, dens = [], []
    full = n // C * C  # [0, full): whole chunks; [full, n): one shorter chunk
    for a, b, c in ((0, full, C), (full, n, n - full)):
        if b > a:
            out, den, S, z = _chunks(Q[:, a:b], K[:, a:b], V[:, a:b], S, z, c, eps)
            outs.append(out)
            dens.append(den)
    out = B.concat(outs, 1) if len(outs) > 1 else outs[0]
    den = B.concat(dens, 1) if len(dens) > 1 else dens[0]
    return out.reshape(lead + (n, d_v)), den.reshape(lead + (n,))


def _chunks(Q: Any, K: Any, V: Any, S: Any, z: Any, C: int, eps: float) -> tuple[Any, Any, Any, Any]:
    """One segment of ``G`` whole chunks of ``C`` tokens, starting from the state ``(S, z)``.

    Q, K: (B, G*C, f), V: (B, G*C, d_v), S: (B, f, d_v), z: (B, f)
    -> out (B, G*C, d_v), den (B, G*C), and the state after the segment.
    """
    nb, n, f = (int(s) for s in Q.shape)
    d_v, G = int(V.shape[-1]), n // C
    Q, K, V = Q.reshape((nb, G, C, f)), K.reshape((nb, G, C, f)), V.reshape((nb, G, C, d_v))
    A = Q @ B.swap_last(K)  # (B, G, C, C): scores inside each chunk
    A = B.lib(A).where(B.causal_mask(C, A), A, 0.0)
    num = A @ V  # (B, G, C, d_v)
    den = B.total(A, -1)  # (B, G, C)
    # exclusive prefix states over the chunks, starting from the carried state:
    # prefix[:, c] = S + sum_{c' < c} K_c'^T V_c'; prefix[:, G] is the state after the segment
    S_pre = B.cumsum(B.concat([S[:, None], B.swap_last(K) @ V], 1), 1)  # (B, G+1, f, d_v)
    z_pre = B.cumsum(B.concat([z[:, None], B.total(K, -2)], 1), 1)  # (B, G+1, f)
    num = num + Q @ S_pre[:, :G]
    den = den + (Q @ z_pre[:, :G, :, None])[..., 0]
    out = normalise(num, den, eps)
    return out.reshape((nb, n, d_v)), den.reshape((nb, n)), S_pre[:, G], z_pre[:, G]
