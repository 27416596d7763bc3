"""Streaming: the fixed-size LinearAttentionState and the growing KVCache, one token at a time.

Stepping a state through a sequence must give exactly what the parallel causal forms give.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _tolerances import assert_close, to_numpy

from linattn_core import KVCache, LinearAttentionState, linear_attention, softmax_attention

# relu, cosformer and identity features can give denominators <= 0; the library warns (tested in
# test_core_errors.py). Here those rows are compared like any other, so the warning is only noise.
pytestmark = pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")


def stream(cell, q, k, v):
    """Step ``cell`` through the sequence; ``(..., N, d)`` inputs -> stacked ``(..., N, d_v)`` outputs."""
    outs = [cell.step(q[..., t, :], k[..., t, :], v[..., t, :]) for t in range(q.shape[-2])]
    if hasattr(outs[0], "detach"):
        import torch

        return torch.stack(outs, dim=-2)
    return np.stack(outs, axis=-2)


# --- LinearAttentionState ---------------------------------------------------------------------------
def test_state_matches_causal_linear_attention(mk, map_name, batch):
    n, d, d_v = 40, 8, 5
    q, k, v = mk.qkv(batch, n, d=d, d_v=d_v, seed=1, shift=mk.shift_for(map_name))
    phi = mk.feature_map(map_name, d, max_len=n)  # a state cannot guess cosformer's M
    state = LinearAttentionState(d, d_v, phi, batch_shape=batch)
    out = stream(state, q, k, v)
    assert out.shape == (*batch, n, d_v)
    expected = linear_attention(q, k, v, phi, causal=True)
    assert_close(out, expected, what=f"LinearAttentionState.step vs causal linear_attention [{map_name}]")


def test_state_with_default_performer_tracks_a_growing_maximum(mk):
    # Key norms that grow along the sequence move the running maximum of the (default, stabilised)
    # Performer features again and again; the state must rescale S and z each time it moves.
    n, d, d_v = 60, 8, 5
    q, k, v = mk.qkv((2,), n, d=d, d_v=d_v, seed=2)
    k = k * np.linspace(0.2, 4.0, n)[:, None]
    q = q * 2.0
    phi = mk.feature_map("performer", d, num_features=64)
    out = stream(LinearAttentionState(d, d_v, phi, batch_shape=(2,)), q, k, v)
    assert np.isfinite(out).all()
    assert_close(out, linear_attention(q, k, v, phi, causal=True), what="stabilised performer state")


class _RotatingFeatures:
    """A user's position-dependent map: relu(x) + 1 turned by an angle w i at position i, so that
    phi(q_i) . phi(k_j) = (relu(q_i) + 1) . (relu(k_j) + 1) cos(w (i - j)) > 0 for |i - j| w < pi / 2."""

    @staticmethod
    def build(w=0.05):
        from linattn_core import FeatureMap, get_feature_map

        class Rotating(FeatureMap):
            name = "rotating"

            def output_dim(self, d):
                return 2 * d

            def __call__(self, x, *, offset=0):
                n = x.shape[-2]
                angle = w * np.arange(offset, offset + n)[:, None]  # (N, 1)
                f = get_feature_map("relu+1")(x)
                return np.concatenate([f * np.cos(angle), f * np.sin(angle)], -1)

        return Rotating()


def test_state_asks_the_map_for_features_at_each_position(mk):
    # streaming must go through the map's own interface (queries/running_keys at an offset), so a
    # map the library does not know streams exactly like the parallel form
    q, k, v = mk.qkv((2,), 25, d=4, d_v=3, seed=15)
    phi = _RotatingFeatures.build()
    out = stream(LinearAttentionState(4, 3, phi, batch_shape=(2,)), q, k, v)
    assert_close(out, linear_attention(q, k, v, phi, causal=True), what="position-dependent user map")


def test_update_then_query_equals_step(mk):
    q, k, v = mk.qkv((3,), 10, d=4, d_v=2, seed=3)
    a, b = LinearAttentionState(4, 2, batch_shape=(3,)), LinearAttentionState(4, 2, batch_shape=(3,))
    for t in range(10):
        y_step = a.step(q[:, t], k[:, t], v[:, t])
        b.update(k[:, t], v[:, t])
        assert_close(y_step, b.query(q[:, t]), what=f"step vs update+query at t={t}")


def test_state_first_output_is_first_value(mk, map_name):
    q, k, v = mk.qkv((), 5, d=8, d_v=3, seed=4, shift=1.0)
    phi = mk.feature_map(map_name, 8, max_len=5)
    y0 = LinearAttentionState(8, 3, phi).step(q[0], k[0], v[0])
    assert_close(y0, v[0], what=f"y_0 == v_0 [{map_name}]")


@pytest.mark.parametrize(("map_name", "d_phi"), [("elu+1", 8), ("performer", 24), ("cosformer", 16)])
def test_state_starts_as_zeros_with_contract_shapes(mk, map_name, d_phi, batch):
    phi = mk.feature_map(map_name, 8, num_features=24, max_len=10)
    state = LinearAttentionState(8, 5, phi, batch_shape=batch)
    assert tuple(state.S.shape) == (*batch, d_phi, 5)
    assert tuple(state.z.shape) == (*batch, d_phi)
    assert not to_numpy(state.S).any() and not to_numpy(state.z).any()


def test_state_nbytes_is_constant(mk, batch):
    q, k, v = mk.qkv(batch, 30, d=8, d_v=5, seed=5)
    state = LinearAttentionState(8, 5, batch_shape=batch)
    sizes = {state.nbytes}
    for t in range(30):
        state.step(q[..., t, :], k[..., t, :], v[..., t, :])
        sizes.add(state.nbytes)
    assert len(sizes) == 1, f"LinearAttentionState.nbytes changed with t: {sorted(sizes)}"
    # it holds at least S (d_phi x d_v) and z (d_phi) per batch entry, in float64
    assert state.nbytes >= (8 * 5 + 8) * 8 * math.prod(batch)


@pytest.mark.parametrize("map_name", ["elu+1", "performer", "cosformer"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_state_like_torch_tensor(mk, device, dtype, map_name):
    import torch

    n, d, d_v = 20, 8, 5
    q, k, v = mk.qkv((2,), n, d=d, d_v=d_v, seed=6, backend="torch", dtype=dtype, device=device)
    phi = mk.feature_map(map_name, d, max_len=n)
    state = LinearAttentionState(d, d_v, phi, batch_shape=(2,), like=q)
    for name in ("S", "z"):
        x = getattr(state, name)
        assert isinstance(x, torch.Tensor) and x.dtype == q.dtype and x.device == q.device, name
    out = stream(state, q, k, v)
    assert isinstance(out, torch.Tensor) and out.dtype == q.dtype and out.device == q.device
    expected = linear_attention(to_numpy(q), to_numpy(k), to_numpy(v), phi, causal=True)
    assert_close(out, expected, dtype=dtype, what=f"torch state ({dtype}, {device}) [{map_name}]")


def test_state_numpy_float32(mk):
    q, k, v = mk.qkv((2,), 20, d=8, d_v=5, seed=7, dtype="float32")
    state = LinearAttentionState(8, 5, batch_shape=(2,), dtype=np.float32)
    out = stream(state, q, k, v)
    assert out.dtype == np.float32
    assert_close(out, linear_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                                       causal=True), dtype="float32", what="float32 state")


# --- KVCache ----------------------------------------------------------------------------------------
def test_kv_cache_matches_causal_softmax(mk, batch):
    n, d, d_v = 40, 8, 5
    q, k, v = mk.qkv(batch, n, d=d, d_v=d_v, seed=8)
    out = stream(KVCache(d, d_v, batch_shape=batch), q, k, v)
    assert out.shape == (*batch, n, d_v)
    assert_close(out, softmax_attention(q, k, v, causal=True), what="KVCache.step vs causal softmax")


def test_kv_cache_scale_and_append_attend(mk):
    q, k, v = mk.qkv((2,), 12, d=4, d_v=3, seed=9)
    cache = KVCache(4, 3, batch_shape=(2,), scale=0.7)
    outs = []
    for t in range(12):
        cache.append(k[:, t], v[:, t])
        outs.append(cache.attend(q[:, t]))
    assert_close(np.stack(outs, axis=-2), softmax_attention(q, k, v, causal=True, scale=0.7),
                 what="KVCache(scale=0.7) append+attend")


def test_kv_cache_first_output_is_first_value(mk):
    q, k, v = mk.qkv((), 3, d=4, d_v=3, seed=10)
    assert_close(KVCache(4, 3).step(q[0], k[0], v[0]), v[0], what="y_0 == v_0")


def test_kv_cache_nbytes_grows_linearly(mk, batch):
    q, k, v = mk.qkv(batch, 12, d=8, d_v=5, seed=11)
    cache = KVCache(8, 5, batch_shape=batch)
    sizes = [cache.nbytes]
    for t in range(12):
        cache.step(q[..., t, :], k[..., t, :], v[..., t, :])
        sizes.append(cache.nbytes)
    steps = np.diff(sizes)
    assert (steps == steps[0]).all(), f"KVCache.nbytes is not linear in t: {sizes}"
    # each token adds at least its key (d) and value (d_v) per batch entry, in float64
    assert steps[0] >= (8 + 5) * 8 * math.prod(batch), f"per-token growth {steps[0]} bytes is too small"


def test_kv_cache_nbytes_counts_the_stored_numbers_and_capacity_the_allocation(mk):
    # nbytes: exactly t (d + d_v) float64 numbers per batch entry; capacity_nbytes: what is allocated
    q, k, v = mk.qkv((3,), 20, d=8, d_v=5, seed=14)
    cache = KVCache(8, 5, batch_shape=(3,))
    for t in range(20):
        cache.step(q[..., t, :], k[..., t, :], v[..., t, :])
        assert cache.nbytes == (t + 1) * (8 + 5) * 8 * 3, f"nbytes after {t + 1} tokens"
        assert cache.nbytes <= cache.capacity_nbytes <= max(2 * cache.nbytes, 16 * (8 + 5) * 8 * 3)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_kv_cache_keys_and_values_are_the_callers_own(mk, backend):
    q, k, v = mk.qkv((), 5, d=4, d_v=3, seed=16, backend=backend)
    cache = KVCache(4, 3, like=q)
    ys = [cache.step(q[t], k[t], v[t]) for t in range(4)]
    assert_close(cache.keys, k[:4], what="stored keys")
    assert_close(cache.values, v[:4], what="stored values")
    cache.keys[:] = 0.0  # writing into what the cache returned must not change the cache
    cache.values[:] = 0.0
    ys[-1][:] = 0.0
    assert_close(cache.keys, k[:4], what="keys after the caller wrote into a returned copy")
    assert_close(cache.attend(q[3]), softmax_attention(q[:4], k[:4], v[:4], causal=True)[3], what="attend")


def test_state_with_cosformer_needs_max_len(mk):
    from linattn_core import get_feature_map

    with pytest.raises(ValueError, match="max_len"):
        LinearAttentionState(8, 5, "cosformer")
    with pytest.raises(ValueError, match="max_len"):
        LinearAttentionState(8, 5, get_feature_map("cosformer"))


def test_kv_cache_like_torch_tensor(mk, device):
    import torch

    q, k, v = mk.qkv((2,), 15, d=8, d_v=5, seed=12, backend="torch", dtype="float32", device=device)
    out = stream(KVCache(8, 5, batch_shape=(2,), like=q), q, k, v)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.device == q.device
    expected = softmax_attention(to_numpy(q), to_numpy(k), to_numpy(v), causal=True)
    assert_close(out, expected, dtype="float32", what="torch KVCache")


def test_state_is_smaller_than_cache_after_enough_tokens(mk):
    # The point of the chapter: a fixed-size state vs a cache that grows with every token.
    q, k, v = mk.qkv((), 64, d=8, d_v=8, seed=13)
    state, cache = LinearAttentionState(8, 8), KVCache(8, 8)
    stream(state, q, k, v)
    stream(cache, q, k, v)
    assert state.nbytes < cache.nbytes
