"""The backward pass of causal linear attention, in O(N) memory: prefix sums forwards, suffix sums back.

Autograd through a forward form keeps whatever that form allocated (the cumsum form's
``N x d_phi x d_v`` prefix states, the chunked form's per-chunk states and scores). Katharopoulos et
al. (2020, sec. 3.3) observe that the gradients are prefix and suffix sums too, so they can be
computed with the same O(N) memory as the forward pass. Here, with ``a_i = dL/dnum_i`` (the
gradient on the numerator) and ``eta_i = dL/dden_i`` (on the denominator)::

    num_i = sum_{j<=i} (phi(q_i) . phi(k_j)) v_j          den_i = sum_{j<=i} phi(q_i) . phi(k_j)
    P_ij  = a_i . v_j + eta_i                            (j <= i): dL / d(phi(q_i) . phi(k_j))

    dphi(q_i) = sum_{j<=i} P_ij phi(k_j)  = S_i a_i + eta_i z_i          (prefix sums, as forward)
    dphi(k_j) = sum_{i>=j} P_ij phi(q_i)  = R_j v_j + r_j                  (suffix sums)
    dv_j      = sum_{i>=j} (phi(q_i) . phi(k_j)) a_i = R_j^T phi(k_j)
    with S_i = sum_{j<=i} phi(k_j) v_j^T, z_i = sum_{j<=i} phi(k_j),
         R_j = sum_{i>=j} phi(q_i) a_i^T,  r_j = sum_{i>=j} eta_i phi(q_i).

For ``out_i = num_i / c_i`` with ``c_i = max(den_i, eps)``: ``a_i = dout_i / c_i`` and
``eta_i = -[den_i >= eps] (a_i . num_i) / c_i`` (no gradient where the clamp is active). Without
the denominator (``normalize=False``) ``a_i = dout_i`` and ``eta = 0``.

With a decay (``S_t = g_t S_{t-1} + phi(k_t) v_t^T``, see :mod:`linattn_core.decay`) every pair
carries ``exp(b_i - b_j)`` with ``b_i = sum_{l<=i} log g_l``; the states decay the same way in both
directions (``R_j = g_{j+1} R_{j+1} + phi(q_j) a_j^T``), and the gates' gradient is ``d log g_t =
sum_{l>=t} (phi(q_l) . dphi(q_l) - phi(k_l) . dphi(k_l))`` (``b_l`` enters ``P_lj`` with a plus sign
as the query's, with a minus sign as the key's).

:func:`causal_backward_recurrent` is these equations one token at a time: the reference. Training runs
:func:`causal_linear_attention`, an autograd Function that saves only its inputs and hands both passes
to the speed tier (:func:`linattn_core.fast.causal_forward` and :func:`linattn_core.fast.causal_backward`:
the compiled kernel on CPU float32, else the chunked form run in reverse a block of chunks at a time,
:mod:`linattn_core.fast.blocked`), as the plan of :func:`linattn_core.fast.which` says.
"""

from __future__ import annotations

import functools
from typing import Any

from . import _backend as ops
from . import fast
from .attention import warn_nonpositive
from .feature_maps import FeatureMap, Identity
from .streaming import linear_step, read

__all__ = ["causal_backward_recurrent", "causal_linear_attention"]


def causal_backward_recurrent(phi_q: Any, phi_k: Any, v: Any, dout: Any, *, log_g: Any = None,
                              eps: float = 1e-6, normalize: bool = True) -> tuple[Any, Any, Any, Any]:
    """The gradients of causal linear attention with respect to its features, one token at a time.

    phi_q, phi_k: (..., N, f), v, dout: (..., N, d_v), log_g: (..., N) or None (no decay)
    -> dphi_q, dphi_k (..., N, f), dv (..., N, d_v), dlog_g (..., N) or None.
    A pass forwards carries ``(S, z)`` and gives ``dphi(q_i)``; a pass backwards carries ``(R, r)`` and
    gives ``dphi(k_j)`` and ``dv_j``. Nothing of size ``N x f x d_v`` is ever held. Torch tensors.
    """
    n = int(v.shape[-2])
    g = [None if log_g is None else log_g[..., t].exp()[..., None] for t in range(n)]  # g_t: (..., 1)
    a, eta, dphi_q = _forwards(phi_q, phi_k, v, dout, g, eps, normalize)  # a: (..., N, d_v), eta: (..., N)
    dphi_k, dv = _backwards(phi_q, phi_k, v, a, eta, g)
    dlog_g = None
    if log_g is not None:  # d b_l = phi(q_l) . dphi(q_l) - phi(k_l) . dphi(k_l); d log g_t: its suffix sum
        db = (phi_q * dphi_q).sum(-1) - (phi_k * dphi_k).sum(-1)  # (..., N)
        dlog_g = db.flip(-1).cumsum(-1).flip(-1)
    return dphi_q, dphi_k, dv, dlog_g


