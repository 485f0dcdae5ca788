"""The transformer parts of the flow policy: pre-norm attention blocks and the time embedding.

Tensors are batch-first, (batch, tokens, dim). Cross-attention takes its keys and values already
projected (`CrossAttention.project_memory`), so the action expert projects the context once per
inference, not once per denoising step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


def _split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    batch, tokens, dim = x.shape
    return x.view(batch, tokens, n_heads, dim // n_heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, _, tokens, _ = x.shape
    return x.transpose(1, 2).reshape(batch, tokens, -1)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (_split_heads(t, self.n_heads) for t in self.qkv(x).chunk(3, dim=-1))
        return self.out(_merge_heads(F.scaled_dot_product_attention(q, k, v)))


class CrossAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of the context, split into heads: once per inference."""
        k, v = self.kv(memory).chunk(2, dim=-1)
        return _split_heads(k, self.n_heads), _split_heads(v, self.n_heads)

    def forward(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        q = _split_heads(self.q(x), self.n_heads)
        return self.out(_merge_heads(F.scaled_dot_product_attention(q, keys, values)))


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class ContextLayer(nn.Module):
    """Self-attention over the image and state tokens, then an MLP (pre-norm, residual)."""

    def __init__(self, dim: int, n_heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, n_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ExpertLayer(nn.Module):
    """One action-expert layer: the action tokens attend to each other, then to the context,
    then an MLP (pre-norm, residual)."""

    def __init__(self, dim: int, n_heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = SelfAttention(dim, n_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_attn = CrossAttention(dim, n_heads)
        self.norm3 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, hidden)

    def forward(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm1(x))
        x = x + self.cross_attn(self.norm2(x), keys, values)
        return x + self.mlp(self.norm3(x))


def sinusoidal_time_embedding(times: torch.Tensor, dim: int) -> torch.Tensor:
    """(n,) flow times in [0, 1] -> (n, dim): sin and cos over periods from 4e-3 to 4 (as pi0),
    fine enough to tell the Euler steps apart."""
    half = dim // 2
    fraction = torch.linspace(0.0, 1.0, half, dtype=torch.float64)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angles = times.to(torch.float64)[:, None] * (2 * math.pi / period)[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()
