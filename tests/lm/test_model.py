"""The language model of the training chapter: one set of weights, two ways to run it.

For every attention layer, with and without the short convolution, the logits computed one token at
a time from the per-layer states (or the KV cache) equal the logits of the parallel (chunked) form,
in float64: the causal recurrence at the scale of a whole model. Lengths the chunk size does not
divide are included.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tolerances import assert_close  # noqa: E402 - after the importorskip

from linattn_core.lm.layers import LAYERS  # noqa: E402
from linattn_core.lm.model import KINDS, LanguageModel, ModelConfig  # noqa: E402

VOCAB = 13
CONVS = [None, 0, 3]  # each layer's own default, none, a kernel of 3 on every layer


def _model(kind: str, seed: int = 0, **overrides) -> LanguageModel:
    """A small float64 model with weights perturbed away from the near-uniform initialisation."""
    options = dict(vocab_size=VOCAB, attention=kind, block_size=80, n_layer=2, n_head=2, n_embd=16,
                   chunk_size=8, num_features=8)
    options.update(overrides)
    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig(**options)).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _tokens(batch: int, n: int, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))


def test_kinds_are_the_registry():
    assert KINDS == tuple(LAYERS)


@pytest.mark.parametrize("n", [1, 8, 37, 64])
@pytest.mark.parametrize("kind", KINDS)
def test_step_logits_equal_parallel_logits(kind, n):
    model = _model(kind)
    idx = _tokens(2, n)
    with torch.no_grad():
        parallel = model(idx)
    assert parallel.shape == (2, n, VOCAB)
    assert_close(model.step_logits(idx), parallel)


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: f"conv={c}")
@pytest.mark.parametrize("kind", KINDS)
def test_step_logits_equal_parallel_logits_with_and_without_conv(kind, conv):
    model = _model(kind, conv=conv)
    idx = _tokens(2, 21)
    with torch.no_grad():
        parallel = model(idx)
    assert_close(model.step_logits(idx), parallel)


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: f"conv={c}")
@pytest.mark.parametrize("kind", KINDS)
def test_parallel_form_is_causal(kind, conv):
    model = _model(kind, conv=conv)
    idx = _tokens(1, 30)
    changed = idx.clone()
    changed[0, 20:] = (changed[0, 20:] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(idx), model(changed)
    assert_close(a[:, :20], b[:, :20])
    assert (a[:, 20:] - b[:, 20:]).abs().max() > 1e-6  # the later positions do see the change


@pytest.mark.parametrize("kind", KINDS)
def test_every_parameter_gets_a_gradient(kind):
    model = _model(kind, conv=3)
    idx = _tokens(2, 20)
    model.loss(idx[:, :-1], idx[:, 1:]).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient reaches {missing}"


@pytest.mark.parametrize("kind", ["softmax", "retnet", "gla", "deltanet"])
def test_generate_is_seeded_and_keeps_the_prompt(kind):
    model = _model(kind).float()
    prompt = _tokens(3, 5)
    a = model.generate(prompt, 12, generator=torch.Generator().manual_seed(7), top_k=5)
    b = model.generate(prompt, 12, generator=torch.Generator().manual_seed(7), top_k=5)
    assert a.shape == (3, 17) and torch.equal(a, b)
    assert torch.equal(a[:, :5], prompt)
    assert int(a.min()) >= 0 and int(a.max()) < VOCAB


def test_generate_samples_from_the_step_logits():
    """Greedy decoding (a tiny temperature) picks the argmax of the parallel logits at each step."""
    model = _model("deltanet")
    out = model.generate(_tokens(2, 4), 6, temperature=1e-6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(out[:, :-1])
    assert torch.equal(out[:, 4:], logits[:, 3:].argmax(-1))


@pytest.mark.parametrize("kind", KINDS)
def test_state_size_is_what_the_states_hold(kind):
    """state_size counts the numbers of the step form's state: constant for the linear layers, the
    KV cache growing by 2 C numbers a token; the conv's history included."""
    model = _model(kind, conv=3)
    idx = _tokens(1, 40)
    states = model.new_states(1)
    sizes = []
    with torch.no_grad():
        for t in range(40):
            model.step(idx[:, t], states, t)
            sizes.append(sum(s.nbytes for s in states) // 8)  # float64: 8 bytes a number
    attn = [block.attn for block in model.blocks]
    assert sizes[-1] == sum(a.state_size(40) for a in attn)
    assert sizes[0] == sum(a.state_size(1) for a in attn)
    conv = sum(s.conv.numel() for s in states)
    assert conv == 2 * 2 * 3 * 16  # (kernel - 1) past inputs of 3C channels in each of 2 layers
    if kind == "softmax":
        assert sizes[-1] - conv == 40 * (sizes[0] - conv) == 40 * 2 * 2 * 16
    else:
        assert sizes[0] == sizes[-1]


def test_bad_configuration_is_a_clear_error():
    with pytest.raises(ValueError, match="attention"):
        ModelConfig(vocab_size=5, attention="linear")
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(vocab_size=5, n_embd=10, n_head=4)
    with pytest.raises(ValueError, match="n_layer"):
        ModelConfig(vocab_size=5, n_layer=0)
    for conv in (-1, True, 2.0):
        with pytest.raises(ValueError, match="conv"):
            ModelConfig(vocab_size=5, conv=conv)
    model = _model("softmax", block_size=8)
    with pytest.raises(ValueError, match="block_size"):
        model(_tokens(1, 9))
    with pytest.raises(ValueError, match="temperature"):
        model.generate(_tokens(1, 2), 3, temperature=0.0)


@pytest.mark.parametrize("kind", ["softmax", "gla", "deltanet"])
@pytest.mark.parametrize("n_layer", [1, 4])
def test_the_projections_into_the_residual_start_scaled_by_depth(kind, n_layer):
    # GPT-2: the weights writing into the residual stream (each attention's W_o, each MLP's second matrix)
    # start with std 0.02 / sqrt(2 n_layer), every other matrix with 0.02. 64 x 64 and 64 x 256 draws
    # estimate a std to within about 3% (at 4 sigma), so 0.02 and 0.02 / sqrt(2) are far apart.
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=VOCAB, attention=kind, block_size=16, n_layer=n_layer, n_head=2, n_embd=64)
    model = LanguageModel(cfg).requires_grad_(False)
    scaled = 0.02 / (2 * n_layer) ** 0.5
    for block in model.blocks:
        for weight in (block.attn.o_proj.weight, block.mlp.proj.weight):
            assert abs(float(weight.std()) / scaled - 1) < 0.05, f"{kind}: std {float(weight.std()):.4f}"
        assert abs(float(block.mlp.fc.weight.std()) / 0.02 - 1) < 0.05
    assert abs(float(model.wte.weight.std()) / 0.02 - 1) < 0.2  # 13 x 64 draws: a looser estimate


def test_the_conv_starts_as_asked():
    """conv_init="uniform" keeps torch's draw for the conv (the stored recall runs' start), "normal"
    draws it as fla does; a name it does not know is refused."""
    from linattn_core.lm.model import LanguageModel, ModelConfig

    def model(init):
        torch.manual_seed(0)
        return LanguageModel(ModelConfig(vocab_size=11, attention="deltanet", n_embd=32, n_head=2,
                                         conv_init=init))

    normal, uniform = model("normal"), model("uniform")
    w_n, w_u = normal.blocks[0].attn.conv.weight.detach(), uniform.blocks[0].attn.conv.weight.detach()
    assert float(w_n.std()) < 0.03 < 0.2 < float(w_u.std())
    assert float(w_u.abs().max()) <= 0.5  # kaiming-uniform bound for 4 taps: 1 / sqrt(4)
    with pytest.raises(ValueError, match="conv_init must be one of"):
        ModelConfig(vocab_size=11, conv_init="zeros")
