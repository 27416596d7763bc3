"""The compiled chunked kernel (``_chunked.c``): whether it is here, what it takes, and the checked call.

Causal ``linear_attention`` with ``method="chunked"`` (or ``"auto"``) on CPU torch float32 tensors,
without autograd and with the feature map ``identity``, ``relu`` or ``elu+1`` (or features computed
beforehand, as for Performer and cosFormer), runs the fused kernel of ``_chunked.c``: the chunkwise
form of :func:`linattn_core.linear.causal_chunked`, done one chunk at a time in the core's cache, in
one pass over q, k and v. Everything else, and every machine where the kernel was not built, uses
the torch forms (:mod:`.blocked` causal, :mod:`.torch_cpu` non-causal, or the references in
``linear.py``); all are tested against the
same float64 references. :mod:`linattn_core.fast.kernel` is this module's public face.

Its backward pass (``_chunked_back.h``, :func:`chunked_backward`) gives the gradients of the same
inputs: :mod:`linattn_core.linear_grad` calls it (through ``fast.causal_backward``) when such an input
needs a gradient; a first pass keeps the state before every chunk, a second walks the chunks back.
The delta rule has its own pair (``_delta.h``, :func:`delta_rule` and :func:`delta_rule_backward`): the
recurrence token by token with the state in cache, the same keep-and-walk-back scheme for the
gradients; :mod:`linattn_core.fast.delta` makes it an autograd Function for ``delta_rule_attention``.

The kernel is a CPython extension that ``pip install`` builds (``setup.py``; optional, so that a
machine without a C compiler still installs the package). It has code for AVX-512 and for AVX2 and
uses the best one the CPU runs. To time the torch forms instead, use :func:`switched_off` or set
``LINATTN_NATIVE=0``; ``LINATTN_NATIVE=avx2`` picks that instruction set (to see what a CPU without
AVX-512 would run).

Its threads are its own (started per call), not torch's. Right after a torch op, torch's idle OpenMP
workers spin for a while before they sleep (libgomp's default), on the same cores: a program that
alternates torch ops and this kernel can set ``OMP_WAIT_POLICY=PASSIVE`` before torch loads, as the test
suite and the benchmark's non-causal pass (:func:`linattn_core.tools.bench.noncausal.measure_apart`) do.

>>> from linattn_core.fast import kernel
>>> kernel.isas()          # doctest: +SKIP
('avx512', 'avx2')
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import _backend as ops
from ..feature_maps import EluPlusOne, FeatureMap, Identity, ReLU
from . import pages

try:
    # the extension module by its full name: a relative "from . import" would name the package
    import linattn_core.fast._chunked as _chunked
except ImportError:  # not built here (no compiler when installed): the torch forms are used
    _chunked = None

__all__ = ["available", "chunked", "chunked_backward", "default_isa", "delta_rule", "delta_rule_backward",
           "isas", "noncausal", "source", "supports", "supports_delta", "switched_off"]

_SOURCES = ("_chunked.c", "_chunked_body.h", "_chunked_back.h", "_delta.h")  # the C files, shipped

_off = 0  # depth of switched_off() blocks


_ISAS: tuple[str, ...] = tuple(_chunked.isas()) if _chunked is not None else ()  # the CPU stays the same


def isas() -> tuple[str, ...]:
    """The instruction sets the compiled kernel can use on this CPU, best first (empty: no kernel)."""
    return _ISAS


def default_isa() -> str | None:
    """The instruction set a call uses by default: ``LINATTN_NATIVE`` when it names one of :func:`isas`,
    else the best of them (None when there is no kernel or it is switched off)."""
    return (_env_isa() or _ISAS[0]) if available() else None


def _env_isa() -> str | None:
    wanted = os.environ.get("LINATTN_NATIVE", "")
    return wanted if wanted in _ISAS else None


def source(filename: str = "_chunked_body.h") -> str:
    """The text of one of the kernel's C files (``_SOURCES``: the entry point, the forward, the backward,
    the delta rule)."""
    if filename not in _SOURCES:
        raise ValueError(f"filename must be one of {_SOURCES}, got {filename!r}")
    return (Path(__file__).parent / filename).read_text(encoding="utf-8")


def available() -> bool:
    """True when the compiled kernel is built, runs on this CPU and is not switched off."""
    return bool(isas()) and not _off and os.environ.get("LINATTN_NATIVE", "1") != "0"


@contextlib.contextmanager
def switched_off() -> Iterator[None]:
    """Within this block ``linear_attention`` uses its torch forms, e.g. to time them against the kernel.

    It is one switch for the whole process (not per thread), like ``LINATTN_NATIVE=0``.
    """
    global _off
    _off += 1
    try:
        yield
    finally:
        _off -= 1


# exact types: a subclass may change the formula
_PHI_CODES = {} if _chunked is None else {
    Identity: _chunked.PHI_IDENTITY, ReLU: _chunked.PHI_RELU, EluPlusOne: _chunked.PHI_ELU1}


def _phi_code(phi: FeatureMap) -> int | None:
    return _PHI_CODES.get(type(phi))


def supports(x: Any, phi: FeatureMap) -> bool:
    """Would :func:`chunked` take a CPU torch tensor like ``x`` with the feature map ``phi``?"""
    if not available() or _phi_code(phi) is None:
        return False
    torch = ops.torch_module()
    return ops.is_torch(x) and x.device.type == "cpu" and x.dtype == torch.float32


def supports_delta(x: Any) -> bool:
    """Would :func:`delta_rule` take a CPU torch tensor like ``x``? (A numpy array imports no torch.)"""
    if not ops.is_torch(x) or not available():
        return False
    return x.device.type == "cpu" and x.dtype == ops.torch_module().float32


def _chunks(n: int, C: int) -> int:
    """Chunks of ``C`` tokens in ``n`` (C past n: one): how many states the delta rule keeps."""
    return -(-n // max(1, min(C, n)))


def _checked(tensors: dict[str, Any], phi: FeatureMap | None, C: int, eps: float | None, threads: int | None,
             isa: str | None, *, n_k: int | None = None) -> tuple:
    """Checks what the entry points take (the compiled code trusts it): -> code, (nb, n, d, d_v),
    C, eps, threads, isa. ``tensors`` holds Q, K, V first, then tensors shaped like Q, V, the
    denominators or the state; the delta rule has no feature map and no eps (``phi``, ``eps`` None).
    ``n_k``: K and V have that many tokens instead of Q's (the non-causal form)."""
    torch = ops.torch_module()
    if _chunked is None:
        raise RuntimeError("linattn_core.fast._chunked was not built: reinstall with a C compiler (gcc)")
    code = None if phi is None else _phi_code(phi)
    if phi is not None and code is None:
        raise ValueError(f"the compiled kernel has no feature map {phi!r}: use identity, relu or elu+1")
    for name, t in tensors.items():
        if not ops.is_torch(t) or t.device.type != "cpu" or t.dtype != torch.float32:
            raise TypeError(f"{name} must be a CPU float32 torch tensor, got {ops._describe(t)}"
                            f"{' on ' + str(t.device) if ops.is_torch(t) else ''}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (shape {ops.shape_str(t)}, strides {t.stride()})")
    Q, K, V = tensors["Q"], tensors["K"], tensors["V"]
    if Q.ndim != 3 or K.ndim != 3 or V.ndim != 3:
        raise ValueError(f"Q, K, V must be (B, N, d), (B, N, d), (B, N, d_v); got {ops.shape_str(Q)}, "
                         f"{ops.shape_str(K)}, {ops.shape_str(V)}")
    nb, n, d = (int(s) for s in Q.shape)
    d_v = int(V.shape[-1])
    C = ops.check_positive_int(C, "chunk_size")
    n_kv = n if n_k is None else n_k
    like = {"K": (nb, n_kv, d), "V": (nb, n_kv, d_v), "out": (nb, n, d_v), "den": (nb, n),
            "dout": (nb, n, d_v), "dQ": (nb, n, d), "dK": (nb, n, d), "dV": (nb, n, d_v), "beta": (nb, n),
            "dy": (nb, n, d_v), "dS": (nb, d, d_v)}
    if "kept" in tensors:  # the states before each chunk, as delta_rule kept them
        like["kept"] = (nb, _chunks(n, C), d, d_v)
    for name, t in tensors.items():
        if name != "Q" and tuple(t.shape) != like[name]:
            raise ValueError(f"{name} must have shape {like[name]} for Q of shape {ops.shape_str(Q)} and V"
                             f" of shape {ops.shape_str(V)}, got {ops.shape_str(t)}")
    if min(nb, n, n_kv, d, d_v) < 1:
        raise ValueError(f"empty input: Q {ops.shape_str(Q)}, V {ops.shape_str(V)}")
    eps = None if eps is None else ops.check_eps(eps)
    threads = ops.check_positive_int(torch.get_num_threads() if threads is None else threads, "threads")
    if isa is None:  # LINATTN_NATIVE's choice; without one the compiled code takes the best
        isa = _env_isa()
    if isa is not None and isa not in _ISAS:
        raise ValueError(f"isa must be one of {_ISAS} on this CPU, got {isa!r}")
    return code, (nb, n, d, d_v), C, eps, min(threads, 64), isa


