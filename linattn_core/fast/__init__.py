"""The speed tier: the maths of ``linattn_core.linear``, arranged to run fast on a CPU.

``linear.linear_attention`` hands every call to :func:`linear_attention` here first; it returns None
where this tier does not apply, and the readable reference forms run instead. Which implementation
runs is decided in one place, :func:`which`:

- ``"kernel"``: the compiled kernel (:mod:`.kernel`, ``_chunked.c``), for causal chunked and for
  non-causal attention on CPU float32 torch tensors with ``identity``, ``relu`` or ``elu+1`` (or
  features computed first, for the other maps), at any length;
- ``"torch"``: the same algorithms as torch ops into reused buffers (:mod:`.torch_cpu`), for CPU
  torch tensors with an elementwise feature map (or causal features computed first) from
  ``_FAST_MIN_N`` tokens on;
- ``None``: everything else. numpy arrays; GPUs, where the batched reference forms keep the device
  busy; the recurrent and cumsum forms, which the reader asked for by name; and inputs that need
  gradients, since the fast forms write into buffers in place (``linear.py`` gives causal ones to the
  autograd Function of ``linear_grad``, whose forward comes back here without them).

Results are ordinary tensors owned by the caller, and nothing is kept between calls: each call
allocates its few MiB of buffers, which glibc hands back from its heap the next time (measured: no
page faulted in afresh); a result too large for the heap is hinted onto huge pages (:mod:`.pages`).
The backward pass has one fast form too: :func:`causal_backward`, the compiled kernel's gradients,
which ``linear_grad`` asks for first (None where it does not apply: then its torch form runs).
Gates per key channel (GLA) have one more: :func:`gated_chunked` (:mod:`.gated`), ``decay``'s chunked
form with the scores of a chunk factored into two matrix products, for torch tensors on any device
and with autograd (it is made of ordinary differentiable ops), where the gates allow it.
The delta rule has one: :func:`delta_chunked` (:mod:`.delta`), the compiled recurrence forward and
backward as an autograd Function, for CPU float32 torch tensors.
This package imports from the rest only ``_backend`` and the feature-map classes; outside it,
``linear`` calls :func:`linear_attention`, ``linear_grad`` :func:`causal_backward`, ``decay``
:func:`gated_chunked`, ``delta`` :func:`delta_chunked`, and the chapters, the benchmark and the tests
reach the compiled kernel by its one name, :mod:`linattn_core.fast.kernel` (is it here, which instruction
sets, switch it off, its C source).
"""

from __future__ import annotations

from typing import Any

from .. import _backend as ops
from ..feature_maps import FeatureMap, Identity
from . import delta, gated, kernel, pages, torch_cpu

__all__ = ["causal_backward", "delta_chunked", "gated_chunked", "kernel", "linear_attention", "which"]

_FAST_MIN_N = 512  # the torch ops pay off from here; the compiled kernel at any length


def which(q: Any, k: Any, v: Any, phi: FeatureMap, *, causal: bool, method: str) -> str | None:
    """The one decision: ``"kernel"``, ``"torch"`` or None (the reference forms of ``linear.py`` run).

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v), already checked; ``method`` is resolved
    (not ``"auto"``) and only read when ``causal``.
    """
    if not ops.is_torch(q) or q.device.type != "cpu":
        return None
    if causal and method != "chunked":
        return None
    torch = ops.torch_module()
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return None
    runs = phi if phi.elementwise else Identity()  # other maps: their features are computed first
    if kernel.supports(q, runs):
        return "kernel"
    if causal:
        return "torch" if int(q.shape[-2]) >= _FAST_MIN_N else None
    return "torch" if phi.elementwise and int(k.shape[-2]) >= _FAST_MIN_N else None


