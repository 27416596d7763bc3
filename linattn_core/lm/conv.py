"""The short causal convolution in front of q, k and v (flash-linear-attention's ``ShortConvolution``).

Each channel ``c`` is filtered on its own (depthwise) over the last ``W`` tokens, then passed through
SiLU::

    y_t[c] = silu( sum_{i=0}^{W-1} w[c, i] x_{t-W+1+i}[c] )          (x_s = 0 for s < 0)

Causal: ``y_t`` reads tokens ``t-W+1 .. t`` only. In the parallel form that is ``nn.Conv1d`` with
``W - 1`` zeros of padding on the left; in the step form the layer's
state keeps the last ``W - 1`` inputs, the conv's whole memory. No bias, as in fla.

It lets every position see the few tokens before it before attention looks anything up: DeltaNet's
authors call it crucial, and Zoology/Based put one in front of every recall model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ShortConv"]


class ShortConv(nn.Conv1d):
    """Causal depthwise convolution over ``kernel`` tokens with SiLU after; weight ``(channels, 1, kernel)``.

    Parameters
    ----------
    channels : int
        Width of the input (each channel has its own filter).
    kernel : int
        ``W``: tokens each output reads (the current one and ``W - 1`` before it).
    """

    def __init__(self, channels: int, kernel: int) -> None:
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 1:
            raise ValueError(f"kernel must be a positive int, got {kernel!r}")
        super().__init__(channels, channels, kernel, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """All tokens at once. x: (B, T, channels) -> (B, T, channels)."""
        W = self.kernel_size[0]
        y = super().forward(F.pad(x.transpose(1, 2), (W - 1, 0)))  # W - 1 zeros before the first token
        # back to (B, T, channels) rows in memory: the q, k, v views downstream (and their gradients)
        # run on contiguous rows, which measured faster than leaving the conv's layout
        return F.silu(y.transpose(1, 2).contiguous())

    def new_history(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """The memory before the first token: ``W - 1`` zero inputs, ``(batch, W - 1, channels)``."""
        return like.new_zeros((batch, self.kernel_size[0] - 1, self.in_channels))

    def step(self, x_t: torch.Tensor, history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One token. x_t: (B, 1, channels), history: (B, W - 1, channels) -> y_t, the new history."""
        window = torch.cat([history, x_t], 1)  # (B, W, channels): x_{t-W+1} .. x_t
        y = (window * self.weight[:, 0].T).sum(1, keepdim=True)  # weight (channels, 1, W) -> (W, channels)
        return F.silu(y), window[:, 1:]
