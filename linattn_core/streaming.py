"""Streaming decoding: a fixed-size state versus a growing softmax KV cache.

Each answers one query per step after adding the current key/value pair (causal: ``y_0 = v_0``).

- :class:`LinearAttentionState` keeps ``S = sum_j phi(k_j) v_j^T`` and ``z = sum_j phi(k_j)``:
  ``d_phi x (d_v + 1)`` numbers, whatever the number of tokens seen; :func:`linear_step` is its rule.
- :class:`~linattn_core.decay.DecayedState` (in ``decay.py``, beside its rule) forgets, then adds:
  ``S <- diag(g_t) S + phi(k_t) v_t^T`` with one gate, a gate per batch entry (head) or a gate per key
  channel (GLA), and ``z`` likewise.
- :class:`~linattn_core.delta.DeltaRuleState` (in ``delta.py``) corrects what it stores:
  ``S <- S + beta_t phi(k_t) (v_t - S^T phi(k_t))^T``.
- :class:`KVCache` keeps every key and value: memory grows linearly with ``t``.

Stepping through a sequence gives the same outputs as the whole-sequence functions:
:func:`linear_attention` (causal), :func:`~linattn_core.decay.decayed_linear_attention`,
:func:`~linattn_core.delta.delta_rule_attention` and :func:`softmax_attention`. No state writes into
a tensor in place, so a state also works under autograd (and, for generation, under ``torch.no_grad()``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _backend as ops
from .attention import normalized, warn_nonpositive
from .feature_maps import as_feature_map

__all__ = ["KVCache", "LinearAttentionState", "StepState", "linear_step", "read"]




# --- the rule, one token at a time ------------------------------------------------------------------


def linear_step(S: Any, z: Any, phi_k_t: Any, v_t: Any) -> tuple[Any, Any]:
    """One token of causal linear attention: ``S <- S + phi(k_t) v_t^T``, ``z <- z + phi(k_t)``.

    S: (..., f, d_v), z: (..., f), phi_k_t: (..., f), v_t: (..., d_v) -> the new S, z.
    """
    return S + phi_k_t[..., :, None] * v_t[..., None, :], z + phi_k_t


def read(S: Any, z: Any, phi_q_t: Any) -> tuple[Any, Any]:
    """What a state answers one query: the numerator ``phi(q_t)^T S`` and ``phi(q_t) . z`` (None without z).

    S: (..., f, d_v), z: (..., f) or None, phi_q_t: (..., f) -> (..., d_v), (...,) or None
    """
    num = (phi_q_t[..., None, :] @ S)[..., 0, :]
    return num, None if z is None else ops.total(phi_q_t * z, -1)


def _prototype(dtype: Any, like: Any) -> Any:
    """An empty array that carries the backend, compute dtype and device of a new state."""
    if like is not None:
        be = ops.backend_of(like, names=("like",))
        if be.is_torch:
            return like.new_empty((0,), dtype=be.compute_dtype)
        return np.empty((0,), dtype=be.compute_dtype)
    torch = ops.torch_module()
    if torch is not None and isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return _prototype(None, torch.empty(0, dtype=dtype))
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype is None or np_dtype.type not in (np.float16, np.float32, np.float64):  # names dtype=
        raise TypeError(f"dtype must be a numpy or torch floating dtype, got {dtype!r}")
    return _prototype(None, np.empty(0, dtype=np_dtype))


def _check_batch_shape(batch_shape: Any) -> tuple[int, ...]:
    if not (isinstance(batch_shape, (tuple, list)) and all(  # 2.5 is refused, not truncated to 2
            isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in batch_shape)):
        raise ValueError(f"batch_shape must be a tuple of ints, got {batch_shape!r}")
    shape = tuple(int(s) for s in batch_shape)
    if any(s < 1 for s in shape):
        raise ValueError(f"batch_shape must hold positive sizes, got {shape}")
    return shape


def _token(x: Any, name: str, shape: tuple[int, ...], proto: Any, cls: str) -> Any:
    """Check one token ``x: (*batch_shape, n)`` against the state; cast it to the state dtype."""
    be = ops.backend_of(x, names=(name,))
    if be.is_torch != ops.is_torch(proto):
        kind = "torch" if ops.is_torch(proto) else "numpy"
        raise TypeError(f"{name} is a {type(x).__name__} but this {cls} holds {kind} arrays")
    if tuple(int(s) for s in x.shape) != shape:
        raise ValueError(
            f"{name} has shape {ops.shape_str(x)} but this {cls} expects {shape} (*batch_shape, dim)"
        )
    if be.is_torch:
        if x.device != proto.device:  # never copied across devices behind the caller's back
            raise TypeError(f"{name} is on {x.device} but this {cls} is on {proto.device}")
        return x.to(dtype=proto.dtype)
    return x.astype(proto.dtype, copy=False)


def _copy(x: Any) -> Any:
    return x.clone() if ops.is_torch(x) else x.copy()


def _nbytes(*arrays: Any) -> int:
    return sum(int(math.prod(a.shape)) * (a.element_size() if ops.is_torch(a) else a.itemsize)
               for a in arrays)


class StepState:
    """What every step state shares: sizes, the feature map, the backend, the token checks, ``nbytes``.

    Subclasses hold their arrays (``_held``) and say how a token updates and reads them:
    :class:`LinearAttentionState` here, :class:`~linattn_core.decay.DecayedState` and
    :class:`~linattn_core.delta.DeltaRuleState` beside their rules.
    """

    def __init__(self, d: int, d_v: int, feature_map: Any, batch_shape: tuple[int, ...], dtype: Any,
                 like: Any) -> None:
        self.d = ops.check_positive_int(d, "d")
        self.d_v = ops.check_positive_int(d_v, "d_v")
        self.batch_shape = _check_batch_shape(batch_shape)
        self.phi = as_feature_map(feature_map, self.d)
        self.phi.check_streamable()  # e.g. cosFormer needs its max_len: positions are not known ahead
        self._proto = _prototype(dtype, like)
        self._out_dtype = like.dtype if like is not None else self._proto.dtype
        self.d_phi = int(self.phi.keys(ops.zeros((1, self.d), self._proto)).shape[-1])  # ask one token

    def _token(self, x: Any, name: str, dim: int) -> Any:
        # x: (*batch_shape, dim), checked and cast to the state's dtype and device
        return _token(x, name, self.batch_shape + (dim,), self._proto, type(self).__name__)

    def _query_features(self, q: Any) -> Any:
        # q: (*batch, d) -> phi(q): (*batch, d_phi), at the position of the last key added
        return self.phi.queries(q[..., None, :], offset=max(self.t - 1, 0))[..., 0, :]

    def _out(self, y: Any) -> Any:
        if ops.is_torch(y):
            return y.to(self._out_dtype)
        return y.astype(self._out_dtype, copy=False)

    def _held(self) -> tuple:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes held by the state: constant in ``t``."""
        return _nbytes(*self._held())

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(d={self.d}, d_v={self.d_v}, d_phi={self.d_phi}, phi={self.phi!r},"
            f" batch_shape={self.batch_shape}, t={self.t}, nbytes={self.nbytes})"
        )


