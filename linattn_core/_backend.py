"""numpy/torch dispatch, dtype handling and input validation, shared by every entry point.

The package never imports torch itself: a tensor is recognised through ``sys.modules``, so a reader
who only uses numpy never pays for ``import torch``. Every public function validates its inputs here,
*before* any computation, and raises a message that names the argument and the shapes involved.

Glossary (the names used across the package)

========  =====================================================
symbol    meaning
========  =====================================================
``q``     queries, ``(..., N_q, d)``
``k``     keys, ``(..., N_k, d)``
``v``     values, ``(..., N_k, d_v)``
``phi``   the feature map, ``(..., N, d) -> (..., N, d_phi)``
``S``     the state ``sum_j phi(k_j) v_j^T``, ``(..., d_phi, d_v)``
``z``     the normalizer ``sum_j phi(k_j)``, ``(..., d_phi)``
========  =====================================================
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

_NUMPY_FLOATS = (np.float16, np.float32, np.float64)
_NUMPY_LOW = (np.float16,)  # computed in float32, returned in the input dtype


def torch_module() -> Any:
    """The torch module if it is already imported, else None (we never import it ourselves)."""
    return sys.modules.get("torch")


def is_torch(x: Any) -> bool:
    """True if ``x`` is a torch tensor (without importing torch)."""
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def _describe(x: Any) -> str:
    if is_torch(x):
        return f"torch.Tensor[{x.dtype}]"
    if isinstance(x, np.ndarray):
        return f"numpy.ndarray[{x.dtype}]"
    return type(x).__name__


def shape_str(x: Any) -> str:
    """A shape written like a tuple, the same for numpy and torch: ``(2, 5, 8)``."""
    return str(tuple(int(s) for s in x.shape))


@dataclass(frozen=True)
class Backend:
    """What the inputs were: which library, which dtype, which device.

    ``compute_dtype`` is the dtype the arithmetic runs in (float32 for float16/bfloat16 inputs).
    """

    is_torch: bool
    dtype: Any
    compute_dtype: Any
    device: Any = None

    def to_compute(self, x: Any) -> Any:
        """Cast an input to the compute dtype (no copy when it already has it)."""
        if self.is_torch:
            return x if x.dtype == self.compute_dtype else x.to(self.compute_dtype)
        return x if x.dtype == self.compute_dtype else x.astype(self.compute_dtype)

    def to_output(self, x: Any) -> Any:
        """Cast a result back to the input dtype."""
        if self.is_torch:
            return x if x.dtype == self.dtype else x.to(self.dtype)
        return x if x.dtype == self.dtype else x.astype(self.dtype)


def backend_of(*arrays: Any, names: tuple[str, ...] | None = None) -> Backend:
    """Check that all arrays share one backend, one float dtype and one device; describe them.

    Raises
    ------
    TypeError
        For anything but numpy arrays / torch tensors, mixed backends, mixed dtypes or devices,
        and non-floating dtypes (integers, booleans, complex numbers).
    """
    names = names or tuple(f"argument {i}" for i in range(len(arrays)))
    kinds = []
    for name, x in zip(names, arrays, strict=False):
        if is_torch(x):
            kinds.append("torch")
        elif isinstance(x, np.ndarray):
            kinds.append("numpy")
        else:
            raise TypeError(
                f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}"
                " (convert lists with np.asarray(..., dtype=np.float64))"
            )
    if len(set(kinds)) > 1:
        listing = ", ".join(f"{n}: {_describe(x)}" for n, x in zip(names, arrays, strict=False))
        raise TypeError(f"mixed numpy and torch inputs ({listing}): pass all numpy or all torch")
    first = arrays[0]
    for name, x in zip(names, arrays, strict=False):
        if x.dtype != first.dtype:
            raise TypeError(
                f"{name} has dtype {x.dtype} but {names[0]} has dtype {first.dtype}:"
                " cast them to one floating dtype"
            )
    if kinds[0] == "torch":
        return _torch_backend(first, arrays, names)
    if first.dtype.type not in _NUMPY_FLOATS:
        raise TypeError(
            f"{names[0]} has dtype {first.dtype}: attention needs floating inputs"
            " (float16, float32 or float64); use x.astype(np.float64)"
        )
    compute = np.dtype(np.float32) if first.dtype.type in _NUMPY_LOW else first.dtype
    return Backend(False, first.dtype, compute)


def _torch_backend(first: Any, arrays: tuple, names: tuple[str, ...]) -> Backend:
    torch = torch_module()
    if not first.is_floating_point():
        raise TypeError(
            f"{names[0]} has dtype {first.dtype}: attention needs floating inputs"
            " (float16, bfloat16, float32 or float64); use x.float()"
        )
    for name, x in zip(names, arrays, strict=False):
        if x.device != first.device:
            raise TypeError(f"{name} is on {x.device} but {names[0]} is on {first.device}")
    low = (torch.float16, torch.bfloat16)
    compute = torch.float32 if first.dtype in low else first.dtype
    return Backend(True, first.dtype, compute, first.device)


def check_qkv(q: Any, k: Any, v: Any, *, causal: bool) -> Backend:
    """Validate ``q: (..., N_q, d)``, ``k: (..., N_k, d)``, ``v: (..., N_k, d_v)``.

    Leading (batch) dims must be equal; causal attention needs ``N_q == N_k``. Returns the backend.
    """
    be = backend_of(q, k, v, names=("q", "k", "v"))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            raise ValueError(
                f"{name} has shape {shape_str(x)}: expected at least 2 dims (..., N, features)"
            )
        if any(int(s) == 0 for s in x.shape[-2:]):
            raise ValueError(f"{name} has shape {shape_str(x)}: the last two dims must be non-empty")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"k has shape {shape_str(k)} but q has shape {shape_str(q)}: the last dims (d) must match"
        )
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"v has shape {shape_str(v)} but k has shape {shape_str(k)}:"
            " they need the same number of tokens (dim -2)"
        )
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"q, k, v have shapes {shape_str(q)}, {shape_str(k)}, {shape_str(v)}:"
            " the leading (batch) dims must be equal"
        )
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"causal attention needs as many queries as keys, but q has shape {shape_str(q)}"
            f" and k has shape {shape_str(k)}"
        )
    return be


def check_eps(eps: Any) -> float:
    """``eps`` must be a positive finite number."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)):
        raise TypeError(f"eps must be a positive float, got {type(eps).__name__}")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive finite float, got {eps!r}")
    return float(eps)