def chunked(Q: Any, K: Any, V: Any, phi: FeatureMap, eps: float, C: int, out: Any, den: Any, *,
            threads: int | None = None, isa: str | None = None) -> None:
    """Causal chunked linear attention into ``out`` and ``den`` (the unclamped denominators).

    Q, K: (B, N, d), V: (B, N, d_v), out: (B, N, d_v), den: (B, N); contiguous CPU float32 tensors.
    ``threads`` defaults to ``torch.get_num_threads()``; ``isa`` (``"avx512"``, ``"avx2"``) to
    :func:`default_isa`. The arguments are checked here, since the compiled code trusts them.
    """
    tensors = {"Q": Q, "K": K, "V": V, "out": out, "den": den}
    code, (nb, n, d, d_v), C, eps, threads, isa = _checked(tensors, phi, C, eps, threads, isa)
    # every buffer of the call, its threads' included, lives in one workspace allocated here
    floats = _chunked.workspace(nb, n, d, d_v, C, threads, isa)
    ws = Q.new_empty((floats,))
    _chunked.forward(Q.data_ptr(), K.data_ptr(), V.data_ptr(), out.data_ptr(), den.data_ptr(),
                     nb, n, d, d_v, C, code, eps, threads, isa, ws.data_ptr(), floats)


