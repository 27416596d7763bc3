"""The delta rule on the compiled kernel, forward and backward, as an autograd Function.

``delta._chunked`` (the reference) solves a ``C x C`` triangular system per chunk with torch ops; on a
CPU a training step of DeltaNet spends its time in those small ops and in autograd's record of them.
The compiled kernel (``_delta.h``) runs the recurrence itself, token by token, with the state
``S: (d, d_v)`` held in cache: per token one read ``S^T k``, one rank-one write and one read
``S^T q``, the same ``O(N d d_v)`` work as the chunked form without its ``C x C`` solves. The forward
keeps the state before each chunk of ``C`` tokens; the backward recomputes a chunk's states from it
and walks the chunk back token by token, so the memory stays ``O(N d_v + (N / C) d d_v)``.

The recurrence and the chunked solve are the same function of the inputs in exact arithmetic; in
float32 they differ by rounding, which the tests bound against a float64 reference.
Gradients of gradients (``create_graph=True``) are not the kernel's: there the backward runs the
reference form handed in by the caller and differentiates it with autograd.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .. import _backend as ops
from . import kernel


def applies(*tensors: Any) -> bool:
    """Whether the compiled delta rule takes these tensors: CPU float32 torch, the kernel built and on."""
    return all(kernel.supports_delta(x) for x in tensors)


def chunked(phi_q: Any, phi_k: Any, v: Any, beta: Any, C: int, reference: Callable) -> tuple[Any, Any]:
    """``(y, S)`` of the delta rule from the compiled kernel, differentiable.

    phi_q, phi_k: (..., N, f) the features (unit rows), v: (..., N, d_v), beta: (..., N), all accepted by
    :func:`applies`; ``reference(Q, K, V, beta, C) -> (y, S)`` is the torch form used for gradients of
    gradients. Returns y: (..., N, d_v) and S: (..., f, d_v), tensors owned by the caller.
    """
    torch = ops.torch_module()
    lead, n, f, d_v = tuple(phi_k.shape[:-2]), int(phi_k.shape[-2]), int(phi_k.shape[-1]), int(v.shape[-1])
    Q, K, V = (x.reshape((-1, *x.shape[-2:])).contiguous() for x in (phi_q, phi_k, v))  # (B, N, .)
    b = beta.reshape((-1, n)).contiguous()  # (B, N)
    if torch.is_grad_enabled() and any(x.requires_grad for x in (Q, K, V, b)):
        y, S = _function().apply(Q, K, V, b, C, reference)
    else:
        y, S, _ = kernel.delta_rule(Q.detach(), K.detach(), V.detach(), b.detach(), C)
    return y.reshape(lead + (n, d_v)), S.reshape(lead + (f, d_v))


@functools.cache
def _function() -> type:
    """The autograd Function, made on first use (torch is imported only when a tensor is handed in)."""
    torch = ops.torch_module()

    class DeltaRule(torch.autograd.Function):
        """y, S = delta rule(Q, K, V, beta); Q, K: (B, N, f), V: (B, N, d_v), beta: (B, N), contiguous."""

        @staticmethod
        def forward(ctx, Q, K, V, beta, C, reference):
            y, S, kept = kernel.delta_rule(Q, K, V, beta, C, keep=True)
            ctx.save_for_backward(Q, K, V, beta, kept)
            ctx.C, ctx.reference = C, reference
            ctx.set_materialize_grads(False)  # an unused S sends None: its backward term is skipped
            return y, S

        @staticmethod
        def backward(ctx, dy, dS):
            Q, K, V, beta, kept = ctx.saved_tensors
            if torch.is_grad_enabled():  # create_graph: differentiate the reference form instead
                return (*_reference_grads(ctx.reference, (Q, K, V, beta), ctx.C, dy, dS), None, None)
            if dy is None:
                dy = V.new_zeros(tuple(V.shape))
            dS = None if dS is None else dS.contiguous()
            grads = kernel.delta_rule_backward(Q, K, V, beta, kept, dy.contiguous(), dS, ctx.C)
            return (*grads, None, None)

    return DeltaRule


def _reference_grads(reference: Callable, inputs: tuple, C: int, dy: Any, dS: Any) -> list:
    """Gradients of ``reference``'s outputs with a graph of their own, for gradients of gradients."""
    torch = ops.torch_module()
    with torch.enable_grad():
        wanted = [x for x in inputs if x.requires_grad]
        outs, grads_out = [], []
        for out, g in zip(reference(*inputs, C), (dy, dS), strict=True):
            if g is not None:
                outs.append(out)
                grads_out.append(g)
        found = iter(torch.autograd.grad(outs, wanted, grads_out, create_graph=True, allow_unused=True)
                     if outs and wanted else [None] * len(wanted))
    return [next(found) if x.requires_grad else None for x in inputs]
