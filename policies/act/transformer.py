"""The transformer parts of ACT: attention, encoder and decoder layers, position embeddings.

Tensors are batch-first here: (batch, tokens, dim_model). Parameter names match LeRobot's ACT
(`self_attn.in_proj_weight`, `multihead_attn.out_proj.bias`, `linear1`, `norm3`, ...), which
themselves follow `torch.nn.MultiheadAttention`, so trained weights load without renaming.

As in ACT (and DETR before it) position embeddings are added to queries and keys, never to
values, and every layer receives them again.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from policies.act.config import ACTConfig
from policies.model_hooks import MatmulParameters


class Attention(MatmulParameters):
    """Multi-head attention with `nn.MultiheadAttention`'s parameter layout (packed q/k/v
    input projection, `out_proj`), computed with `scaled_dot_product_attention`."""

    # Bare parameters that feed matmuls (for the runner's half-weight copy).
    matmul_parameters: ClassVar[tuple[str, ...]] = ("in_proj_weight", "in_proj_bias")

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        q = self._split_heads(F.linear(query, w_q, b_q))
        k = self._split_heads(F.linear(key, w_k, b_k))
        v = self._split_heads(F.linear(value, w_v, b_v))
        out = F.scaled_dot_product_attention(q, k, v)  # (B, heads, Tq, head_dim)
        batch, _, tokens, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, tokens, -1)
        return self.out_proj(out)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        return x.view(batch, tokens, self.n_heads, dim // self.n_heads).transpose(1, 2)


def _activation(name: str):  # type: ignore[no-untyped-def]
    return {"relu": F.relu, "gelu": F.gelu}[name]


class EncoderLayer(nn.Module):
    """Self-attention, then an MLP; LayerNorm before (pre_norm) or after each, with residuals."""

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config.dim_model, config.n_heads)
        self.linear1 = nn.Linear(config.dim_model, config.dim_feedforward)
        self.linear2 = nn.Linear(config.dim_feedforward, config.dim_model)
        self.norm1 = nn.LayerNorm(config.dim_model)
        self.norm2 = nn.LayerNorm(config.dim_model)
        self.activation = _activation(config.feedforward_activation)
        self.pre_norm = config.pre_norm

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        skip = x
        if self.pre_norm:
            x = self.norm1(x)
        q = k = x + pos
        x = skip + self.self_attn(q, k, x)
        if self.pre_norm:
            skip = x
            x = self.norm2(x)
        else:
            x = skip = self.norm1(x)
        x = skip + self.linear2(self.activation(self.linear1(x)))
        if not self.pre_norm:
            x = self.norm2(x)
        return x


class Encoder(nn.Module):
    """A stack of encoder layers; with pre_norm, a final LayerNorm (else none, as in ACT)."""

    def __init__(self, config: ACTConfig, n_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(n_layers))
        self.norm = nn.LayerNorm(config.dim_model) if config.pre_norm else nn.Identity()

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, pos)
        return self.norm(x)


class DecoderLayer(nn.Module):
    """Self-attention over the action queries, cross-attention into the encoder output, MLP."""

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config.dim_model, config.n_heads)
        self.multihead_attn = Attention(config.dim_model, config.n_heads)
        self.linear1 = nn.Linear(config.dim_model, config.dim_feedforward)
        self.linear2 = nn.Linear(config.dim_feedforward, config.dim_model)
        self.norm1 = nn.LayerNorm(config.dim_model)
        self.norm2 = nn.LayerNorm(config.dim_model)
        self.norm3 = nn.LayerNorm(config.dim_model)
        self.activation = _activation(config.feedforward_activation)
        self.pre_norm = config.pre_norm

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        query_pos: torch.Tensor,
        memory_pos: torch.Tensor,
    ) -> torch.Tensor:
        skip = x
        if self.pre_norm:
            x = self.norm1(x)
        q = k = x + query_pos
        x = skip + self.self_attn(q, k, x)
        if self.pre_norm:
            skip = x
            x = self.norm2(x)
        else:
            x = skip = self.norm1(x)
        x = skip + self.multihead_attn(x + query_pos, memory + memory_pos, memory)
        if self.pre_norm:
            skip = x
            x = self.norm3(x)
        else:
            x = skip = self.norm2(x)
        x = skip + self.linear2(self.activation(self.linear1(x)))
        if not self.pre_norm:
            x = self.norm3(x)
        return x


class Decoder(nn.Module):
    """A stack of decoder layers followed by a LayerNorm (always, as in ACT)."""

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.norm = nn.LayerNorm(config.dim_model)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        query_pos: torch.Tensor,
        memory_pos: torch.Tensor,
    ) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, memory, query_pos, memory_pos)
        return self.norm(x)


def sinusoidal_position_embedding_2d(height: int, width: int, dim_model: int) -> torch.Tensor:
    """Fixed 2D embedding of a (height, width) feature map: (height * width, dim_model), row-major.

    Half of the channels encode the row, half the column. Positions count from 1 and are scaled
    to (0, 2*pi]; each half interleaves sin and cos over geometric frequencies (temperature 10000).
    This is ACT's (and DETR's) embedding, computed once here in float32 in the same order of
    operations as LeRobot computes it on every forward pass.
    """
    half = dim_model // 2
    eps, two_pi, temperature = 1e-6, 2 * math.pi, 10000
    ones = torch.ones(1, height, width)
    rows = ones.cumsum(1, dtype=torch.float32)
    cols = ones.cumsum(2, dtype=torch.float32)
    rows = rows / (rows[:, -1:, :] + eps) * two_pi
    cols = cols / (cols[:, :, -1:] + eps) * two_pi
    inverse_frequency = temperature ** (2 * (torch.arange(half, dtype=torch.float32) // 2) / half)
    rows = rows.unsqueeze(-1) / inverse_frequency
    cols = cols.unsqueeze(-1) / inverse_frequency
    embed_rows = torch.stack((rows[..., 0::2].sin(), rows[..., 1::2].cos()), dim=-1).flatten(3)
    embed_cols = torch.stack((cols[..., 0::2].sin(), cols[..., 1::2].cos()), dim=-1).flatten(3)
    embed = torch.cat((embed_rows, embed_cols), dim=3)  # (1, H, W, dim_model)
    return embed.reshape(height * width, dim_model)


def sinusoidal_position_embedding_1d(n_positions: int, dim: int) -> torch.Tensor:
    """The Transformer paper's fixed 1D embedding, (n_positions, dim): sin on even channels,
    cos on odd ones. Used only for the VAE encoder buffer kept from training."""
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    exponent = 2 * (torch.arange(dim, dtype=torch.float64) // 2) / dim
    angles = position / torch.pow(10000.0, exponent)
    table = torch.empty(n_positions, dim, dtype=torch.float64)
    table[:, 0::2] = angles[:, 0::2].sin()
    table[:, 1::2] = angles[:, 1::2].cos()
    return table.float()