def noncausal(Q: Any, K: Any, V: Any, phi: FeatureMap, eps: float, out: Any, den: Any, *,
              threads: int | None = None, isa: str | None = None) -> None:
    """Non-causal linear attention into ``out`` and ``den`` (the unclamped denominators): the state
    ``S = phi(K)^T V``, ``z = colsum phi(K)`` of each sequence, then ``out = phi(Q) S / max(phi(Q) z, eps)``.

    Q: (B, N_q, d), K: (B, N_k, d), V: (B, N_k, d_v), out: (B, N_q, d_v), den: (B, N_q); contiguous CPU
    float32 tensors. ``threads`` and ``isa`` as for :func:`chunked`; checked here. Chunks of 32 tokens: the
    features of a chunk are computed once into a buffer that stays in cache (``z`` summed, and ``phi(q) . z``
    taken, while they are in registers), the products read them there while the next chunk's inputs are
    fetched; an output of 16 MiB or more is written past the cache (non-temporal stores).
    """
    tensors = {"Q": Q, "K": K, "V": V, "out": out, "den": den}
    n_k = int(K.shape[1]) if ops.is_torch(K) and K.ndim == 3 else None  # else _checked says what is wrong
    code, (nb, n, d, d_v), _, eps, threads, isa = _checked(tensors, phi, 1, eps, threads, isa, n_k=n_k)
    floats = _chunked.noncausal_workspace(nb, n, n_k, d, d_v, threads, isa)
    ws = Q.new_empty((floats,))
    _chunked.noncausal(Q.data_ptr(), K.data_ptr(), V.data_ptr(), out.data_ptr(), den.data_ptr(),
                       nb, n, n_k, d, d_v, code, eps, threads, isa, ws.data_ptr(), floats)


