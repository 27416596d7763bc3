"""The attention layers of the language model, one class per layer, chosen by name from :data:`LAYERS`.

Every layer maps the residual stream ``x: (B, T, C)`` to ``(B, T, C)`` in two forms that compute the
same thing: :meth:`Attention.forward` (all tokens at once: the chunked form for the linear layers)
and :meth:`Attention.step` (one token from a fixed-size state, or a KV cache for softmax). A layer is
made of the same few parts, in this order::

    q, k, v = split(W_qkv x)                    C -> 3C, no bias, then H heads of d = C / H each
    q, k, v = silu(conv(q, k, v))               optional: ShortConv, causal, over the last W tokens
    y       = mix(q, k, v)                      the token mixer: what differs between the layers
    y       = RMSNorm(y) * w                    optional: per head (over d), eps 1e-5, learned w
    y       = y * silu(W_g x)                   optional: the swish output gate, W_g: C -> C
    out     = W_o merge(y)                      C -> C, no bias

Every layer uses ``d_k = d_v = d`` per head. flash-linear-attention (fla) widens RetNet's values
(``expand_v = 2``) and narrows GLA's keys (``expand_k = 0.5``); neither is kept, so that all layers of
one width have the same projections and about the same number of parameters. No layer has rotary or
xPos positions: the model's learned position embeddings serve every layer alike.

Glossary (code -> the chapters' symbols)
----------------------------------------
``x``            the residual stream after the block's LayerNorm, ``(B, T, C)``
``q, k, v``      queries, keys, values, ``(B, H, T, d)``
``phi``          the feature map of the kernel layers; ``identity`` for the gated and delta layers
``S``            the state of a head, ``(d_phi, d)``: :class:`~linattn_core.decay.DecayedState`,
                 :class:`~linattn_core.delta.DeltaRuleState`, :class:`~linattn_core.LinearAttentionState`
``z``            the normalizer ``sum_j phi(k_j)``; only the kernel layers (elu+1, relu, performer) have it
``g``            the decay or gate ``g_t``; ``log_decay`` gives ``log g_t``, ``(B, H, T)`` or ``(B, H, T, d)``
``beta``         DeltaNet's write strength, ``(B, H, T)``
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..decay import DecayedState, decayed_linear_attention
from ..delta import DeltaRuleState, delta_rule_attention
from ..delta import unit_rows as unit_rows
from ..feature_maps import get_feature_map
from ..linear import linear_attention
from ..streaming import KVCache, LinearAttentionState
from .conv import ShortConv

__all__ = ["GLA", "LAYERS", "Attention", "DeltaNet", "DeltaNetAdditive", "LayerState", "LinearTransformer",
           "Performer", "ReLUAttention", "RetNet", "RetNetNoDecay", "SimpleGLA", "SimpleGLAConst", "Softmax",
           "retnet_gammas", "retnet_gate_bias", "unit_rows"]

# GLA's and simple GLA's gate temperature: log g = logsigmoid(a) / 16 keeps the gates near 1 (long
# memory) at initialisation, as fla's gate_logit_normalizer does.
GATE_NORMALIZER = 16.0
GLA_GATE_RANK = 16  # fla's gate_low_rank_dim
# GLA's chunks: the per-channel scores inside a chunk cost T * chunk * d exponentials (with their
# gradients), so short chunks; 16 measured fastest for a training step at T = 128, d = 32 (8: about the
# same, 32 and 64: 1.5 to 2 times slower)
GLA_CHUNK = 16
NORM_EPS = 1e-5  # fla's norm_eps of the per-head RMSNorm


@dataclass
class LayerState:
    """What a layer carries from one token to the next.

    ``memory`` is the attention's memory (a KV cache or a fixed-size state); ``conv`` holds the last
    ``W - 1`` inputs of the short convolution, ``(B, W - 1, 3C)``, or None without one.
    """

    memory: Any
    conv: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the memory and the conv history."""
        extra = 0 if self.conv is None else self.conv.numel() * self.conv.element_size()
        return int(self.memory.nbytes) + extra