class LinearAttentionState(StepState):
    """The fixed-size state of causal linear attention: ``S: (*batch_shape, d_phi, d_v)``, ``z``.

    Parameters
    ----------
    d, d_v : int
        Key/query and value dimensions.
    feature_map : str, FeatureMap or callable
        ``phi``, as in :func:`linear_attention`. cosFormer needs ``max_len`` here.
    batch_shape : tuple of int
        Leading dims of every token, e.g. ``(batch, heads)``.
    eps : float
        Denominators are clamped to at least ``eps``.
    dtype : numpy or torch dtype
        Of the state (float64 by default). float16/bfloat16 states are kept in float32.
    like : array or tensor, optional
        Put the state on this array's backend, dtype and device instead.

    Attributes
    ----------
    S : (*batch_shape, d_phi, d_v)
        ``sum_j phi(k_j) v_j^T`` (zeros until the first update).
    z : (*batch_shape, d_phi)
        ``sum_j phi(k_j)``.
    t : int
        Tokens added so far.

    Notes
    -----
    Features come from the map's streaming methods: :meth:`FeatureMap.queries` at the position of
    the current token, :meth:`FeatureMap.running_keys` for keys. The stabilised Performer shifts
    each key's exponent by the running maximum of the key exponents and asks for ``S`` and ``z`` to
    be rescaled whenever that maximum grows (as online softmax does): exactly the per-query
    constant the causal :func:`linear_attention` uses, so the outputs agree.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import LinearAttentionState, linear_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> state = LinearAttentionState(4, 4)
    >>> ys = np.stack([state.step(q[t], k[t], v[t]) for t in range(10)])
    >>> bool(np.allclose(ys, linear_attention(q, k, v, causal=True))), state.S.shape
    (True, (4, 4))
    """

    def __init__(self, d: int, d_v: int, feature_map: Any = "elu+1", *, batch_shape: tuple[int, ...] = (),
                 eps: float = 1e-6, dtype: Any = np.float64, like: Any = None) -> None:
        super().__init__(d, d_v, feature_map, batch_shape, dtype, like)
        self.eps = ops.check_eps(eps)
        self.reset()

    def reset(self) -> None:
        """Forget every token: ``S = 0``, ``z = 0``, ``t = 0``."""
        self.S = ops.zeros(self.batch_shape + (self.d_phi, self.d_v), self._proto)
        self.z = ops.zeros(self.batch_shape + (self.d_phi,), self._proto)
        self.t = 0
        # what the feature map's stabiliser has seen (-inf: no key yet); only a stabilised map uses it
        self._shift = ops.zeros(self.batch_shape, self._proto) - math.inf

    def _held(self) -> tuple:
        return self.S, self.z

    def _key_features(self, k: Any) -> Any:
        # k: (*batch, d) -> phi(k): (*batch, d_phi), at position t; rescales S, z when the map asks
        x = k[..., None, :]  # (*batch, 1, d): feature maps take (..., N, d)
        f, self._shift, rescale = self.phi.running_keys(x, self._shift, offset=self.t)
        if rescale is not None:  # rescale: (*batch,), puts the sums so far in the new units
            self.S = self.S * rescale[..., None, None]
            self.z = self.z * rescale[..., None]
        return f[..., 0, :]

    def update(self, k_t: Any, v_t: Any) -> None:
        """Add one key/value pair: ``S += phi(k_t) v_t^T``, ``z += phi(k_t)``.

        k_t: (*batch_shape, d), v_t: (*batch_shape, d_v)
        """
        k_t, v_t = self._token(k_t, "k_t", self.d), self._token(v_t, "v_t", self.d_v)
        f = self._key_features(k_t)  # (*batch, d_phi); first: it may rescale S and z
        self.S, self.z = linear_step(self.S, self.z, f, v_t)
        self.t += 1

    def query(self, q_t: Any) -> Any:
        """Answer one query from the state: ``phi(q_t)^T S / max(phi(q_t) . z, eps)``.

        q_t: (*batch_shape, d) -> (*batch_shape, d_v)
        """
        f = self._query_features(self._token(q_t, "q_t", self.d))  # (*batch, d_phi)
        num, den = read(self.S, self.z, f)  # (*batch, d_v), (*batch,)
        warn_nonpositive(den, self.phi)
        return self._out(normalized(num, den, self.eps))

    def step(self, q_t: Any, k_t: Any, v_t: Any) -> Any:
        """``update(k_t, v_t)`` then ``query(q_t)``: one step of causal decoding."""
        self.update(k_t, v_t)
        return self.query(q_t)