def check_flag(value: Any, name: str) -> bool:
    """Boolean options are real booleans (``causal="no"`` would otherwise be truthy)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_positive_int(value: Any, name: str) -> int:
    """Sizes, counts and seeds-like options: a real integer >= 1 (``True`` and ``2.0`` are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_scale(scale: Any, d: int) -> float:
    """The score scale of softmax attention: ``1 / sqrt(d)`` when ``None``, else a finite number."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    return float(scale)


# --- small array helpers with one spelling for both backends --------------------------------------


def lib(x: Any) -> Any:
    """The array module of ``x``: ``torch`` or ``numpy``."""
    return torch_module() if is_torch(x) else np


def amax(x: Any, axis: int | tuple[int, ...], keepdims: bool = True) -> Any:
    if is_torch(x):
        return x.amax(dim=axis, keepdim=keepdims)
    return x.max(axis=axis, keepdims=keepdims)


def total(x: Any, axis: int, keepdims: bool = False) -> Any:
    if is_torch(x):
        return x.sum(dim=axis, keepdim=keepdims)
    return x.sum(axis=axis, keepdims=keepdims)


def cumsum(x: Any, axis: int) -> Any:
    if is_torch(x):
        return x.cumsum(dim=axis)
    return np.cumsum(x, axis=axis)


def clamp_min(x: Any, lo: float) -> Any:
    if is_torch(x):
        return x.clamp_min(lo)
    return np.maximum(x, lo)


def swap_last(x: Any) -> Any:
    """Transpose the last two dims: ``(..., a, b) -> (..., b, a)``."""
    if is_torch(x):
        return x.transpose(-1, -2)
    return np.swapaxes(x, -1, -2)


def tril(x: Any) -> Any:
    """``x`` with the entries above the diagonal of its last two (square) dims set to 0: key j > query i."""
    return lib(x).where(causal_mask(int(x.shape[-1]), x), x, 0.0)


def concat(xs: list, axis: int) -> Any:
    if is_torch(xs[0]):
        return torch_module().cat(xs, dim=axis)
    return np.concatenate(xs, axis=axis)


def stack(xs: list, axis: int) -> Any:
    if is_torch(xs[0]):
        return torch_module().stack(xs, dim=axis)
    return np.stack(xs, axis=axis)


def zeros(shape: tuple, like: Any) -> Any:
    """Zeros with the backend, dtype and device of ``like``."""
    if is_torch(like):
        return like.new_zeros(shape)
    return np.zeros(shape, dtype=like.dtype)


def causal_mask(n: int, like: Any) -> Any:
    """Boolean lower-triangular ``(n, n)`` mask (True where key j <= query i), on ``like``'s device."""
    if is_torch(like):
        torch = torch_module()
        i = torch.arange(n, device=like.device)
        # (comparing positions: bool ones(n, n).tril() costs ~16 ms per call on torch 2.13's CPU)
        return i[:, None] >= i[None, :]
    return np.tril(np.ones((n, n), dtype=bool))


def count_nonpositive(den: Any) -> int:
    """How many denominators are <= 0 (a Python int)."""
    if is_torch(den):
        return int((den <= 0).sum().item())
    return int(np.count_nonzero(den <= 0))


def from_numpy(a: np.ndarray, like: Any) -> Any:
    """Put a numpy array on the backend, dtype and device of ``like``."""
    if is_torch(like):
        return torch_module().as_tensor(a, dtype=like.dtype, device=like.device)
    return a.astype(like.dtype, copy=False)


def _floating_like(value: Any, name: str, like: Any) -> Any:
    """An array argument beside the inputs: floating, on ``like``'s backend and device, in its dtype."""
    kind = "torch tensor" if is_torch(like) else "numpy array"
    if is_torch(value):
        if not value.is_floating_point():
            raise TypeError(f"{name} has dtype {value.dtype}: it must be a floating {kind}")
        if value.device != like.device:
            raise TypeError(f"{name} is on {value.device} but the inputs are on {like.device}")
        return value.to(like.dtype)
    if value.dtype.type not in _NUMPY_FLOATS:
        raise TypeError(f"{name} has dtype {value.dtype}: it must be a floating {kind}")
    return value.astype(like.dtype, copy=False)


def per_token(
    value: Any, q: Any, be: Backend, name: str, *, interval: str, valid: Any, array_name: str | None = None
) -> Any:
    """A per-token parameter (decay gate, write strength) as an array shaped ``q.shape[:-1]``: ``(..., N)``.

    ``value`` is one number (used at every token) or a floating array of exactly that shape, on ``q``'s
    backend and device. ``valid(x)`` says elementwise whether a value is allowed; ``interval`` writes that
    range in messages.
    """
    lead_n = tuple(int(s) for s in q.shape[:-1])
    like = be.to_compute(q[..., :1, :1])
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        if not valid(np.float64(value)):
            raise ValueError(f"{name} must lie in {interval}, got {value!r}")
        return from_numpy(np.full(lead_n, float(value)), like)
    if not (is_torch(value) or isinstance(value, np.ndarray)) or is_torch(value) != is_torch(q):
        raise TypeError(
            f"{name} must be a number in {interval} or an array like q's of shape {lead_n} (one per token),"
            f" got {type(value).__name__}"
        )
    if tuple(int(s) for s in value.shape) != lead_n:
        raise ValueError(
            f"{name} has shape {shape_str(value)} but q has shape {shape_str(q)}:"
            f" per-token values need shape {lead_n}"
        )
    value = _floating_like(value, name, like)
    bad = int((~lib(value).isfinite(value) | ~valid(value)).sum())
    if bad:
        raise ValueError(f"{array_name or name} must lie in {interval}; {bad} of its entries do not")
    return value


def checked_values(value: Any, name: str, like: Any, shapes: dict[str, tuple[int, ...]], *,
                   interval: str, valid: Any) -> Any:
    """A number or an array of one of ``shapes``, checked, on ``like``'s backend, dtype and device.

    ``shapes`` maps how a shape is written in messages (``"(..., N)"``) to the shape itself; a number
    fills the first. ``valid(x)`` says elementwise whether a value is allowed (``interval`` writes the
    range). Used for the decay gates and, one token at a time, by the step states.
    """
    first = next(iter(shapes.values()))
    if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
        if not (math.isfinite(value) and valid(np.float64(value))):
            raise ValueError(f"{name} must lie in {interval}, got {value!r}")
        return from_numpy(np.full(first, float(value)), like)
    accepted = ", ".join(f"{text} = {shape}" for text, shape in shapes.items())
    is_array = is_torch(value) or isinstance(value, np.ndarray)
    if not is_array or is_torch(value) != is_torch(like):
        kind = "torch tensor" if is_torch(like) else "numpy array"
        raise TypeError(f"{name} must be a number in {interval} or a {kind} of shape {accepted};"
                        f" got {type(value).__name__}")
    if tuple(int(s) for s in value.shape) not in shapes.values():
        raise ValueError(f"{name} has shape {shape_str(value)}; the accepted shapes are () (one number),"
                         f" {accepted}")
    value = _floating_like(value, name, like)
    bad = int((~lib(value).isfinite(value) | ~valid(value)).sum())
    if bad:
        raise ValueError(f"{name} must lie in {interval}; {bad} of its {int(math.prod(value.shape))}"
                         " entries do not")
    return value