def chunked_backward(Q: Any, K: Any, V: Any, dout: Any, phi: FeatureMap, eps: float, C: int,
                     normalize: bool, *, threads: int | None = None, isa: str | None = None) -> tuple:
    """The gradients ``(dQ, dK, dV)`` of causal chunked linear attention for the output's ``dout``.

    Q, K: (B, N, d), V, dout: (B, N, d_v), contiguous CPU float32 tensors; Q and K are the inputs of
    ``phi`` (and dQ, dK their gradients). ``normalize=False``: the numerator alone. Each thread takes
    whole sequences, and keeps the state before each of its sequence's chunks (N / C states of
    d x d_v): O(N) memory, nothing of size N x d x d_v.
    """
    tensors = {"Q": Q, "K": K, "V": V, "dout": dout}
    code, (nb, n, d, d_v), C, eps, threads, isa = _checked(tensors, phi, C, eps, threads, isa)
    dQ, dK, dV = (pages.empty(tuple(x.shape), x) for x in (Q, K, V))  # large ones on huge pages
    floats = _chunked.workspace(nb, n, d, d_v, C, threads, isa, True)
    ws = Q.new_empty((floats,))
    pointers = (x.data_ptr() for x in (Q, K, V, dout, dQ, dK, dV))
    _chunked.backward(*pointers, nb, n, d, d_v, C, code, eps, bool(normalize), threads, isa, ws.data_ptr(),
                      floats)
    return dQ, dK, dV


def delta_rule(Q: Any, K: Any, V: Any, beta: Any, C: int, *, keep: bool = False, threads: int | None = None,
               isa: str | None = None) -> tuple:
    """The delta rule (:func:`linattn_core.delta.delta_rule_attention` on features already computed):
    ``(y, S, kept)``.

    Q, K: (B, N, d) the features (unit rows for a stable update), V: (B, N, d_v), beta: (B, N);
    contiguous CPU float32 tensors. Returns y: (B, N, d_v), the final state S: (B, d, d_v) and, with
    ``keep``, the state before each chunk of ``C`` tokens, kept: (B, ceil(N / C), d, d_v), which
    :func:`delta_rule_backward` needs (else None). Each thread takes whole sequences.
    """
    tensors = {"Q": Q, "K": K, "V": V, "beta": beta}
    _, (nb, n, d, d_v), C, _, threads, isa = _checked(tensors, None, C, None, threads, isa)
    y = pages.empty((nb, n, d_v), V)
    S = V.new_empty((nb, d, d_v))
    kept = V.new_empty((nb, _chunks(n, C), d, d_v)) if keep else None
    floats = _chunked.delta_workspace(nb, n, d, d_v, C, threads, isa)
    ws = Q.new_empty((floats,))
    pointers = [x.data_ptr() for x in (Q, K, V, beta, y, S)] + [0 if kept is None else kept.data_ptr()]
    _chunked.delta_forward(*pointers, nb, n, d, d_v, C, threads, isa, ws.data_ptr(), floats)
    return y, S, kept


def delta_rule_backward(Q: Any, K: Any, V: Any, beta: Any, kept: Any, dy: Any, dS: Any, C: int, *,
                        threads: int | None = None, isa: str | None = None) -> tuple:
    """The gradients ``(dQ, dK, dV, dbeta)`` of :func:`delta_rule` for the outputs' ``dy`` and ``dS``.

    Q, K, V, beta and C as given to :func:`delta_rule`, ``kept`` what it kept, dy: (B, N, d_v), dS:
    (B, d, d_v) or None (the final state unused). The backward recomputes one chunk's states at a
    time from ``kept`` and walks it back: O(N) memory.
    """
    tensors = {"Q": Q, "K": K, "V": V, "beta": beta, "kept": kept, "dy": dy}
    if dS is not None:
        tensors["dS"] = dS
    _, (nb, n, d, d_v), C, _, threads, isa = _checked(tensors, None, C, None, threads, isa)
    dQ, dK, dV = (pages.empty(tuple(x.shape), x) for x in (Q, K, V))
    dbeta = beta.new_empty(tuple(beta.shape))
    floats = _chunked.delta_workspace(nb, n, d, d_v, C, threads, isa, True)
    ws = Q.new_empty((floats,))
    pointers = [x.data_ptr() for x in (Q, K, V, beta, kept, dy)]
    pointers += [0 if dS is None else dS.data_ptr()] + [x.data_ptr() for x in (dQ, dK, dV, dbeta)]
    _chunked.delta_backward(*pointers, nb, n, d, d_v, C, threads, isa, ws.data_ptr(), floats)
    return dQ, dK, dV, dbeta
