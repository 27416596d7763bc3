"""Gates per key channel (GLA), chunked, with the scores inside a chunk as two matrix products.

The reference form (``decay._chunked``) evaluates the decayed scores of a chunk of ``C`` tokens as
``A_ij = sum_c q_ic k_jc exp(b_ic - b_jc)``: ``C x C x d_phi`` exponentials per chunk, which is where
a training step of GLA spends its time. The exponential of a difference is a product, so for any
reference point ``r_c``::

    A = tril( (Q * exp(b - r)) @ (K * exp(r - b))^T )

two ``C x d_phi`` exponentials and one matrix product, exactly the same numbers in exact arithmetic
(fla's GLA kernels do the same). In floating point it holds while both factors are ordinary numbers:
with ``b`` falling by ``R_c = b_0c - b_(C-1)c`` across a chunk and ``r`` its midpoint, every exponent
lies in ``[-R/2, R/2]``. The form is used when ``R/2 <= log(max)/2`` for every chunk and channel
(float32: ``R <= 88.7``; float64: ``R <= 709``), so each factor lies between ``max^-1/2`` and
``max^1/2``: neither overflows, neither comes near the subnormals where precision is lost, and the
features they multiply keep the other half of the exponent range. Otherwise :func:`chunked` returns
None and the log-space reference runs (gates near 0, where one chunk's decay underflows anyway).
A GLA gate ``exp(logsigmoid(x) / 16)`` falls by more than 88.7 over a chunk of 16 tokens only where
``x`` stays below about -95 throughout, so in training the factored form is what runs.

Above the diagonal (``j > i``) the factored products are ``exp(b_j - b_i) >= 1``, up to ``e^R``
times the features, and may be ``inf`` in float32; they are discarded by ``where`` (which also gives
them a zero gradient, and the products' backward never reads them), so they cannot reach a result.

All chunks are computed at once (the sequence padded to whole chunks with tokens that neither decay
nor write), and only the carried state ``(S, z)`` steps from chunk to chunk. Every op is an ordinary
differentiable torch op: this form trains by autograd, unlike the buffer-writing forms of this tier.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _backend as ops


def factored_ok(log_g: Any, C: int) -> bool:
    """Whether the factored scores are safe for these gates in chunks of ``C`` tokens (module docstring).

    log_g: (..., N, f) -> True when every chunk's fall ``R = -sum log g`` over its tokens after the
    first is at most ``log(max)`` of the dtype, so that each factor ``exp(+-R/2)`` stays in
    ``[max^-1/2, max^1/2]``.
    """
    torch = ops.torch_module()
    C = min(C, int(log_g.shape[-2]))
    L = _padded(log_g.detach(), C)
    L = L.reshape(*L.shape[:-2], -1, C, L.shape[-1])  # (..., m, C, f)
    fall = -L[..., 1:, :].sum(-2)  # (..., m, f): R = b_0 - b_(C-1)
    return fall.numel() == 0 or float(fall.max()) <= math.log(torch.finfo(log_g.dtype).max)


def _padded(x: Any, C: int) -> Any:
    """x: (..., N, e) -> (..., m * C, e), zeros after the last token: a zero log-gate keeps the state and
    a zero key writes nothing."""
    torch = ops.torch_module()
    pad = -int(x.shape[-2]) % C
    return torch.nn.functional.pad(x, (0, 0, 0, pad)) if pad else x


def chunked(phi_q: Any, phi_k: Any, v: Any, log_g: Any, C: int) -> tuple[Any, Any, Any, Any] | None:
    """``decay._chunked`` for torch tensors with factored scores, or None where they are not safe.

    phi_q, phi_k: (..., N, f), v: (..., N, d_v), log_g: (..., N, 1 or f) -> num (..., N, d_v),
    den (..., N), S (..., f, d_v), z (..., f); or None (:func:`factored_ok`).
    """
    if not factored_ok(log_g, C):
        return None
    torch = ops.torch_module()
    n, f, d_v = int(phi_q.shape[-2]), int(phi_q.shape[-1]), int(v.shape[-1])
    C = min(C, n)  # one chunk when the sequence is shorter: padding it out would only cost
    lead = tuple(phi_q.shape[:-2])
    Q, K, V, L = (_padded(x, C) for x in (phi_q, phi_k, v, log_g.expand(*lead, n, f)))
    Q, K, V, L = (x.reshape(*lead, -1, C, x.shape[-1]) for x in (Q, K, V, L))  # (..., m, C, .)
    b = torch.cumsum(L, -2)  # (..., m, C, f): from each chunk's start
    r = ((b[..., :1, :] + b[..., -1:, :]) / 2).detach()  # (..., m, 1, f): the midpoint; nothing depends on it
    E = torch.exp(b - r)  # (..., m, C, f): each entry within [max^-1/2, max^1/2] (factored_ok)
    Qf, Kf = Q * E, K / E  # phi(q_i) e^(b_i - r), phi(k_j) e^(r - b_j)
    A = torch.where(ops.causal_mask(C, Q), Qf @ Kf.transpose(-1, -2), 0.0)  # (..., m, C, C)
    Q_in = Qf * torch.exp(r)  # phi(q_i) e^(b_i): decayed from the chunk's start to token i (e^r underflows
    # where the chunk's first gate is near 0: what is lost is below e^(R/2) times the smallest float)
    K_out = Kf * torch.exp(b[..., -1:, :] - r)  # phi(k_j) e^(b_last - b_j): from j to the chunk's end
    last = torch.exp(b[..., -1, :])  # (..., m, f): the whole chunk's decay
    U, u = K_out.transpose(-1, -2) @ V, K_out.sum(-2)  # (..., m, f, d_v), (..., m, f): what a chunk writes
    S, z = Q.new_zeros(lead + (f, d_v)), Q.new_zeros(lead + (f,))
    # the state each chunk starts from. unbind, not an index per chunk: the gradient of an index is a
    # zero tensor of the whole input, one per chunk
    S_in, z_in = [], []
    for g_t, U_t, u_t in zip(last.unbind(-2), U.unbind(-3), u.unbind(-2), strict=True):
        S_in.append(S)
        z_in.append(z)
        S = g_t[..., :, None] * S + U_t
        z = g_t * z + u_t
    num = A @ V + Q_in @ torch.stack(S_in, -3)
    den = A.sum(-1) + (Q_in @ torch.stack(z_in, -2)[..., None])[..., 0]
    return num.reshape(*lead, -1, d_v)[..., :n, :], den.reshape(*lead, -1)[..., :n], S, z
