"""The decoder layer SmolVLA's language model and its action expert are made of (SmolLM2, a
Llama): RMSNorm (x / rms(x) * w), grouped-query attention projections without biases, a SiLU
gated MLP. Attention itself is run by the callers (policies.smolvla.expert), since the expert's
cross-attention layers read keys and values that another stack made.

Attribute names are transformers' Llama ones, so state_dict keys match LeRobot's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.smolvla.config import TextWidths


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32, returned in x's dtype (Llama's)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class Attention(nn.Module):
    """q/k/v/o projections. `kv_width`: the width keys and values are projected from (the
    language model's key/value width in the expert's cross-attention layers)."""

    def __init__(self, widths: TextWidths, kv_width: int | None = None) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = widths.num_heads, widths.num_kv_heads
        self.head_dim = widths.head_dim
        inner, kv_inner = widths.num_heads * widths.head_dim, widths.num_kv_heads * widths.head_dim
        source = widths.width if kv_width is None else kv_width
        self.q_proj = nn.Linear(widths.width, inner, bias=False)
        self.k_proj = nn.Linear(source, kv_inner, bias=False)
        self.v_proj = nn.Linear(source, kv_inner, bias=False)
        self.o_proj = nn.Linear(inner, widths.width, bias=False)

    def queries(self, x: Tensor) -> Tensor:
        """(B, S, W) -> (B, H, S, D), before rotary."""
        return self.split_heads(self.q_proj(x), self.num_heads)

    def keys_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, L, source width) -> keys and values (B, G, L, D)."""
        return self.split_heads(self.k_proj(x), self.num_kv_heads), self.split_heads(
            self.v_proj(x), self.num_kv_heads
        )

    def split_heads(self, x: Tensor, heads: int) -> Tensor:
        batch, length = x.shape[:2]
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)


class MLP(nn.Module):
    """down(silu(gate(x)) * up(x))."""

    def __init__(self, widths: TextWidths) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(widths.width, widths.mlp_dim, bias=False)
        self.up_proj = nn.Linear(widths.width, widths.mlp_dim, bias=False)
        self.down_proj = nn.Linear(widths.mlp_dim, widths.width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with residuals; attention is the caller's."""

    def __init__(self, widths: TextWidths, eps: float, kv_width: int | None = None) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(widths.width, eps)
        self.self_attn = Attention(widths, kv_width)
        self.post_attention_layernorm = RMSNorm(widths.width, eps)
        self.mlp = MLP(widths)

    def finish(self, hidden: Tensor, attended: Tensor) -> Tensor:
        """The rest of the layer once attention has run: o_proj, residual, MLP block."""
        hidden = hidden + self.self_attn.o_proj(attended)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class DecoderStack(nn.Module):
    """Layers and the final norm (transformers' LlamaModel names; the token table is kept
    apart, on the host: policies.smolvla.codec embeds prompts)."""

    def __init__(self, layers: list[DecoderLayer], width: int, eps: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(width, eps)

    def decoder_layers(self) -> list[DecoderLayer]:
        return [layer for layer in self.layers if isinstance(layer, DecoderLayer)]


def rotary(positions: Tensor, head_dim: int, base: float) -> tuple[Tensor, Tensor]:
    """cos, sin (B, S, head_dim) for integer positions (B, S), in float32: LeRobot's
    apply_rope (frequencies base^(-2i/D), halves convention)."""
    exponents = (2.0 / head_dim) * torch.arange(
        head_dim // 2, dtype=torch.float32, device=positions.device
    )
    angles = positions[..., None].float() / base**exponents
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, H, S, D) rotated by cos/sin (B, S, D), computed in float32, in x's dtype."""
    x32 = x.float()
    half = x.shape[-1] // 2
    turned = torch.cat([-x32[..., half:], x32[..., :half]], dim=-1)
    return (x32 * cos[:, None] + turned * sin[:, None]).to(x.dtype)
