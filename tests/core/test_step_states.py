"""The decayed and delta-rule step states: one token at a time equals the whole-sequence function.

DecayedState against decayed_linear_attention (one gate, a gate per batch entry, a gate per key
channel, as gates or log-gates, normalized or not); DeltaRuleState against delta_rule_attention; both
for numpy and torch, every batch shape, under torch.no_grad() and under autograd; nbytes, like=, and
every bad input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _tolerances import assert_close, to_numpy

from linattn_core import DecayedState, DeltaRuleState, LinearAttentionState, get_feature_map
from linattn_core.decay import decayed_linear_attention
from linattn_core.delta import delta_rule_attention

N, D, D_V = 23, 6, 5
GATE_KINDS = ("gamma", "per-entry", "per-channel", "log-per-channel")


def _stack(outs):
    return torch.stack(outs, -2) if isinstance(outs[0], torch.Tensor) else np.stack(outs, -2)


def _to(backend, *xs):
    return [torch.from_numpy(x) for x in xs] if backend == "torch" else list(xs)


def _sequence(batch, d_phi=D, seed=0):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, *batch, N, D))
    v = rng.standard_normal((*batch, N, D_V))
    gates = rng.uniform(0.5, 1.0, (*batch, N, d_phi))
    betas = rng.uniform(0.0, 2.0, (*batch, N))
    return q, k, v, gates, betas


def _gates(kind, gates):
    """-> keyword arguments of the whole-sequence call, and of step t (a function of t)."""
    if kind == "gamma":
        return {"decay": 0.8}, lambda t: {"g_t": 0.8}
    if kind == "per-entry":
        g = gates[..., 0]  # (*batch, N): one gate per token and batch entry
        return {"decay": g}, lambda t: {"g_t": g[..., t]}
    if kind == "per-channel":
        return {"decay": gates}, lambda t: {"g_t": gates[..., t, :]}
    log_g = gates.log() if isinstance(gates, torch.Tensor) else np.log(gates)
    return {"log_decay": log_g}, lambda t: {"log_g_t": log_g[..., t, :]}


def _run_decayed(state, q, k, v, at):
    return _stack([state.step(q[..., t, :], k[..., t, :], v[..., t, :], **at(t)) for t in range(N)])


def _run_delta(state, q, k, v, beta):
    b = (lambda t: beta) if isinstance(beta, float) else (lambda t: beta[..., t])
    return _stack([state.step(q[..., t, :], k[..., t, :], v[..., t, :], b(t)) for t in range(N)])


# --- DecayedState --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", GATE_KINDS)
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
def test_decayed_state_steps_equal_the_whole_sequence(kind, normalize, backend, batch):
    q, k, v, gates, _ = _to(backend, *_sequence(batch))
    whole, at = _gates(kind, gates)
    expected = decayed_linear_attention(q, k, v, normalize=normalize, **whole)
    state = DecayedState(D, D_V, normalize=normalize, batch_shape=batch, like=q)
    got = _run_decayed(state, q, k, v, at)
    assert type(got) is type(q) and tuple(got.shape) == (*batch, N, D_V)
    assert_close(got, expected, what=f"DecayedState vs decayed_linear_attention, {kind}")
    _, (S, z) = decayed_linear_attention(q, k, v, normalize=normalize, return_state=True, **whole)
    assert_close(state.S, S, what="S after the last token")
    if normalize:
        assert_close(state.z, z, what="z after the last token")
    else:
        assert state.z is None


# relu and cosformer can give rows with denominators <= 0: they warn, and are compared all the same
@pytest.mark.filterwarnings("ignore:.*denominator:RuntimeWarning")
@pytest.mark.parametrize("map_name", ["performer", "cosformer", "relu"])
def test_decayed_state_with_other_feature_maps(mk, map_name):
    # the stabilised Performer's running maximum rescales S and z between the gates
    q, k, v, _, _ = _sequence((2,))
    phi = mk.feature_map(map_name, D, num_features=8, max_len=N)
    d_phi = phi.output_dim(D)
    gates = np.random.default_rng(1).uniform(0.5, 1.0, (2, N, d_phi))
    expected = decayed_linear_attention(q, k, v, phi, decay=gates)
    got = _run_decayed(DecayedState(D, D_V, phi, batch_shape=(2,)), q, k, v, lambda t: {"g_t": gates[:, t]})
    assert_close(got, expected, what=f"DecayedState [{map_name}], d_phi = {d_phi}")


def test_decayed_state_with_gate_one_is_the_linear_attention_state(mk):
    q, k, v, _, _ = _sequence((3,))
    decayed, plain = DecayedState(D, D_V, batch_shape=(3,)), LinearAttentionState(D, D_V, batch_shape=(3,))
    for t in range(N):
        assert_close(decayed.step(q[:, t], k[:, t], v[:, t], 1.0), plain.step(q[:, t], k[:, t], v[:, t]),
                     what=f"g = 1 at t={t}")


def test_decayed_state_update_then_query_equals_step_and_reset_forgets():
    q, k, v, gates, _ = _sequence((2,))
    a, b = DecayedState(D, D_V, batch_shape=(2,)), DecayedState(D, D_V, batch_shape=(2,))
    for t in range(5):
        y = a.step(q[:, t], k[:, t], v[:, t], gates[:, t])
        b.update(k[:, t], v[:, t], gates[:, t])
        assert_close(y, b.query(q[:, t]), what=f"step vs update + query at t={t}")
    a.reset()
    assert a.t == 0 and not to_numpy(a.S).any() and not to_numpy(a.z).any()
    assert_close(a.step(q[:, 0], k[:, 0], v[:, 0], 0.5), v[:, 0], what="after reset, y_0 = v_0")


# --- DeltaRuleState ------------------------------------------------------------------------------------


@pytest.mark.parametrize("beta_kind", ["number", "per-entry"])
@pytest.mark.parametrize("normalize_qk", [True, False], ids=["unit", "raw"])
@pytest.mark.parametrize("map_name", ["identity", "elu+1"])
def test_delta_state_steps_equal_the_whole_sequence(beta_kind, normalize_qk, map_name, backend, batch):
    q, k, v, _, betas = _sequence(batch)
    if not normalize_qk:  # beta |phi(k)|^2 < 2 (elu+1: about 6 (1.3)^2): the raw rule stays a contraction
        q, k, betas = 0.3 * q, 0.3 * k, 0.1 * betas
    q, k, v, betas = _to(backend, q, k, v, betas)
    beta = (0.7 if normalize_qk else 0.15) if beta_kind == "number" else betas
    expected, S = delta_rule_attention(q, k, v, beta, map_name, normalize_qk=normalize_qk, return_state=True)
    state = DeltaRuleState(D, D_V, map_name, normalize_qk=normalize_qk, batch_shape=batch, like=q)
    got = _run_delta(state, q, k, v, beta)
    assert type(got) is type(q) and tuple(got.shape) == (*batch, N, D_V)
    assert_close(got, expected, what=f"DeltaRuleState vs delta_rule_attention, {map_name}")
    assert_close(state.S, S, what="S after the last token")
    assert not hasattr(state, "z")


@pytest.mark.parametrize("stabilize", [True, False])
def test_delta_state_with_performer_features(mk, stabilize):
    q, k, v, _, betas = _sequence((2,))
    phi = mk.feature_map("performer", D, num_features=8, stabilize=stabilize)
    expected = delta_rule_attention(q, k, v, betas, phi)
    assert_close(_run_delta(DeltaRuleState(D, D_V, phi, batch_shape=(2,)), q, k, v, betas), expected,
                 what=f"DeltaRuleState, Performer(stabilize={stabilize})")


def test_delta_state_update_then_query_equals_step_and_reset_forgets():
    q, k, v, _, betas = _sequence(())
    a, b = DeltaRuleState(D, D_V), DeltaRuleState(D, D_V)
    for t in range(5):
        y = a.step(q[t], k[t], v[t], betas[t])
        b.update(k[t], v[t], betas[t])
        assert_close(y, b.query(q[t]), what=f"step vs update + query at t={t}")
    a.reset()
    assert a.t == 0 and not a.S.any()


# --- both: memory, backends, autograd ------------------------------------------------------------------


def _both(batch, like=None, dtype=np.float64):
    return [DecayedState(D, D_V, batch_shape=batch, like=like, dtype=dtype),
            DecayedState(D, D_V, "relu+1", normalize=False, batch_shape=batch, like=like, dtype=dtype),
            DeltaRuleState(D, D_V, batch_shape=batch, like=like, dtype=dtype)]


def _step(state, q, k, v, t):
    if isinstance(state, DeltaRuleState):
        return state.step(q[..., t, :], k[..., t, :], v[..., t, :], 1.0)
    return state.step(q[..., t, :], k[..., t, :], v[..., t, :], 0.9)


def test_nbytes_is_constant_in_t(batch):
    q, k, v, _, _ = _sequence(batch)
    entries = math.prod(batch)
    held = [D * (D_V + 1), D * D_V, D * D_V]  # S and z; S alone without normalization; S alone
    for state, numbers in zip(_both(batch), held, strict=True):
        sizes = {state.nbytes}
        for t in range(N):
            _step(state, q, k, v, t)
            sizes.add(state.nbytes)
        assert sizes == {numbers * 8 * entries}, f"{type(state).__name__}.nbytes: {sorted(sizes)}"


def test_a_state_like_a_float32_tensor_stays_float32_on_its_device(device):
    q, k, v, _, _ = (torch.from_numpy(x).to(device=device, dtype=torch.float32) for x in _sequence((2,)))
    for state in _both((2,), like=q):
        for t in range(N):
            y = _step(state, q, k, v, t)
            assert y.dtype == torch.float32 and y.device == q.device
            assert state.S.dtype == torch.float32 and state.S.device == q.device
    state = DecayedState(D, D_V, dtype=torch.float32)
    assert state.S.dtype == torch.float32 and isinstance(state.z, torch.Tensor)


def test_float32_steps_are_close_to_float64():
    q, k, v, gates, _ = _sequence((2,))
    state = DecayedState(D, D_V, batch_shape=(2,), dtype=np.float32)
    got = _run_decayed(state, q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                       lambda t: {"g_t": gates[:, t].astype(np.float32)})
    assert got.dtype == np.float32
    assert_close(got, decayed_linear_attention(q, k, v, decay=gates), what="float32 DecayedState")


def test_states_work_under_no_grad():
    q, k, v, _, _ = (torch.from_numpy(x).requires_grad_() for x in _sequence((2,)))
    with torch.no_grad():
        for state in _both((2,), like=q):
            y = _step(state, q, k, v, 0)
            assert y.grad_fn is None and not state.S.requires_grad


def test_decayed_state_is_differentiable_like_the_whole_sequence():
    q, k, v, gates, _ = (torch.from_numpy(x).requires_grad_() for x in _sequence((2,)))
    dout = torch.from_numpy(np.random.default_rng(7).standard_normal((2, N, D_V)))
    ins = (q, k, v, gates)
    want = torch.autograd.grad(decayed_linear_attention(q, k, v, decay=gates), ins, dout)
    state = DecayedState(D, D_V, batch_shape=(2,), like=q)
    got = _run_decayed(state, q, k, v, lambda t: {"g_t": gates[:, t]})
    for name, a, b in zip("qkvg", torch.autograd.grad(got, ins, dout), want, strict=True):
        assert_close(a, b, what=f"d{name} through DecayedState")


def test_delta_state_is_differentiable_like_the_whole_sequence():
    q, k, v, _, betas = (torch.from_numpy(x).requires_grad_() for x in _sequence((2,)))
    dout = torch.from_numpy(np.random.default_rng(8).standard_normal((2, N, D_V)))
    ins = (q, k, v, betas)
    want = torch.autograd.grad(delta_rule_attention(q, k, v, betas, method="recurrent"), ins, dout)
    got = _run_delta(DeltaRuleState(D, D_V, batch_shape=(2,), like=q), q, k, v, betas)
    for name, a, b in zip("qkvb", torch.autograd.grad(got, ins, dout), want, strict=True):
        assert_close(a, b, what=f"d{name} through DeltaRuleState")


# --- bad inputs ----------------------------------------------------------------------------------------

ONE = r"the accepted shapes are \(\) \(one number\), \(\*batch_shape,\) = \(2,\)"
ACCEPTED = ONE + r", \(\*batch_shape, d_phi\)"


@pytest.mark.parametrize(
    ("gate", "exc", "match"),
    [
        ({"g_t": np.full((3,), 0.5)}, ValueError, r"g_t has shape \(3,\); " + ACCEPTED + r" = \(2, 6\)"),
        ({"g_t": np.full((2, 7), 0.5)}, ValueError, r"g_t has shape \(2, 7\); " + ACCEPTED),
        ({"log_g_t": np.zeros((2, 6, 1))}, ValueError, r"log_g_t has shape \(2, 6, 1\)"),
        ({"g_t": 0.0}, ValueError, r"g_t must lie in \(0, 1\], got 0.0"),
        ({"g_t": 1.2}, ValueError, r"g_t must lie in \(0, 1\], got 1.2"),
        ({"g_t": np.array([0.5, 1.5])}, ValueError, r"g_t must lie in \(0, 1\]; 1 of its 2"),
        ({"g_t": np.array([0.5, np.nan])}, ValueError, r"g_t must lie in \(0, 1\]; 1 of its 2"),
        ({"log_g_t": 0.1}, ValueError, r"log_g_t must lie in \(-inf, 0\], got 0.1"),
        ({"log_g_t": np.full((2, 6), np.inf)}, ValueError, r"log_g_t must lie in \(-inf, 0\]; 12 of its 12"),
        ({"g_t": 0.5, "log_g_t": -0.1}, ValueError, "give g_t or log_g_t, not both"),
        ({}, TypeError, r"needs the gate g_t \(or its log, log_g_t=\)"),
        ({"g_t": "0.5"}, TypeError, r"g_t must be a number in \(0, 1\] or a numpy array"),
        ({"g_t": torch.full((2,), 0.5)}, TypeError, r"g_t must be a number in \(0, 1\] or a numpy array"),
    ],
)
def test_decayed_state_refuses_bad_gates(gate, exc, match):
    state = DecayedState(D, D_V, batch_shape=(2,))
    _, k, v, _, _ = _sequence((2,))
    with pytest.raises(exc, match=match):
        state.update(k[:, 0], v[:, 0], **gate)
    assert state.t == 0 and not state.S.any(), "a refused update changes nothing"


@pytest.mark.parametrize(
    ("beta", "exc", "match"),
    [
        (-0.1, ValueError, r"beta_t must lie in \[0, 2\], got -0.1"),
        (2.5, ValueError, r"beta_t must lie in \[0, 2\], got 2.5"),
        (np.array([1.0, 3.0]), ValueError, r"beta_t must lie in \[0, 2\]; 1 of its 2"),
        (np.array([1.0, np.nan]), ValueError, r"beta_t must lie in \[0, 2\]; 1 of its 2"),
        (np.ones((2, 6)), ValueError, r"beta_t has shape \(2, 6\); " + ONE + "$"),
        (None, TypeError, r"beta_t must be a number in \[0, 2\] or a numpy array"),
        (torch.ones(2), TypeError, r"beta_t must be a number in \[0, 2\] or a numpy array"),
    ],
)
def test_delta_state_refuses_bad_betas(beta, exc, match):
    state = DeltaRuleState(D, D_V, batch_shape=(2,))
    _, k, v, _, _ = _sequence((2,))
    with pytest.raises(exc, match=match):
        state.update(k[:, 0], v[:, 0], beta)
    assert state.t == 0 and not state.S.any()


@pytest.mark.parametrize("cls", [DecayedState, DeltaRuleState])
def test_states_refuse_tokens_of_the_wrong_shape_or_backend(cls):
    state = cls(D, D_V, batch_shape=(2,))
    q, k, v, _, _ = _sequence((2,))
    q, k, v = q[:, 0], k[:, 0], v[:, 0]
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"k_t has shape \(2, 7\) but this {name} expects \(2, 6\)"):
        state.update(np.zeros((2, 7)), v, 0.5)
    with pytest.raises(ValueError, match=rf"v_t has shape \(3, 5\) but this {name} expects \(2, 5\)"):
        state.update(k, np.zeros((3, 5)), 0.5)
    with pytest.raises(ValueError, match=r"q_t has shape \(2, 4, 6\)"):  # a sequence is not a token
        state.step(np.zeros((2, 4, 6)), k, v, 0.5)
    with pytest.raises(TypeError, match=rf"k_t is a Tensor but this {name} holds numpy arrays"):
        state.update(torch.from_numpy(k), v, 0.5)
    torch_state = cls(D, D_V, batch_shape=(2,), like=torch.zeros(1))
    with pytest.raises(TypeError, match=rf"q_t is a ndarray but this {name} holds torch arrays"):
        torch_state.query(q)


def test_states_refuse_bad_options():
    with pytest.raises(TypeError, match="normalize must be True or False"):
        DecayedState(D, D_V, normalize="no")
    with pytest.raises(TypeError, match="normalize_qk must be True or False"):
        DeltaRuleState(D, D_V, normalize_qk=1)
    stabilised = get_feature_map("performer", d=D, num_features=8)
    with pytest.raises(ValueError, match=r"DecayedState\(normalize=False\).*stabilize=False"):
        DecayedState(D, D_V, stabilised, normalize=False)
    with pytest.raises(ValueError, match=r"DeltaRuleState\(normalize_qk=False\).*stabilize=False"):
        DeltaRuleState(D, D_V, stabilised, normalize_qk=False)
    for cls in (DecayedState, DeltaRuleState):
        with pytest.raises(ValueError, match="max_len"):
            cls(D, D_V, "cosformer")
        with pytest.raises(ValueError, match="batch_shape must hold positive sizes"):
            cls(D, D_V, batch_shape=(0,))
        with pytest.raises(ValueError, match="d_v must be a positive integer"):
            cls(D, 0)


def _counted(monkeypatch, calls):
    """Count the calls of each rule's one step function (looked up in its module at every call)."""
    import linattn_core.decay
    import linattn_core.delta
    import linattn_core.streaming

    for module, name in ((linattn_core.streaming, "linear_step"), (linattn_core.decay, "decayed_step"),
                         (linattn_core.delta, "delta_step")):
        real = getattr(module, name)

        def wrapped(*args, _real=real, _name=name):
            calls.append(_name)
            return _real(*args)

        monkeypatch.setattr(module, name, wrapped)


def test_each_rule_is_written_once_the_form_and_the_state_step_with_it(monkeypatch):
    calls = []
    _counted(monkeypatch, calls)
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 7, D))
    decayed_linear_attention(q, k, v, decay=0.9, method="recurrent")
    DecayedState(D, D).step(q[0], k[0], v[0], 0.9)
    delta_rule_attention(q, k, v, 0.5, method="recurrent")
    DeltaRuleState(D, D).step(q[0], k[0], v[0], 0.5)
    LinearAttentionState(D, D).step(q[0], k[0], v[0])
    assert calls == ["decayed_step"] * 8 + ["delta_step"] * 8 + ["linear_step"]
