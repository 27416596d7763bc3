"""A small decoder-only transformer whose attention layer is chosen by name (nanoGPT's shape).

Embeddings (tokens and learned positions), ``n_layer`` pre-norm blocks (attention, then an MLP, each
added to the residual stream), a final LayerNorm and an output layer tied to the token embedding.
Only the attention differs between the models of the training chapter; each layer is a class of
:mod:`linattn_core.lm.layers`, picked from its registry :data:`~linattn_core.lm.layers.LAYERS` by the
name in :attr:`ModelConfig.attention`:

=====================  ==================================================================================
name                   layer (paper)
=====================  ==================================================================================
``softmax``            causal softmax attention: SDPA / :class:`~linattn_core.KVCache`
``elu+1``              the linear transformer (Katharopoulos et al. 2020), normalizer z
``relu``, ``performer``  the same with ReLU or FAVOR+ random features (Choromanski et al. 2021)
``retnet``             RetNet's retention (Sun et al. 2023): fixed gamma per head, RMSNorm, swish gate
``retnet_no_decay``    the same with gamma = 1
``simple_gla``         RetNet with a data-dependent gate per head (fla's simple GLA), from RetNet's decays
``simple_gla_const``   the control: simple GLA's gate without its input, a learned constant decay per head
``gla``                Gated Linear Attention (Yang et al. 2024): a low-rank gate per key channel
``deltanet``           DeltaNet (Schlag et al. 2021; Yang et al. 2024): conv, SiLU, L2, delta rule, RMSNorm
``deltanet_additive``  DeltaNet's layer with the additive write S += beta k v^T
=====================  ==================================================================================

Glossary (code -> the chapters' symbols): ``B, T, C`` batch, tokens, width (``n_embd``); ``H`` heads
of ``d = C / H``; ``x`` the residual stream ``(B, T, C)``; the layers' own symbols are listed in
:mod:`linattn_core.lm.layers`.

Two ways to run the same weights: :meth:`LanguageModel.forward` (all tokens at once, the chunked
form for the linear layers) and :meth:`LanguageModel.step` (one token, carrying one state per
layer); :meth:`LanguageModel.generate` uses the second. ``tests/lm/test_model.py`` checks in float64
that both give the same logits for every layer, with and without the short convolution.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .layers import LAYERS, Attention, LayerState

__all__ = ["CONV_INITS", "KINDS", "LAYERS", "Attention", "LanguageModel", "ModelConfig"]

#: The layer names, in the registry's order (the names ``--attention`` takes).
KINDS = tuple(LAYERS)
#: How the short convolution's filters start (:attr:`ModelConfig.conv_init`).
CONV_INITS = ("normal", "uniform")


@dataclass
class ModelConfig:
    """The size of the model and its attention layer (a name of :data:`LAYERS`)."""

    vocab_size: int
    attention: str = "softmax"
    block_size: int = 128  # longest context (learned positions)
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    chunk_size: int = 64  # of the chunked linear forms
    num_features: int = 32  # Performer's m = d_phi
    seed: int = 0  # Performer's random projections (layer l uses seed + l)
    conv: int | None = None  # short conv kernel: None the layer's own default, 0 none, W on every layer
    # the conv's filters at the start: "normal" as fla draws them (std 0.02, like the projections), or
    # "uniform", torch's default for nn.Conv1d (std 0.29 for 4 taps), which the stored recall runs used
    conv_init: str = "normal"

    def __post_init__(self) -> None:
        if self.attention not in LAYERS:
            raise ValueError(f"attention must be one of {tuple(LAYERS)}, got {self.attention!r}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "chunk_size", "num_features"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.conv_init not in CONV_INITS:
            raise ValueError(f"conv_init must be one of {CONV_INITS}, got {self.conv_init!r}")
        if self.conv is not None and (isinstance(self.conv, bool) or not isinstance(self.conv, int)
                                      or self.conv < 0):
            raise ValueError(f"conv must be None (the layer's default), 0 (none) or a kernel size >= 1,"
                             f" got {self.conv!r}")

    def to_dict(self) -> dict:
        return asdict(self)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm residual block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.attn, self.mlp = LAYERS[cfg.attention](cfg, layer), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def step(self, x_t: torch.Tensor, state: LayerState) -> torch.Tensor:
        x_t = x_t + self.attn.step(self.ln1(x_t), state)
        return x_t + self.mlp(self.ln2(x_t))


class LanguageModel(nn.Module):
    """Token and position embeddings, ``n_layer`` blocks, a final norm, output tied to the embedding.

    Examples
    --------
    >>> cfg = ModelConfig(vocab_size=11, attention="elu+1", block_size=16, n_embd=16, n_head=2)
    >>> model = LanguageModel(cfg)
    >>> idx = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(0))
    >>> tuple(model(idx).shape)
    (2, 9, 11)
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.apply(self._init_weights if cfg.conv_init == "normal" else self._init_weights_but_conv)
        for name, p in self.named_parameters():  # GPT-2: the projections into the residual scaled by depth
            if name.endswith(("attn.o_proj.weight", "mlp.proj.weight")):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
        for block in self.blocks:  # a layer's own starting values (gate biases), after the generic ones
            block.attn.init_gates()

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # the short conv's filters too, as fla initialises them (normal, the same std as the projections;
        # torch's default for a 4-tap depthwise conv would be uniform with std 0.29)
        if isinstance(module, (nn.Linear, nn.Embedding, nn.Conv1d)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @classmethod
    def _init_weights_but_conv(cls, module: nn.Module) -> None:
        if not isinstance(module, nn.Conv1d):  # the conv keeps the draw torch made when it was built
            cls._init_weights(module)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln_f(x) @ self.wte.weight.T  # tied output: (B, T, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits for every position at once. idx: (B, T) int64, T <= block_size -> (B, T, vocab)."""
        T = int(idx.shape[1])
        if T > self.cfg.block_size:
            raise ValueError(f"idx has {T} tokens but block_size is {self.cfg.block_size}")
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self._logits(x)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy in nats per token. idx, targets: (B, T)."""
        logits = self(idx)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def new_states(self, batch: int) -> list[LayerState]:
        """One empty state per layer (a KV cache for softmax), in the model's dtype and device."""
        like = self.wte.weight.detach()
        return [block.attn.new_state(batch, like) for block in self.blocks]

    def step(self, idx_t: torch.Tensor, states: list, t: int) -> torch.Tensor:
        """Logits of one position from the states. idx_t: (B,) at position t -> (B, vocab)."""
        if t >= self.cfg.block_size:
            raise ValueError(f"position {t} is past block_size {self.cfg.block_size}")
        x = (self.wte(idx_t) + self.wpe.weight[t])[:, None]  # (B, 1, C)
        for block, state in zip(self.blocks, states, strict=True):
            x = block.step(x, state)
        return self._logits(x)[:, 0]

    @torch.no_grad()
    def step_logits(self, idx: torch.Tensor) -> torch.Tensor:
        """The logits of :meth:`forward`, computed one token at a time. idx: (B, T) -> (B, T, vocab)."""
        states = self.new_states(int(idx.shape[0]))
        return torch.stack([self.step(idx[:, t], states, t) for t in range(int(idx.shape[1]))], 1)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Continue ``idx: (B, T0)`` by sampling ``max_new_tokens`` tokens, one step at a time.

        The prompt is read token by token into the per-layer states, then each new token costs one
        :meth:`step`: constant work for the linear kinds, work growing with t for the KV cache.
        Returns ``(B, T0 + max_new_tokens)``.
        """
        if idx.ndim != 2 or idx.shape[1] < 1:
            raise ValueError(f"idx must be (B, T0) with T0 >= 1, got shape {tuple(idx.shape)}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        states, out = self.new_states(int(idx.shape[0])), [idx]
        for t in range(int(idx.shape[1])):
            logits = self.step(idx[:, t], states, t)
        for t in range(int(idx.shape[1]), int(idx.shape[1]) + max_new_tokens):
            logits = logits / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, -math.inf)
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=generator)  # (B, 1)
            out.append(nxt)
            if t < int(idx.shape[1]) + max_new_tokens - 1:
                logits = self.step(nxt[:, 0], states, t)
        return torch.cat(out, 1)
