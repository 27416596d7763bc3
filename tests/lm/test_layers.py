"""Each attention layer is what its docstring says: one test per ingredient, which fails if it changes.

The mixers are checked against literal recurrences written here from the papers' equations (float64),
so that the scale of q, the gates, the absence of a normalizer and the delta update are pinned; the
output path (per-head RMSNorm, swish gate), the short convolution and the registry are pinned too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402 - after the importorskip
from _tolerances import assert_close, tolerance  # noqa: E402

from linattn_core.lm import layers as L  # noqa: E402
from linattn_core.lm.conv import ShortConv  # noqa: E402
from linattn_core.lm.model import ModelConfig  # noqa: E402

B, T, C, H = 2, 11, 16, 4
D = C // H
GATED = ("retnet", "retnet_no_decay", "simple_gla", "simple_gla_const", "gla")
NORMED = (*GATED, "deltanet", "deltanet_additive")
KERNEL = ("elu+1", "relu", "performer")  # the layers with a normalizer z


def _layer(kind: str, seed: int = 0, **overrides) -> L.Attention:
    """One float64 layer with every parameter perturbed (gains and biases away from 1 and 0)."""
    options = dict(vocab_size=5, attention=kind, n_head=H, n_embd=C, chunk_size=4, num_features=8)
    options.update(overrides)
    torch.manual_seed(seed)
    layer = L.LAYERS[kind](ModelConfig(**options), 0).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return layer


def _x(seed: int = 3, n: int = T) -> torch.Tensor:
    return torch.randn(B, n, C, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _heads(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))


def _literal_decayed(q, k, v, log_g):
    """S_t = diag(g_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t; log_g: (B, H, T) or (B, H, T, d)."""
    if log_g.dim() == 3:
        log_g = log_g[..., None].expand_as(k)
    S, out = torch.zeros(B, H, D, D, dtype=q.dtype), []
    for t in range(T):
        S = torch.exp(log_g[:, :, t])[..., None] * S + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append((q[:, :, t, None, :] @ S)[..., 0, :])
    return torch.stack(out, 2)


def _close(a, b) -> bool:
    rtol, atol = tolerance("float64")
    return bool(torch.allclose(a, b, rtol=rtol, atol=atol))


def _unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def _literal_delta(q, k, v, beta):
    """S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T with unit q, k; o_t = S_t^T q_t."""
    q, k = _unit(q), _unit(k)
    S, out = torch.zeros(B, H, D, D, dtype=q.dtype), []
    for t in range(T):
        k_t, v_t = k[:, :, t], v[:, :, t]
        error = v_t - (k_t[..., None, :] @ S)[..., 0, :]
        S = S + beta[:, :, t, None, None] * k_t[..., :, None] * error[..., None, :]
        out.append((q[:, :, t, None, :] @ S)[..., 0, :])
    return torch.stack(out, 2)


def test_registry_names():
    assert list(L.LAYERS) == ["softmax", "elu+1", "relu", "performer", "retnet", "retnet_no_decay",
                              "simple_gla", "simple_gla_const", "gla", "deltanet", "deltanet_additive"]
    assert all(issubclass(cls, L.Attention) for cls in L.LAYERS.values())


def test_retnet_gammas_are_the_papers():
    want = [0.96875, 0.984375, 0.9921875, 0.99609375]  # 1 - 2^(-5-h): the sign of the exponent matters
    assert L.retnet_gammas(4).tolist() == want
    layer = _layer("retnet")
    assert layer.gamma.tolist() == want
    log_gamma = torch.log(torch.tensor(want, dtype=torch.float64))
    assert_close(layer.log_decay(_x()), log_gamma[:, None].expand(B, H, T))
    no_decay = _layer("retnet_no_decay")
    assert no_decay.gamma.tolist() == [1.0] * 4
    shapes = [{n: p.shape for n, p in m.named_parameters()} for m in (layer, no_decay)]
    assert shapes[0] == shapes[1]  # everything else equal


@pytest.mark.parametrize("kind", ["retnet", "retnet_no_decay", "simple_gla", "gla"])
def test_gated_mixers_are_the_literal_recurrence(kind):
    """No z, q scaled by d^-1/2, identity features, the layer's own gates (per head or per channel)."""
    layer, x = _layer(kind), _x()
    q, k, v = _heads(4)
    want = _literal_decayed(q * D**-0.5, k, v, layer.log_decay(x))
    assert_close(layer.mix(q, k, v, x), want)


def test_gla_runs_short_chunks_of_the_same_result():
    layer, x = _layer("gla", chunk_size=64), _x(n=40)
    assert layer.chunk_size == L.GLA_CHUNK == 16
    q, k, v = (torch.randn(B, H, 40, D, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
               for s in (1, 2, 3))
    with torch.no_grad():
        got = layer.mix(q, k, v, x)
        layer.chunk_size = 40  # one chunk: the masked form of the whole sequence
        assert_close(got, layer.mix(q, k, v, x))


def test_simple_gla_gate_is_one_logsigmoid_per_head_over_16():
    layer, x = _layer("simple_gla"), _x()
    W, b = layer.gk_proj.weight, layer.gk_proj.bias
    assert W.shape == (H, C) and b is not None
    assert_close(layer.log_decay(x), (F.logsigmoid(x @ W.T + b) / 16).transpose(1, 2))


def test_gla_gate_is_low_rank_per_channel_over_16():
    layer, x = _layer("gla"), _x()
    W1, W2 = layer.gk_proj[0], layer.gk_proj[1]
    assert W1.weight.shape == (16, C) and W1.bias is None  # rank 16, no bias
    assert W2.weight.shape == (C, 16) and W2.bias is not None
    a = x @ W1.weight.T @ W2.weight.T + W2.bias  # (B, T, C)
    want = (F.logsigmoid(a) / 16).view(B, T, H, D).transpose(1, 2)  # (B, H, T, d): one gate per key channel
    log_g = layer.log_decay(x)
    assert_close(log_g, want)
    assert float(log_g.detach().std(-1).min()) > 0  # the channels of a head have gates of their own


def test_deltanet_mixer_is_the_literal_delta_rule():
    layer, x = _layer("deltanet"), _x()
    q, k, v = _heads(5)
    beta = torch.sigmoid(x @ layer.b_proj.weight.T).transpose(1, 2)  # (B, H, T), no bias
    assert layer.b_proj.bias is None
    assert_close(layer.beta(x), beta)
    assert_close(layer.mix(q, k, v, x), _literal_delta(q, k, v, beta))


def test_deltanet_additive_writes_without_reading():
    layer, x = _layer("deltanet_additive"), _x()
    q, k, v = _heads(6)
    beta = layer.beta(x)
    no_decay = torch.zeros(B, H, T, dtype=torch.float64)
    want = _literal_decayed(_unit(q), _unit(k), beta[..., None] * v, no_decay)
    assert_close(layer.mix(q, k, v, x), want)
    delta = _layer("deltanet")
    delta.load_state_dict(layer.state_dict())  # the same weights: only the write differs
    assert (delta.mix(q, k, v, x) - want).abs().max() > 1e-3


@pytest.mark.parametrize("kind", L.LAYERS)
def test_a_normalizer_only_where_the_paper_has_one(kind):
    """With z, every output is a weighted average of the values: constant values come out unchanged.
    Without z the output scales with the keys (identity features) or at least is not an average."""
    layer, x = _layer(kind), _x()
    q, k = (t.abs() for t in _heads(7)[:2])  # positive: no ReLU row is all zeros
    ones = torch.ones(B, H, T, D, dtype=torch.float64)
    averaged = _close(layer.mix(q, k, ones, x), ones)
    assert averaged == (kind in (*KERNEL, "softmax"))
    if kind in GATED:
        v = _heads(8)[2]
        assert_close(layer.mix(q, 2 * k, v, x), 2 * layer.mix(q, k, v, x))


@pytest.mark.parametrize("kind", L.LAYERS)
def test_output_norm_and_gate_as_specified(kind):
    layer, x = _layer(kind), _x()
    y = _heads(9)[0]
    assert (layer.g_proj is not None) == (kind in GATED)
    assert (layer.norm is not None) == (kind in NORMED)
    if kind in NORMED:
        assert layer.norm.eps == 1e-5 and layer.norm.weight.shape == (D,)
        o = y * torch.rsqrt((y * y).mean(-1, keepdim=True) + 1e-5) * layer.norm.weight
        o = o.transpose(1, 2).reshape(B, T, C)
        if kind in GATED:
            o = o * F.silu(x @ layer.g_proj.weight.T)  # the swish gate
        assert_close(layer.output(y, x), o @ layer.o_proj.weight.T)
        layer.norm.eps = 0.0  # exact scale invariance for the check below
    # the norm is an RMSNorm per head: scaling one head leaves the output unchanged only with the norm
    scaled = y.clone()
    scaled[:, 1] *= 3.0
    assert _close(layer.output(scaled, x), layer.output(y, x)) == (kind in NORMED)


@pytest.mark.parametrize("kind", L.LAYERS)
def test_conv_defaults_and_option(kind):
    default = _layer(kind).conv
    if kind in ("deltanet", "deltanet_additive"):
        assert default is not None and default.weight.shape == (3 * C, 1, 4)  # fla's kernel 4 on q, k, v
    else:
        assert default is None
    assert _layer(kind, conv=0).conv is None
    assert _layer(kind, conv=3).conv.weight.shape == (3 * C, 1, 3)


def test_deltanet_silu_without_conv():
    layer, x = _layer("deltanet", conv=0), _x()
    q, k, v = layer.qkv(x)
    want = F.silu(x @ layer.qkv_proj.weight.T).split(C, -1)
    for got, w in zip((q, k, v), want, strict=True):
        assert_close(got, w.view(B, T, H, D).transpose(1, 2))
    plain = _layer("retnet", conv=0)  # the others take the projections as they are
    v_plain = (x @ plain.qkv_proj.weight.T)[..., 2 * C :]
    assert_close(plain.qkv(x)[2], v_plain.view(B, T, H, D).transpose(1, 2))


def test_short_conv_is_the_causal_depthwise_formula():
    torch.manual_seed(0)
    conv = ShortConv(5, 3).double()
    assert conv.bias is None
    x = torch.randn(2, 9, 5, dtype=torch.float64)
    w = conv.weight[:, 0]  # (channels, W)
    padded = F.pad(x, (0, 0, 2, 0))
    want = F.silu(sum(w[:, i] * padded[:, i : i + 9] for i in range(3)))  # y_t = silu(sum_i w_i x_{t-2+i})
    assert_close(conv(x), want)
    history, steps = conv.new_history(2, x), []
    for t in range(9):
        y, history = conv.step(x[:, t : t + 1], history)
        steps.append(y)
    assert_close(torch.cat(steps, 1), want)
    changed = x.clone()
    changed[:, 5:] += 1.0
    assert_close(conv(changed)[:, :5], want[:, :5])  # causal: x[5:] does not reach y[:5]
    with pytest.raises(ValueError, match="kernel"):
        ShortConv(4, 0)


@pytest.mark.parametrize("kind", L.LAYERS)
def test_every_layer_is_causal_with_and_without_conv(kind):
    for conv in (0, 4):
        layer, x = _layer(kind, conv=conv), _x(n=T)
        changed = x.clone()
        changed[:, 6:] += torch.randn(B, T - 6, C, dtype=torch.float64)
        with torch.no_grad():
            a, b = layer(x), layer(changed)
        assert_close(a[:, :6], b[:, :6])
        assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-6


def test_performer_features_have_a_seed_per_layer():
    cfg = ModelConfig(vocab_size=5, attention="performer", n_head=H, n_embd=C, num_features=8, seed=3)
    first, second = L.Performer(cfg, 0), L.Performer(cfg, 1)
    again = L.Performer(cfg, 0)
    x = _x()[..., :D]
    assert torch.equal(first.phi(x), again.phi(x))
    assert not torch.equal(first.phi(x), second.phi(x))
    assert first.phi(x).shape[-1] == 8  # m = num_features


def test_relu_zero_rows_are_quiet(recwarn):
    layer, x = _layer("relu"), _x()
    q, k, v = _heads(10)
    q = -q.abs()  # every query row is all zeros after ReLU: the clamp makes its output 0
    out = layer.mix(q, k, v, x)
    assert_close(out, torch.zeros_like(out))
    assert not [w for w in recwarn if "denominators" in str(w.message)]


@pytest.mark.parametrize("kind", ["simple_gla", "simple_gla_const"])
def test_gates_start_at_retnets_decays(kind):
    """simple GLA and its control start where RetNet's fixed decays are (a zero input), so the three
    layers differ by one thing each; the control's decay reads nothing of the input."""
    from linattn_core.lm.model import LanguageModel, ModelConfig

    model = LanguageModel(ModelConfig(vocab_size=11, attention=kind, n_head=4, n_embd=32)).double()
    layer = model.blocks[0].attn
    x = torch.zeros(1, 3, 32, dtype=torch.float64)
    expected = torch.log(L.retnet_gammas(4))[None, :, None].expand(1, 4, 3)
    torch.testing.assert_close(layer.log_decay(x), expected, rtol=1e-6, atol=0)  # a float32 bias
    if kind == "simple_gla_const":
        other = torch.randn(1, 3, 32, dtype=torch.float64)
        assert torch.equal(layer.log_decay(other), layer.log_decay(x))
        assert [n for n, _ in layer.named_parameters() if "gate" in n or "gk" in n] == ["gate_bias"]


def test_short_conv_starts_as_fla_starts_it():
    """The conv's filters are drawn like every projection (normal, std 0.02), not torch's uniform default."""
    from linattn_core.lm.model import LanguageModel, ModelConfig

    model = LanguageModel(ModelConfig(vocab_size=11, attention="deltanet", n_head=4, n_embd=64))
    w = model.blocks[0].attn.conv.weight
    assert 0.015 < float(w.detach().std()) < 0.025  # 768 draws: torch's default would give about 0.29


@pytest.mark.parametrize(("kind", "rule"), [("elu+1", "linear_step"), ("retnet", "decayed_step"),
                                            ("gla", "decayed_step"), ("deltanet", "delta_step"),
                                            ("deltanet_additive", "decayed_step")])
def test_a_layers_step_is_its_rules_one_step_function(monkeypatch, kind, rule):
    # the layer steps through the library's state, whose update is the rule's one step function
    import linattn_core.decay
    import linattn_core.delta
    import linattn_core.streaming

    module = {"linear_step": linattn_core.streaming, "decayed_step": linattn_core.decay,
              "delta_step": linattn_core.delta}[rule]
    calls = []
    real = getattr(module, rule)
    monkeypatch.setattr(module, rule, lambda *args: calls.append(rule) or real(*args))
    layer, x = _layer(kind), _x()
    state = layer.new_state(B, x)
    with torch.no_grad():
        for t in range(3):
            layer.step(x[:, t : t + 1], state)
    assert calls == [rule] * 3
