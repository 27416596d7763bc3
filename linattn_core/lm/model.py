"""A small decoder-only transformer whose attention is chosen by name (nanoGPT's shape).

Embeddings, ``n_layer`` pre-norm blocks (attention, then an MLP, each added to the residual
stream), a final norm and an output layer tied to the token embedding. Only the attention differs
between the models of the training chapter, and every kind calls this library's own functions:

============  =====================================================================================
kind          parallel form (training)                       step form (generation)
============  =====================================================================================
softmax       torch ``scaled_dot_product_attention``         :class:`~linattn_core.KVCache`
elu+1, relu   :func:`~linattn_core.linear_attention`         :class:`~linattn_core.LinearAttentionState`
performer       (chunked, causal)                              (the same feature map)
decay         :func:`~linattn_core.decay.decayed_linear_attention`, one ``gamma`` per head (RetNet)
gated           the same with a gate per token and head (GLA); both step a ``LinearAttentionState``
                whose ``S`` and ``z`` are multiplied by ``g_t`` before each update
delta         :func:`~linattn_core.delta.delta_rule_attention`; the step reads ``S^T phi(k_t)``
                from a ``LinearAttentionState`` and writes only the correction
============  =====================================================================================

Glossary (code -> the chapters' symbols)
----------------------------------------
``x``            the residual stream, ``(B, T, C)``: batch, tokens, model width ``C = n_embd``
``q, k, v``      queries, keys, values per head, ``(B, H, T, d)`` with ``d = C / H``
``phi``          the feature map (``"elu+1"``, ``"relu"``, ``"performer"``); ``d_phi`` its width
``state.S``      ``S_t = sum_{j <= t} phi(k_j) v_j^T``, ``(B, H, d_phi, d)``: the whole past of a head
``state.z``      ``z_t = sum_{j <= t} phi(k_j)``, ``(B, H, d_phi)``: the normalizer
``g``            the decay ``g_t`` in ``S_t = g_t S_{t-1} + phi(k_t) v_t^T`` (constant or gated)
``beta``         the delta rule's write strength ``beta_t``
``cache``        the softmax KV cache: every past key and value, ``t (d + d_v)`` numbers per head

Two ways to run the same weights: :meth:`LanguageModel.forward` (all tokens at once, the chunked
form for the linear kinds) and :meth:`LanguageModel.step` (one token, carrying one state or cache
per layer); :meth:`LanguageModel.generate` uses the second. ``tests/test_model.py`` checks in
float64 that both give the same logits for every kind.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..decay import decayed_linear_attention
from ..delta import delta_rule_attention
from ..feature_maps import get_feature_map
from ..linear import linear_attention
from ..streaming import KVCache, LinearAttentionState

__all__ = ["KINDS", "LanguageModel", "ModelConfig"]

KINDS = ("softmax", "elu+1", "relu", "performer", "decay", "gated", "delta")
_FEATURE_MAP_KINDS = ("elu+1", "relu", "performer")
# GLA's gate temperature: g = sigmoid(a)^(1/16) keeps the gates near 1 (long memory) at initialisation.
_GATE_TEMPERATURE = 16.0


@dataclass
class ModelConfig:
    """The size of the model and its attention kind (one of :data:`KINDS`)."""

    vocab_size: int
    attention: str = "softmax"
    block_size: int = 128  # longest context (learned positions)
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    chunk_size: int = 64  # C of the chunked linear forms
    num_features: int = 32  # Performer's m = d_phi
    seed: int = 0  # Performer's random projections (layer l uses seed + l)

    def __post_init__(self) -> None:
        if self.attention not in KINDS:
            raise ValueError(f"attention must be one of {KINDS}, got {self.attention!r}")
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "chunk_size", "num_features"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    def to_dict(self) -> dict:
        return asdict(self)


@contextmanager
def _quiet_denominators(kind: str) -> Any:
    """Silence the library's non-positive-denominator warning for ReLU features only.

    A query with no positive entry gives ``phi(q) . z = 0``; the clamp makes that row's output 0
    ("attend to nothing"), a legitimate state of a trained ReLU model, so the warning would only
    repeat at every training step.
    """
    with warnings.catch_warnings():
        if kind == "relu":
            warnings.filterwarnings("ignore", message=".*denominators phi", category=RuntimeWarning)
        yield


class Attention(nn.Module):
    """Multi-head causal attention of one kind, in its parallel and its step form."""

    def __init__(self, cfg: ModelConfig, layer: int) -> None:
        super().__init__()
        self.kind, self.H, self.d = cfg.attention, cfg.n_head, cfg.n_embd // cfg.n_head
        self.chunk_size = cfg.chunk_size
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.phi = None
        if self.kind in _FEATURE_MAP_KINDS:
            options = {"d": self.d, "num_features": cfg.num_features, "seed": cfg.seed + layer}
            self.phi = get_feature_map(self.kind, **(options if self.kind == "performer" else {}))
        if self.kind in ("decay", "gated"):
            self.phi = get_feature_map("elu+1")
        if self.kind in ("gated", "delta"):
            self.per_token = nn.Linear(cfg.n_embd, self.H)  # gate logits a_t or write strengths
        if self.kind == "decay":  # RetNet's gamma_h = 1 - 2^(-5-h): each head its own memory length
            gamma = 1.0 - 2.0 ** (-5.0 - torch.arange(self.H, dtype=torch.float64))
            self.register_buffer("gamma", gamma, persistent=False)

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # x: (B, T, C) -> q, k, v: (B, H, T, d)
        B_, T, _ = x.shape
        q, k, v = self.qkv(x).split(self.H * self.d, dim=-1)
        return tuple(t.view(B_, T, self.H, self.d).transpose(1, 2) for t in (q, k, v))

    def _gates(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, T, C) -> g or beta: (B, H, T), one number per token and head
        if self.kind == "decay":
            return self.gamma.to(x.dtype)[:, None].expand(x.shape[0], self.H, x.shape[1])
        a = self.per_token(x).transpose(1, 2)
        if self.kind == "gated":
            return torch.exp(F.logsigmoid(a) / _GATE_TEMPERATURE)  # in (0, 1], never 0 in float32
        return torch.sigmoid(a)  # delta: beta in (0, 1)

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        # y: (B, H, T, d) -> (B, T, C)
        B_, _, T, _ = y.shape
        return self.proj(y.transpose(1, 2).reshape(B_, T, self.H * self.d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """All tokens at once. x: (B, T, C) -> (B, T, C)."""
        q, k, v = self._heads(x)
        C = self.chunk_size
        if self.kind == "softmax":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.kind in _FEATURE_MAP_KINDS:
            with _quiet_denominators(self.kind):
                y = linear_attention(q, k, v, self.phi, causal=True, method="chunked", chunk_size=C)
        elif self.kind in ("decay", "gated"):
            g = self._gates(x)
            y = decayed_linear_attention(q, k, v, self.phi, decay=g, method="chunked", chunk_size=C)
        else:
            y = delta_rule_attention(q, k, v, beta=self._gates(x), method="chunked", chunk_size=C)
        return self._merge(y)

    def new_state(self, batch: int, like: torch.Tensor) -> LinearAttentionState | KVCache:
        """An empty per-sequence memory for :meth:`step`: a KV cache (softmax) or a fixed state."""
        shape = (batch, self.H)
        if self.kind == "softmax":
            return KVCache(self.d, self.d, batch_shape=shape, like=like)
        phi = "identity" if self.kind == "delta" else self.phi
        return LinearAttentionState(self.d, self.d, phi, batch_shape=shape, like=like)

    def step(self, x_t: torch.Tensor, state: LinearAttentionState | KVCache) -> torch.Tensor:
        """One token. x_t: (B, 1, C) -> (B, 1, C); ``state`` is updated in place."""
        q, k, v = (t[:, :, 0] for t in self._heads(x_t))  # (B, H, d) each
        if self.kind == "softmax":
            y = state.step(q, k, v)
        elif self.kind in _FEATURE_MAP_KINDS:
            with _quiet_denominators(self.kind):
                y = state.step(q, k, v)
        elif self.kind in ("decay", "gated"):
            g = self._gates(x_t)[..., 0]  # (B, H)
            state.S, state.z = g[..., None, None] * state.S, g[..., None] * state.z  # forget, then add
            y = state.step(q, k, v)
        else:
            y = _delta_step(state, q, k, v, self._gates(x_t)[..., 0])
        return self._merge(y[:, :, None])


def _delta_step(state: LinearAttentionState, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                beta: torch.Tensor) -> torch.Tensor:
    """The delta rule on a state with identity features: read what ``S`` recalls for ``k_t``, write the
    correction, ``S += beta_t k_t (v_t - S^T k_t)^T``, then read ``y_t = S^T q_t`` (no normalizer).

    q, k, v: (B, H, d), beta: (B, H) -> y: (B, H, d). Features are unit rows, as in
    :func:`~linattn_core.delta.delta_rule_attention` with ``normalize_qk=True`` (its ``max(|x|, 1e-6)``).
    """
    q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
    recalled = (k[..., None, :] @ state.S)[..., 0, :]  # S_{t-1}^T k_t
    state.update(k, beta[..., None] * (v - recalled))  # S += k_t u_t^T (z is kept but never read)
    return (q[..., None, :] @ state.S)[..., 0, :]


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
        self.attn, self.mlp = Attention(cfg, layer), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def step(self, x_t: torch.Tensor, state: Any) -> torch.Tensor:
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
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: residual projections scaled by depth
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

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

    def new_states(self, batch: int) -> list:
        """One empty KV cache or state per layer, in the model's dtype and device."""
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
