"""The speed tier: the maths of ``linattn_core.linear``, arranged to run fast.

Which implementation runs is decided once per call, by :func:`which`, as a :class:`Plan`: the form of
the forward pass, whether a gradient is needed, and the form of the backward pass. ``linear`` and
``decay`` ask for the plan and follow it. The forms:

- ``"kernel"``: the compiled kernel (:mod:`.kernel`, ``_chunked.c``), for causal chunked and for
  non-causal attention on CPU float32 torch tensors with ``identity``, ``relu`` or ``elu+1`` (or
  features computed first, for the other maps), at any length; its backward pass gives the gradients
  of causal calls without decay;
- ``"torch"``: the same algorithms as torch ops, a block of chunks at a time: :mod:`.blocked` for
  causal calls (forward and backward, with a decay per token, on any device) and :mod:`.torch_cpu`,
  into reused buffers, for non-causal ones; without a gradient on a CPU from ``_FAST_MIN_N`` tokens on;
- None: the reference forms of the core. numpy arrays; GPUs without a gradient, where the batched
  reference forms keep the device busy; the recurrent and cumsum forms, which the reader asked for by
  name (under plain autograd when a gradient is needed); non-causal gradients.

A causal call that needs a gradient trains through the autograd Function of ``linear_grad``, whose two
passes are :func:`causal_forward` and :func:`causal_backward` here (the kernel's where the plan says so,
else those of :mod:`.blocked`); the Function saves only its inputs, and neither pass holds anything of
size ``N x d_phi x d_v``. Results are ordinary tensors owned by the caller, and nothing is kept between
calls: each call allocates its own working memory (a block's temporaries, or the non-causal form's few
MiB of buffers, which glibc hands back from its heap the next time: measured, no page faulted in
afresh); a result too large for the heap is hinted onto huge pages (:mod:`.pages`).
Gates per key channel (GLA) have one more form: :func:`gated_chunked` (:mod:`.gated`), ``decay``'s
chunked form with the scores of a chunk factored into two matrix products, for torch tensors on any
device and with autograd (it is made of ordinary differentiable ops), where the gates allow it.
The delta rule has one: :func:`delta_chunked` (:mod:`.delta`), the compiled recurrence forward and
backward as an autograd Function, for CPU float32 torch tensors.
This package imports from the rest only ``_backend`` and the feature-map classes; outside it,
``linear`` and ``decay`` call :func:`which`, ``linear`` :func:`linear_attention`, ``linear_grad``
:func:`causal_forward` and :func:`causal_backward`, ``decay`` :func:`gated_chunked`, ``delta``
:func:`delta_chunked`, and the chapters, the benchmark and the tests reach the compiled kernel by its
one name, :mod:`linattn_core.fast.kernel` (is it here, which instruction sets, switch it off, its C
source).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import _backend as ops
from ..feature_maps import FeatureMap, Identity
from . import blocked, delta, gated, kernel, pages, torch_cpu

__all__ = ["Plan", "causal_backward", "causal_forward", "delta_chunked", "gated_chunked", "kernel",
           "linear_attention", "which"]

_FAST_MIN_N = 512  # the torch forms pay off from here without autograd; the compiled kernel at any length


@dataclass(frozen=True)
class Plan:
    """How one call runs, decided once by :func:`which`.

    forward: ``"kernel"`` (the compiled kernel), ``"torch"`` (the torch forms: :mod:`.blocked` causal,
    :mod:`.torch_cpu` non-causal) or None (the core's reference forms). grad: some input needs a
    gradient. backward: with ``grad``, ``"kernel"`` or ``"torch"`` when the autograd Function of
    ``linear_grad`` trains (chunked causal calls), None when autograd runs through the reference forms.
    """

    forward: str | None = None
    grad: bool = False
    backward: str | None = None


def which(q: Any, k: Any, v: Any, phi: FeatureMap, *, causal: bool, method: str, log_g: Any = None,
          normalize: bool = True, features: bool = False) -> Plan:
    """The one decision, forward and backward, from the checked inputs of a call.

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v); log_g: (..., N) one log-gate per token or
    None; ``features``: q and k are already ``phi(q)``, ``phi(k)``. ``method`` is read only when
    ``causal``: ``"auto"`` and ``"chunked"`` are the chunked form the fast forms compute, any other is
    the reference form the reader named. Without a gradient the fast forms run only on a CPU, without
    decay and normalized; GPUs keep the batched reference forms, whose large ops keep the device busy.
    """
    if not ops.is_torch(q):
        return Plan()
    grad = ops.torch_module().is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (q, k, v, log_g))
    if causal and method not in ("auto", "chunked"):
        return Plan(grad=grad)  # the form asked for by name, as written (under plain autograd)
    runs = phi if phi.elementwise and not features else Identity()  # others: features computed first
    compiled = log_g is None and kernel.supports(q, runs)
    if grad:  # causal: the autograd Function, in O(N) memory; non-causal: autograd through the reference
        if not causal:
            return Plan(grad=True)
        return Plan("kernel" if compiled and normalize else "torch", True, "kernel" if compiled else "torch")
    if q.device.type != "cpu" or log_g is not None or not normalize:
        return Plan()
    if compiled:
        return Plan("kernel")
    long = int((q if causal else k).shape[-2]) >= _FAST_MIN_N
    return Plan("torch" if long and (causal or phi.elementwise) else None)


def linear_attention(plan: Plan, q: Any, k: Any, v: Any, phi: FeatureMap, *, causal: bool, eps: float,
                     chunk_size: int) -> tuple[Any, Any]:
    """``(out, den)`` as the reference forms give them, by the fast form ``plan.forward``, without autograd.

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v) -> out (..., N_q, d_v), den (..., N_q).
    The arguments are the checked ones of ``linear.linear_attention``.
    """
    torch = ops.torch_module()
    lead, n_q, d_v = tuple(q.shape[:-2]), int(q.shape[-2]), int(v.shape[-1])
    with torch.no_grad():
        if not phi.elementwise:
            q, k = phi.pair(q, k, causal=causal)  # (..., N, d_phi): Performer, cosFormer
            phi = Identity()
        Q, K, V = (_batched(x) for x in (q, k, v))  # (B, N, .)
        if causal:
            out, den = causal_forward(plan, Q, K, V, None, phi, eps, chunk_size, True)
        elif plan.forward == "kernel":  # the state of all keys, then every query reads it
            out, den = pages.empty((*Q.shape[:2], d_v), Q), Q.new_empty(tuple(Q.shape[:2]))
            kernel.noncausal(Q, K, V, phi, eps, out, den)
        else:
            out, den = torch_cpu.noncausal(Q, K, V, phi, eps)
    return out.reshape(lead + (n_q, d_v)), den.reshape(lead + (n_q,))


def causal_forward(plan: Plan, x_q: Any, x_k: Any, v: Any, log_g: Any, phi: FeatureMap | None, eps: float,
                   chunk_size: int, normalize: bool) -> tuple[Any, Any]:
    """The chunked causal forward by ``plan.forward``, without autograd: out (..., N, d_v), den (..., N)
    or None (``normalize=False``).

    x_q, x_k: (..., N, d) the inputs of ``phi`` (its features when ``phi`` is None), v: (..., N, d_v),
    log_g: (..., N) or None; ``"kernel"`` plans have neither decay nor ``normalize=False``.
    """
    if plan.forward != "kernel":
        return blocked.forward(x_q, x_k, v, log_g, _per_block(phi), eps, chunk_size, normalize)
    Q, K, V = (_batched(x) for x in (x_q, x_k, v))  # (B, N, .)
    out, den = pages.empty(tuple(V.shape), V), V.new_empty(tuple(V.shape[:2]))
    C = min(chunk_size, int(Q.shape[1]))
    kernel.chunked(Q, K, V, Identity() if phi is None else phi, eps, C, out, den)
    return out.reshape(v.shape), den.reshape(v.shape[:-1])


def causal_backward(plan: Plan, x_q: Any, x_k: Any, v: Any, log_g: Any, dout: Any, phi: FeatureMap | None,
                    eps: float, chunk_size: int, normalize: bool) -> tuple[Any, Any, Any, Any]:
    """The gradients ``(dx_q, dx_k, dv, dlog_g)`` of :func:`causal_forward` by ``plan.backward``
    (``dlog_g`` None without decay).

    Shapes as for :func:`causal_forward`, dout: (..., N, d_v). A graph of the backward itself (double
    backward, ``create_graph=True``) is built by the torch form, whose ops are differentiable.
    """
    if plan.backward != "kernel" or ops.torch_module().is_grad_enabled():
        return blocked.backward(x_q, x_k, v, log_g, dout, _per_block(phi), eps, chunk_size, normalize)
    Q, K, V, dO = (_batched(x.detach()) for x in (x_q, x_k, v, dout))  # (B, N, .)
    C = min(chunk_size, int(Q.shape[1]))
    dq, dk, dv = kernel.chunked_backward(Q, K, V, dO, Identity() if phi is None else phi, eps, C, normalize)
    return dq.reshape(x_q.shape), dk.reshape(x_k.shape), dv.reshape(v.shape), None


def _batched(x: Any) -> Any:
    """(..., N, w) -> (B, N, w), contiguous: the leading dims as one batch."""
    return x.reshape((-1, *x.shape[-2:])).contiguous()


def _per_block(phi: FeatureMap | None) -> FeatureMap | None:
    """The map the torch form applies a block at a time: None where the inputs are the features."""
    return None if phi is None or isinstance(phi, Identity) else phi


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