class Attention(nn.Module):
    """The parts every layer shares: q, k, v projections, the optional short conv, the output.

    A subclass supplies the token mixer in both forms (:meth:`mix`, :meth:`new_memory`,
    :meth:`mix_step`) and says which optional parts it has (class attributes ``conv_default``,
    ``silu_qkv``, ``output_norm``, ``output_gate``).

    Parameters
    ----------
    cfg : ModelConfig
        ``n_embd`` (C), ``n_head`` (H), ``chunk_size``, ``conv`` (None: the layer's ``conv_default``;
        0: no conv; W: a kernel of W tokens), ``num_features`` and ``seed`` (Performer).
    layer : int
        Index of the layer in the model (seeds the Performer's random features).
    """

    conv_default = 0  # the paper's short conv kernel (0: none)
    silu_qkv = False  # SiLU on q, k, v even without the conv (DeltaNet's feature map)
    output_norm = False  # per-head RMSNorm of the mixer's output
    output_gate = False  # swish output gate silu(W_g x)

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__()
        C = cfg.n_embd
        self.H, self.d, self.chunk_size = cfg.n_head, C // cfg.n_head, cfg.chunk_size
        self.qkv_proj = nn.Linear(C, 3 * C, bias=False)
        self.o_proj = nn.Linear(C, C, bias=False)
        self.kernel = self.conv_default if cfg.conv is None else cfg.conv
        self.conv = ShortConv(3 * C, self.kernel) if self.kernel else None
        self.norm = nn.RMSNorm(self.d, eps=NORM_EPS) if self.output_norm else None
        self.g_proj = nn.Linear(C, C, bias=False) if self.output_gate else None

    # -- the token mixer (each layer's own)
    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """All tokens: q, k, v: (B, H, T, d), x: (B, T, C) (for gates) -> y: (B, H, T, d)."""
        raise NotImplementedError

    def new_memory(self, batch: int, like: torch.Tensor) -> Any:
        """An empty memory for ``batch`` sequences, on ``like``'s dtype and device."""
        raise NotImplementedError

    @torch.no_grad()
    def init_gates(self) -> None:
        """Set the layer's own starting values; the model calls it after its generic initialisation
        (normal weights, zero biases). Nothing by default."""

    def mix_step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, x_t: torch.Tensor,
                 memory: Any) -> torch.Tensor:
        """One token: q, k, v: (B, H, d), x_t: (B, 1, C) -> y: (B, H, d); ``memory`` updated in place."""
        raise NotImplementedError

    def memory_size(self, context: int) -> int:
        """Numbers in the memory of one sequence after ``context`` tokens (all heads)."""
        fixed = self.new_memory(1, torch.empty(0))  # float32: 4 bytes a number; the same at every t
        return fixed.nbytes // 4

    # -- the shared parts
    def state_size(self, context: int) -> int:
        """Numbers one layer keeps per sequence after ``context`` tokens: the memory and the conv's history.

        The x-axis of the recall/state-size figure of Zoology and Based (there in bytes: 4 per number).
        """
        conv = 0 if self.conv is None else (self.kernel - 1) * self.conv.in_channels
        return self.memory_size(context) + conv

    def qkv(self, x: torch.Tensor, state: LayerState | None = None) -> tuple[torch.Tensor, ...]:
        """x: (B, T, C) -> q, k, v: (B, H, T, d), through the conv (its step form when ``state`` is given)."""
        B, T, C = x.shape
        qkv = self.qkv_proj(x)  # (B, T, 3C)
        if self.conv is not None and state is None:
            qkv = self.conv(qkv)
        elif self.conv is not None:
            qkv, state.conv = self.conv.step(qkv, state.conv)
        elif self.silu_qkv:
            qkv = F.silu(qkv)
        return tuple(t.view(B, T, self.H, self.d).transpose(1, 2) for t in qkv.split(C, dim=-1))

    def output(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """y: (B, H, T, d), x: (B, T, C) -> (B, T, C): per-head norm, output gate, merge, W_o."""
        if self.norm is not None:
            y = self.norm(y)  # over d: each head on its own
        B, _, T, _ = y.shape
        y = y.transpose(1, 2).reshape(B, T, self.H * self.d)
        if self.g_proj is not None:
            y = y * F.silu(self.g_proj(x))
        return self.o_proj(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """All tokens at once. x: (B, T, C) -> (B, T, C)."""
        q, k, v = self.qkv(x)
        return self.output(self.mix(q, k, v, x), x)

    def new_state(self, batch: int, like: torch.Tensor) -> LayerState:
        """An empty state for :meth:`step`: the memory, and the conv's history (zeros) if there is a conv."""
        conv = None if self.conv is None else self.conv.new_history(batch, like)
        return LayerState(self.new_memory(batch, like), conv)

    def step(self, x_t: torch.Tensor, state: LayerState) -> torch.Tensor:
        """One token. x_t: (B, 1, C) -> (B, 1, C); ``state`` is updated in place."""
        q, k, v = (t[:, :, 0] for t in self.qkv(x_t, state))  # (B, H, d) each
        y = self.mix_step(q, k, v, x_t, state.memory)
        return self.output(y[:, :, None], x_t)


class Softmax(Attention):
    """Causal multi-head softmax attention (Vaswani et al. 2017), as in nanoGPT.

    ``y_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) v_j``. Parallel: torch's
    ``scaled_dot_product_attention``; step: the library's :class:`~linattn_core.KVCache`, every past key
    and value (memory grows with t). No output norm, no gate; projections without bias (as every layer
    here), where nanoGPT has biases.
    """

    def mix(self, q, k, v, x):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def new_memory(self, batch, like):
        return KVCache(self.d, self.d, batch_shape=(batch, self.H), like=like)

    def memory_size(self, context):
        return 2 * context * self.H * self.d  # every key and value

    def mix_step(self, q, k, v, x_t, memory):
        return memory.step(q, k, v)


class LinearTransformer(Attention):
    """The linear transformer (Katharopoulos et al. 2020, "Transformers are RNNs"), ``phi = elu + 1``.

    ``S_t = S_{t-1} + phi(k_t) v_t^T``, ``z_t = z_{t-1} + phi(k_t)``,
    ``y_t = phi(q_t)^T S_t / max(phi(q_t) . z_t, eps)``. Kept: the feature map, the normalizer ``z``, no
    scaling of q, no output norm or gate (the paper has none). Parallel:
    :func:`~linattn_core.linear_attention` (causal, chunked); step:
    :class:`~linattn_core.LinearAttentionState`.
    """

    feature_map = "elu+1"

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.phi = self.make_feature_map(cfg, layer)

    def make_feature_map(self, cfg: Any, layer: int) -> Any:
        return get_feature_map(self.feature_map)

    def mix(self, q, k, v, x):
        return linear_attention(q, k, v, self.phi, causal=True, method="chunked", chunk_size=self.chunk_size)

    def new_memory(self, batch, like):
        return LinearAttentionState(self.d, self.d, self.phi, batch_shape=(batch, self.H), like=like)

    def mix_step(self, q, k, v, x_t, memory):
        return memory.step(q, k, v)


@contextmanager
def _quiet_zero_rows() -> Iterator[None]:
    """Silence the library's non-positive-denominator warning (ReLU features only).

    A query with no positive entry gives ``phi(q) . z = 0``; the clamp makes that row's output 0
    ("attend to nothing"), a legitimate state of a trained ReLU model, so the warning would only
    repeat at every training step.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*denominators phi", category=RuntimeWarning)
        yield


class ReLUAttention(LinearTransformer):
    """The linear transformer with ReLU features, ``phi(x) = max(x, 0)`` (as in Based's feature-map study).

    The same equations as :class:`LinearTransformer`, normalizer ``z`` included. A row of ``phi(q)``
    can be all zeros; the denominator's clamp ``max(., eps)`` then gives that query an output of 0,
    and the library's warning about it is silenced here.
    """

    feature_map = "relu"

    def mix(self, q, k, v, x):
        with _quiet_zero_rows():
            return super().mix(q, k, v, x)

    def mix_step(self, q, k, v, x_t, memory):
        with _quiet_zero_rows():
            return super().mix_step(q, k, v, x_t, memory)


class Performer(LinearTransformer):
    """The Performer (Choromanski et al. 2021): FAVOR+ positive random features, normalizer ``z``.

    ``phi(x) = exp(W x - |x|^2 / 2) / sqrt(m)`` (x scaled by ``d^-1/4``), ``m = num_features`` orthogonal
    random rows ``W``, drawn once per layer (seed ``cfg.seed + layer``) and kept fixed (no redrawing
    during training, which the paper also allows). Then the equations of :class:`LinearTransformer`.
    """

    def make_feature_map(self, cfg: Any, layer: int) -> Any:
        return get_feature_map("performer", d=self.d, num_features=cfg.num_features, seed=cfg.seed + layer)


def retnet_gammas(n_head: int) -> torch.Tensor:
    """RetNet's decay per head, ``gamma_h = 1 - 2^(-5-h)`` for ``h = 0 .. H-1`` (float64, exact)."""
    return 1.0 - 2.0 ** (-5.0 - torch.arange(n_head, dtype=torch.float64))


class _Decayed(Attention):
    """The gated/decayed layers without a normalizer: ``S_t = g_t S_{t-1} + k_t v_t^T``, ``y_t = S_t^T q_t``.

    ``q`` is scaled by ``d^-1/2``, the features are the identity, and the output goes through the
    per-head RMSNorm and the swish gate. A subclass gives :meth:`log_decay`, ``log g_t``.
    """

    output_norm = True
    output_gate = True

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.scale = self.d**-0.5

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) -> ``log g``: (B, H, T) (one per head) or (B, H, T, d) (one per key channel)."""
        raise NotImplementedError

    def mix(self, q, k, v, x):
        return decayed_linear_attention(q * self.scale, k, v, "identity", log_decay=self.log_decay(x),
                                        normalize=False, method="chunked", chunk_size=self.chunk_size)

    def new_memory(self, batch, like):
        return DecayedState(self.d, self.d, "identity", normalize=False, batch_shape=(batch, self.H),
                            like=like)

    def mix_step(self, q, k, v, x_t, memory):
        log_g = self.log_decay(x_t)[:, :, 0]  # (B, H) or (B, H, d)
        return memory.step(q * self.scale, k, v, log_g_t=log_g)


class RetNet(_Decayed):
    """RetNet's multi-scale retention (Sun et al. 2023), at this scale.

    Per head h: ``S_t = gamma_h S_{t-1} + k_t v_t^T``, ``o_t = S_t^T (q_t / sqrt(d))``, with the fixed
    decay ``gamma_h = 1 - 2^(-5-h)`` (:func:`retnet_gammas`: each head its own memory length, from 32 to
    a few hundred tokens); no normalizer ``z``; then ``RMSNorm(o_t) * w * silu(W_g x_t)`` per head and
    ``W_o``. Kept from fla's ``MultiScaleRetention``: q, k, v, g projections without bias, the gammas,
    the per-head RMSNorm with the swish gate (fla's choice; the paper uses a GroupNorm). Changed: no
    rotary/xPos (the model's learned positions), ``d_v = d`` (fla: ``2d``). Parallel:
    :func:`~linattn_core.decay.decayed_linear_attention` (chunked); step:
    :class:`~linattn_core.decay.DecayedState`.
    """

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.register_buffer("gamma", self.gammas(self.H), persistent=False)

    @staticmethod
    def gammas(n_head: int) -> torch.Tensor:
        return retnet_gammas(n_head)

    def log_decay(self, x):
        B, T, _ = x.shape
        return torch.log(self.gamma).to(x.dtype)[:, None].expand(B, self.H, T)


class RetNetNoDecay(RetNet):
    """:class:`RetNet` with ``gamma_h = 1`` for every head: no decay, everything else equal.

    ``S_t = S_{t-1} + k_t v_t^T``: the contrast that measures what the decay itself does.
    """

    @staticmethod
    def gammas(n_head: int) -> torch.Tensor:
        return torch.ones(n_head, dtype=torch.float64)


def retnet_gate_bias(n_head: int) -> torch.Tensor:
    """The gate bias ``b_h`` at which ``logsigmoid(b_h) / 16 = log gamma_h``: a gate of zero input
    starts at RetNet's decay :func:`retnet_gammas` (``b_h = logit(gamma_h^16)``), float64."""
    g16 = retnet_gammas(n_head) ** GATE_NORMALIZER
    return torch.log(g16 / (1 - g16))


class SimpleGLA(_Decayed):
    """A decay per head and token computed from the data: fla's ``SimpleGatedLinearAttention``.

    ``log g_t = logsigmoid(W_gk x_t + b) / 16`` (``W_gk: C -> H``, with bias: one scalar gate per head
    and token; GLA's gate, a sigmoid with a temperature, not Mamba-2's ``exp(-softplus(.) A)``, which
    shares only its shape), ``S_t = g_t S_{t-1} + k_t v_t^T``; everything else as
    :class:`RetNet`. The bias starts at :func:`retnet_gate_bias` (fla starts it at 0: every head at
    ``g = 0.958``), so that at initialisation, where ``W_gk x`` is small, each head decays as RetNet's
    does: this layer, :class:`SimpleGLAConst` and :class:`RetNet` then differ by one thing each. For
    the same reason the short conv is off by default here, where fla turns it on; ``conv=4`` gives
    fla's default.
    """

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.gk_proj = nn.Linear(cfg.n_embd, self.H, bias=True)

    @torch.no_grad()
    def init_gates(self) -> None:
        self.gk_proj.bias.copy_(retnet_gate_bias(self.H))

    def log_decay(self, x):
        return (F.logsigmoid(self.gk_proj(x)) / GATE_NORMALIZER).transpose(1, 2)  # (B, H, T)


class SimpleGLAConst(_Decayed):
    """The control of :class:`SimpleGLA`: its gate with the input taken out (``W_gk = 0``).

    ``log g_h = logsigmoid(b_h) / 16``, one learned number per head, the same at every token, started at
    RetNet's decays. Against :class:`RetNet` it changes one thing (the decay is learned); against
    :class:`SimpleGLA` one thing (the decay reads the input). Not a layer of fla or of a paper.
    """

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.gate_bias = nn.Parameter(torch.zeros(self.H))

    @torch.no_grad()
    def init_gates(self) -> None:
        self.gate_bias.copy_(retnet_gate_bias(self.H))

    def log_decay(self, x):
        B, T, _ = x.shape
        return (F.logsigmoid(self.gate_bias) / GATE_NORMALIZER)[:, None].expand(B, self.H, T).to(x.dtype)


class GLA(_Decayed):
    """Gated Linear Attention (Yang et al. 2024): a gate per key channel from a low-rank projection.

    ``log alpha_t = logsigmoid(W_2 (W_1 x_t) + b) / 16`` with ``W_1: C -> 16`` (no bias) and
    ``W_2: 16 -> C`` (bias), split per head into ``(H, d)``;
    ``S_t = diag(alpha_t) S_{t-1} + k_t v_t^T``, ``o_t = S_t^T (q_t / sqrt(d))``, no normalizer; per-head
    RMSNorm, swish output gate, ``W_o``. Kept from the paper and fla's ``GatedLinearAttention``: the
    rank-16 gate and its normalizer 16, no conv (as in the paper), identity features. Changed:
    ``d_k = d`` (fla: ``expand_k = 0.5``). Parallel: :func:`~linattn_core.decay.decayed_linear_attention`
    with per-channel gates (chunked, in log space, chunks of at most :data:`GLA_CHUNK` tokens); step:
    :class:`~linattn_core.decay.DecayedState`.
    """

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.gk_proj = nn.Sequential(nn.Linear(cfg.n_embd, GLA_GATE_RANK, bias=False),
                                     nn.Linear(GLA_GATE_RANK, cfg.n_embd, bias=True))
        self.chunk_size = min(self.chunk_size, GLA_CHUNK)

    def log_decay(self, x):
        B, T, _ = x.shape
        log_alpha = F.logsigmoid(self.gk_proj(x)) / GATE_NORMALIZER  # (B, T, C)
        return log_alpha.view(B, T, self.H, self.d).transpose(1, 2)  # (B, H, T, d)


class DeltaNet(Attention):
    """DeltaNet: the delta rule (Schlag et al. 2021) as a layer, with Yang et al. (2024)'s recipe.

    ``q, k, v = silu(conv_4(W x))`` (short causal conv, kernel 4, SiLU: fla's defaults, which it calls
    crucial), ``q, k`` L2-normalized per head, ``beta_t = sigmoid(W_b x_t)`` per head (no bias)::

        S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,        o_t = S_t^T q_t

    no normalizer; per-head RMSNorm (no output gate, fla's default), ``W_o``. fla also scales q by
    ``d^-1/2``, a constant the RMSNorm that follows removes (up to its eps), so it is left out.
    Without the conv (``conv=0``) q, k and v still pass through SiLU, as in fla. Parallel:
    :func:`~linattn_core.delta.delta_rule_attention` (chunked); step:
    :class:`~linattn_core.delta.DeltaRuleState`.
    """

    conv_default = 4
    silu_qkv = True
    output_norm = True

    def __init__(self, cfg: Any, layer: int) -> None:
        super().__init__(cfg, layer)
        self.b_proj = nn.Linear(cfg.n_embd, self.H, bias=False)

    def beta(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, T, C) -> beta: (B, H, T), in (0, 1)."""
        return torch.sigmoid(self.b_proj(x)).transpose(1, 2)

    def mix(self, q, k, v, x):
        return delta_rule_attention(q, k, v, self.beta(x), "identity", normalize_qk=True, method="chunked",
                                    chunk_size=self.chunk_size)

    def new_memory(self, batch, like):
        return DeltaRuleState(self.d, self.d, "identity", normalize_qk=True, batch_shape=(batch, self.H),
                              like=like)

    def mix_step(self, q, k, v, x_t, memory):
        return memory.step(q, k, v, self.beta(x_t)[:, :, 0])


class DeltaNetAdditive(DeltaNet):
    """DeltaNet's layer with the plain additive write: the contrast that isolates the delta update.

    Same conv, SiLU, L2-normalized q and k, ``beta_t``, RMSNorm and ``W_o`` as :class:`DeltaNet`, but
    ``S_t = S_{t-1} + beta_t k_t v_t^T`` (nothing read back, nothing corrected), ``o_t = S_t^T q_t``.
    Parallel: :func:`~linattn_core.decay.decayed_linear_attention` with ``decay=1`` and values
    ``beta_t v_t``; step: :class:`~linattn_core.decay.DecayedState`.
    """

    def mix(self, q, k, v, x):
        v = self.beta(x)[..., None] * v
        return decayed_linear_attention(unit_rows(q), unit_rows(k), v, "identity", decay=1.0, normalize=False,
                                        method="chunked", chunk_size=self.chunk_size)

    def new_memory(self, batch, like):
        return DecayedState(self.d, self.d, "identity", normalize=False, batch_shape=(batch, self.H),
                            like=like)

    def mix_step(self, q, k, v, x_t, memory):
        v = self.beta(x_t)[:, :, 0, None] * v
        return memory.step(unit_rows(q), unit_rows(k), v, 1.0)


#: The attention layers by their command-line names (``--attention NAME``).
LAYERS: dict[str, type[Attention]] = {
    "softmax": Softmax,
    "elu+1": LinearTransformer,
    "relu": ReLUAttention,
    "performer": Performer,
    "retnet": RetNet,
    "retnet_no_decay": RetNetNoDecay,
    "simple_gla": SimpleGLA,
    "simple_gla_const": SimpleGLAConst,
    "gla": GLA,
    "deltanet": DeltaNet,
    "deltanet_additive": DeltaNetAdditive,
}