class KVCache:
    """The softmax counterpart: keep every key and value, attend over all of them.

    Parameters
    ----------
    d, d_v : int
        Key/query and value dimensions.
    batch_shape : tuple of int
        Leading dims of every token.
    scale : float, optional
        Score scale, ``1 / sqrt(d)`` by default.
    dtype, like
        As for :class:`LinearAttentionState`.

    Notes
    -----
    Storage grows by doubling (amortised O(1) per token, no re-concatenation every step);
    :attr:`nbytes` counts the bytes of the keys and values stored so far, ``t (d + d_v)`` numbers per
    batch entry. The buffers are written in place: use it for inference, not under autograd.

    Examples
    --------
    >>> import numpy as np
    >>> from linattn_core import KVCache, softmax_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> cache = KVCache(4, 4)
    >>> ys = np.stack([cache.step(q[t], k[t], v[t]) for t in range(10)])
    >>> bool(np.allclose(ys, softmax_attention(q, k, v, causal=True))), cache.nbytes
    (True, 640)
    """

    def __init__(
        self,
        d: int,
        d_v: int,
        *,
        batch_shape: tuple[int, ...] = (),
        scale: float | None = None,
        dtype: Any = np.float64,
        like: Any = None,
    ) -> None:
        self.d = ops.check_positive_int(d, "d")
        self.d_v = ops.check_positive_int(d_v, "d_v")
        self.batch_shape = _check_batch_shape(batch_shape)
        self.scale = ops.check_scale(scale, self.d)
        self._proto = _prototype(dtype, like)
        self._out_dtype = like.dtype if like is not None else self._proto.dtype
        self.reset()

    def reset(self) -> None:
        """Drop every stored key and value."""
        self._K = ops.zeros(self.batch_shape + (0, self.d), self._proto)
        self._V = ops.zeros(self.batch_shape + (0, self.d_v), self._proto)
        self.t = 0

    @property
    def keys(self) -> Any:
        """The stored keys, ``(*batch_shape, t, d)``: a copy, so the cache's buffers stay its own."""
        return _copy(self._K[..., : self.t, :])

    @property
    def values(self) -> Any:
        """The stored values, ``(*batch_shape, t, d_v)``: a copy, as for :attr:`keys`."""
        return _copy(self._V[..., : self.t, :])

    def _grow(self) -> None:
        # double the capacity: copies O(t) numbers once every t steps, amortised O(1) per token
        cap = max(16, 2 * int(self._K.shape[-2]))
        K = ops.zeros(self.batch_shape + (cap, self.d), self._proto)
        V = ops.zeros(self.batch_shape + (cap, self.d_v), self._proto)
        K[..., : self.t, :] = self._K[..., : self.t, :]
        V[..., : self.t, :] = self._V[..., : self.t, :]
        self._K, self._V = K, V

    def append(self, k_t: Any, v_t: Any) -> None:
        """Store one key/value pair. k_t: (*batch_shape, d), v_t: (*batch_shape, d_v)."""
        k_t = _token(k_t, "k_t", self.batch_shape + (self.d,), self._proto, "KVCache")
        v_t = _token(v_t, "v_t", self.batch_shape + (self.d_v,), self._proto, "KVCache")
        if self.t == int(self._K.shape[-2]):
            self._grow()
        self._K[..., self.t, :] = k_t
        self._V[..., self.t, :] = v_t
        self.t += 1

    def attend(self, q_t: Any) -> Any:
        """Softmax attention of one query over every stored key.

        q_t: (*batch_shape, d) -> (*batch_shape, d_v)
        """
        q_t = _token(q_t, "q_t", self.batch_shape + (self.d,), self._proto, "KVCache")
        if self.t == 0:
            raise ValueError("KVCache.attend: the cache is empty; append a key/value pair first")
        K, V = self._K[..., : self.t, :], self._V[..., : self.t, :]  # (*batch, t, d), (*batch, t, d_v)
        scores = (K @ q_t[..., :, None])[..., 0] * self.scale  # (*batch, t)
        w = ops.lib(scores).exp(scores - ops.amax(scores, -1))  # max-shifted, as in softmax_attention
        w = w / ops.total(w, -1, keepdims=True)
        y = (w[..., None, :] @ V)[..., 0, :]  # (*batch, d_v)
        return y.to(self._out_dtype) if ops.is_torch(y) else y.astype(self._out_dtype, copy=False)

    def step(self, q_t: Any, k_t: Any, v_t: Any) -> Any:
        """``append(k_t, v_t)`` then ``attend(q_t)``."""
        self.append(k_t, v_t)
        return self.attend(q_t)

    @property
    def nbytes(self) -> int:
        """Bytes of the keys and values stored so far: grows linearly with ``t``."""
        return _nbytes(self._K[..., : self.t, :], self._V[..., : self.t, :])

    @property
    def capacity_nbytes(self) -> int:
        """Bytes allocated (at most twice :attr:`nbytes` once the cache holds 16 tokens)."""
        return _nbytes(self._K, self._V)

    def __repr__(self) -> str:
        return (
            f"KVCache(d={self.d}, d_v={self.d_v}, batch_shape={self.batch_shape}, t={self.t},"
            f" nbytes={self.nbytes})"
        )
