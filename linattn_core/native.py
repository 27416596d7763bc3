"""The compiled chunked kernel, in public: is it here, which instruction sets, switch it off, call it.

The kernel and its loader live in the speed tier (``linattn_core.fast.kernel``, ``fast/_chunked.c``);
this module is the stable name the chapters, the bench and the tests use. Causal
``linear_attention`` with ``method="chunked"`` (or ``"auto"``) on CPU float32 torch tensors, without
autograd, with ``identity``, ``relu`` or ``elu+1`` (or features computed first, for the other maps)
runs it; with autograd, the same inputs train through its backward pass (:func:`chunked_backward`,
which ``linattn_core.linear_grad`` calls). :func:`switched_off` or ``LINATTN_NATIVE=0`` runs the
torch forms instead, and ``LINATTN_NATIVE=avx2`` picks that instruction set.

>>> from linattn_core import native
>>> native.isas()          # doctest: +SKIP
('avx512', 'avx2')
>>> "static void FN(scores)" in native.source("_chunked_body.h")
True
"""

from __future__ import annotations

from .fast.kernel import (
                          available,
                          chunked,
                          chunked_backward,
                          default_isa,
                          isas,
                          source,
                          supports,
                          switched_off,
)

__all__ = ["available", "chunked", "chunked_backward", "default_isa", "isas", "source", "supports",
           "switched_off"]