def _forwards(phi_q: Any, phi_k: Any, v: Any, dout: Any, g: list, eps: float, normalize: bool) -> tuple:
    """Prefix states: ``S_i, z_i`` as the forward pass makes them, and ``a_i``, ``eta_i``, ``dphi(q_i)``."""
    torch = ops.torch_module()
    S = phi_k.new_zeros((*phi_k.shape[:-2], phi_k.shape[-1], v.shape[-1]))  # (..., f, d_v)
    z = phi_k.new_zeros((*phi_k.shape[:-2], phi_k.shape[-1]))  # (..., f)
    a, eta, dphi_q = [], [], []
    for i in range(int(v.shape[-2])):
        if g[i] is not None:  # forget, then add
            S, z = g[i][..., None] * S, g[i] * z
        S, z = linear_step(S, z, phi_k[..., i, :], v[..., i, :])
        num, den = read(S, z, phi_q[..., i, :])  # (..., d_v), (...,)
        a_i, eta_i = dout[..., i, :], torch.zeros_like(den)
        if normalize:
            c = den.clamp_min(eps)
            a_i = a_i / c[..., None]
            eta_i = -(a_i * num).sum(-1) / c * (den >= eps)  # 0 where the clamp is active
        a.append(a_i)
        eta.append(eta_i)
        dphi_q.append((S @ a_i[..., None])[..., 0] + eta_i[..., None] * z)  # S_i a_i + eta_i z_i
    return torch.stack(a, -2), torch.stack(eta, -1), torch.stack(dphi_q, -2)


def _backwards(phi_q: Any, phi_k: Any, v: Any, a: Any, eta: Any, g: list) -> tuple[Any, Any]:
    """Suffix states, from the last token to the first: ``R_j, r_j``, and ``dphi(k_j)``, ``dv_j``."""
    torch = ops.torch_module()
    n = int(v.shape[-2])
    R = phi_q.new_zeros((*phi_q.shape[:-2], phi_q.shape[-1], v.shape[-1]))  # (..., f, d_v)
    r = phi_q.new_zeros((*phi_q.shape[:-2], phi_q.shape[-1]))  # (..., f)
    dphi_k, dv = [None] * n, [None] * n
    for j in reversed(range(n)):
        if j + 1 < n and g[j + 1] is not None:  # R_j = g_{j+1} R_{j+1} + phi(q_j) a_j^T
            R, r = g[j + 1][..., None] * R, g[j + 1] * r
        R = R + phi_q[..., j, :, None] * a[..., j, None, :]
        r = r + eta[..., j, None] * phi_q[..., j, :]
        dphi_k[j] = (R @ v[..., j, :, None])[..., 0] + r  # R_j v_j + r_j: (..., f)
        dv[j] = (phi_k[..., j, None, :] @ R)[..., 0, :]  # R_j^T phi(k_j): (..., d_v)
    return torch.stack(dphi_k, -2), torch.stack(dv, -2)


def causal_linear_attention(q: Any, k: Any, v: Any, phi: FeatureMap, plan: fast.Plan, *, log_g: Any = None,
                            normalize: bool = True, eps: float = 1e-6, chunk_size: int = 64,
                            features: bool = False) -> Any:
    """Causal linear attention as an autograd Function: its backward pass runs in O(N) memory.

    Called by :func:`linattn_core.linear_attention` and
    :func:`linattn_core.decay.decayed_linear_attention` with their arguments checked and resolved, and
    the ``plan`` of :func:`linattn_core.fast.which` for them: it validates and decides nothing again.

    Parameters
    ----------
    q, k : torch.Tensor, shape (..., N, d)
    v : torch.Tensor, shape (..., N, d_v)
    phi : FeatureMap
        An elementwise map is applied a block at a time, in the backward too; any other is applied
        to the whole sequence with ordinary autograd, and its features are the inputs.
    plan : fast.Plan
        Which forms run the forward and the backward pass.
    log_g : torch.Tensor, shape (..., N), optional
        ``log g_t`` of a decaying state, one gate per token; ``None`` for no decay. Its gradient is
        computed too.
    normalize : bool
        Divide by ``max(den, eps)`` (True) or return the numerator alone.
    eps : float
    chunk_size : int
        ``C``; any ``N`` works with any ``C``.
    features : bool
        ``q`` and ``k`` are already ``phi(q)`` and ``phi(k)`` (``phi`` then only names the map in
        the warning about denominators <= 0).

    Returns
    -------
    out : torch.Tensor, shape (..., N, d_v)
        Equal to :func:`linattn_core.kernel_attention` (or the decayed reference) up to rounding.
    """
    # q, k: (..., N, d), v: (..., N, d_v), log_g: (..., N)
    if features or isinstance(phi, Identity):
        x_q, x_k, per_block = q, k, None
    elif phi.elementwise:
        x_q, x_k, per_block = q, k, phi
    else:
        x_q, x_k = phi.pair(q, k, causal=True)  # (..., N, d_phi): whole, through ordinary autograd
        per_block = None
    setup = (per_block, float(eps), int(chunk_size), bool(normalize), plan)
    return _function().apply(x_q, x_k, v, log_g, phi, setup)


@functools.cache
def _function() -> type:
    """The ``torch.autograd.Function`` (made on first use: importing this module imports no torch)."""
    torch = ops.torch_module()

    class CausalLinearAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x_q, x_k, v, log_g, phi_warn, setup):
            # x_q, x_k: (..., N, d) inputs of phi (its features when phi is None), v: (..., N, d_v)
            phi, eps, C, normalize, plan = setup
            ctx.save_for_backward(x_q, x_k, v, log_g)  # only the inputs: nothing per token
            ctx.setup = setup
            out, den = fast.causal_forward(plan, x_q, x_k, v, log_g, phi, eps, C, normalize)
            if normalize:
                warn_nonpositive(den, phi_warn, stacklevel=4)
            return out

        @staticmethod
        def backward(ctx, dout):
            phi, eps, C, normalize, plan = ctx.setup
            grads = fast.causal_backward(plan, *ctx.saved_tensors, dout, phi, eps, C, normalize)
            return (*grads, None, None)

    return CausalLinearAttention