def linear_attention(q: Any, k: Any, v: Any, phi: FeatureMap, *, causal: bool, eps: float, method: str,
                     chunk_size: int) -> tuple[Any, Any] | None:
    """``(out, den)`` as the reference forms give them, or None where this tier does not apply.

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v) -> out (..., N_q, d_v), den (..., N_q).
    The arguments are the checked ones of ``linear.linear_attention`` (``method`` resolved).
    """
    form = which(q, k, v, phi, causal=causal, method=method)
    if form is None:
        return None
    torch = ops.torch_module()
    lead, n_q, d_v = tuple(q.shape[:-2]), int(q.shape[-2]), int(v.shape[-1])
    with torch.no_grad():
        if not phi.elementwise:
            q, k = phi.pair(q, k, causal=causal)  # (..., N, d_phi): Performer, cosFormer
            phi = Identity()
        Q, K, V = (x.reshape((-1, *x.shape[-2:])).contiguous() for x in (q, k, v))  # (B, N, .)
        if not causal and form == "kernel":  # the state of all keys, then every query reads it
            out, den = pages.empty((*Q.shape[:2], d_v), Q), Q.new_empty(tuple(Q.shape[:2]))
            kernel.noncausal(Q, K, V, phi, eps, out, den)
        elif not causal:
            out, den = torch_cpu.noncausal(Q, K, V, phi, eps)
        elif form == "kernel":
            out, den = pages.empty((*Q.shape[:2], d_v), Q), Q.new_empty(tuple(Q.shape[:2]))
            kernel.chunked(Q, K, V, phi, eps, min(chunk_size, n_q), out, den)
        else:
            out, den = torch_cpu.chunked(Q, K, V, phi, eps, min(chunk_size, n_q))
    return out.reshape(lead + (n_q, d_v)), den.reshape(lead + (n_q,))


def causal_backward(x_q: Any, x_k: Any, v: Any, dout: Any, phi: FeatureMap | None, eps: float,
                    chunk_size: int, normalize: bool) -> tuple[Any, Any, Any] | None:
    """The gradients ``(dx_q, dx_k, dv)`` of causal linear attention from the compiled kernel's backward
    pass, or None where it does not apply (not CPU float32 torch, a map it does not have, switched off).

    x_q, x_k: (..., N, d) the inputs of ``phi`` (its features when ``phi`` is None), v, dout: (..., N, d_v).
    """
    runs = Identity() if phi is None else phi
    if not all(kernel.supports(x, runs) for x in (x_q, x_k, v, dout)):
        return None
    Q, K, V, dO = (x.detach().reshape((-1, *x.shape[-2:])).contiguous() for x in (x_q, x_k, v, dout))
    dq, dk, dv = kernel.chunked_backward(Q, K, V, dO, runs, eps, min(chunk_size, int(Q.shape[1])), normalize)
    return dq.reshape(x_q.shape), dk.reshape(x_k.shape), dv.reshape(v.shape)


def gated_chunked(phi_q: Any, phi_k: Any, v: Any, log_g: Any, chunk_size: int) -> tuple | None:
    """``(num, den, S, z)`` of ``decay``'s chunked form with factored scores (:mod:`.gated`), or None where
    it does not apply: numpy arrays, one gate per token (its log-space scores cost only ``C x C``
    exponentials a chunk, and training gives it to ``linear_grad``), and gates that fall too fast
    within a chunk for the factored products (:func:`.gated.factored_ok`).

    phi_q, phi_k: (..., N, f) features, v: (..., N, d_v), log_g: (..., N, 1 or f), checked by ``decay``.
    """
    if not ops.is_torch(phi_q) or int(log_g.shape[-1]) == 1:
        return None
    return gated.chunked(phi_q, phi_k, v, log_g, chunk_size)


def delta_chunked(phi_q: Any, phi_k: Any, v: Any, beta: Any, chunk_size: int, reference: Any) -> tuple | None:
    """``(y, S)`` of the delta rule from the compiled kernel (:mod:`.delta`), with its own backward, or None
    where it does not apply (not CPU float32 torch, the kernel not built or switched off).

    phi_q, phi_k: (..., N, f) unit-row features, v: (..., N, d_v), beta: (..., N), checked by ``delta``;
    ``reference(Q, K, V, beta, C) -> (y, S)``, its torch form, serves gradients of gradients.
    """
    if not delta.applies(phi_q, phi_k, v, beta):
        return None
    return delta.chunked(phi_q, phi_k, v, beta, chunk_size, reference)
