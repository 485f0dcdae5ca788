"""The SigLIP vision tower PaliGemma uses (no pooling head) and its multi-modal projector.

Attribute names are those of transformers' SiglipVisionModel and PaliGemmaMultiModalProjector,
so state_dict keys match LeRobot's. Images are (N, 3, H, W) in [-1, 1]; each gives
(H / patch)^2 tokens. The projected features are not rescaled: transformers >= 5.4 (which
LeRobot requires) and openpi's patched PaliGemma both leave them as the projector gives them.
"""

from __future__ import annotations

import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.pi0.config import SiglipWidths
from policies.pi0.fused_projections import fuse_linears


class SiglipEmbeddings(nn.Module):
    """Non-overlapping patch convolution plus a learned position per patch."""

    def __init__(self, widths: SiglipWidths) -> None:
        super().__init__()
        self.patch_embedding = nn.Conv2d(
            3, widths.width, kernel_size=widths.patch_size, stride=widths.patch_size
        )
        self.position_embedding = nn.Embedding(widths.num_patches, widths.width)

    def forward(self, images: Tensor) -> Tensor:
        patches = self.patch_embedding(images.to(self.patch_embedding.weight.dtype))
        tokens = patches.flatten(2).transpose(1, 2)
        return tokens + self.position_embedding.weight[None]


class SiglipAttention(nn.Module):
    """Bidirectional multi-head attention with biased projections."""

    def __init__(self, widths: SiglipWidths) -> None:
        super().__init__()
        self.num_heads = widths.num_heads
        self.head_dim = widths.width // widths.num_heads
        self.scale = self.head_dim**-0.5
        self.k_proj = nn.Linear(widths.width, widths.width)
        self.v_proj = nn.Linear(widths.width, widths.width)
        self.q_proj = nn.Linear(widths.width, widths.width)
        self.out_proj = nn.Linear(widths.width, widths.width)
        self.fused_qkv: nn.Linear | None = None  # set by fuse_projections, for compiled tiers

    def fuse_projections(self) -> None:
        """q, k and v as one matrix product from now on (policies.pi0.fused_projections)."""
        self.fused_qkv = fuse_linears([self.q_proj, self.k_proj, self.v_proj])

    def forward(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape

        def heads(t: Tensor) -> Tensor:
            return t.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        if self.fused_qkv is None:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:
            q, k, v = self.fused_qkv(x).chunk(3, dim=-1)
        q, k, v = heads(q), heads(k), heads(v)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, width))


class SiglipMLP(nn.Module):
    """fc2(gelu_tanh(fc1(x)))."""

    def __init__(self, widths: SiglipWidths) -> None:
        super().__init__()
        self.fc1 = nn.Linear(widths.width, widths.mlp_dim)
        self.fc2 = nn.Linear(widths.mlp_dim, widths.width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class SiglipEncoderLayer(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self, widths: SiglipWidths, eps: float) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(widths.width, eps=eps)
        self.self_attn = SiglipAttention(widths)
        self.layer_norm2 = nn.LayerNorm(widths.width, eps=eps)
        self.mlp = SiglipMLP(widths)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class SiglipEncoder(nn.Module):
    """The stack of encoder layers."""

    def __init__(self, widths: SiglipWidths, eps: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(SiglipEncoderLayer(widths, eps) for _ in range(widths.depth))
        self.layer_call = run_encoder_layer  # Pi0Step.compile_regions compiles it once for all

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = self.layer_call(layer, x)
        return x


def run_encoder_layer(layer: nn.Module, x: Tensor) -> Tensor:
    """One encoder layer, as a function of the layer, so one compiled copy serves them all."""
    return layer(x)  # type: ignore[no-any-return]


class SiglipVisionTransformer(nn.Module):
    """Embeddings, encoder, final LayerNorm."""

    def __init__(self, widths: SiglipWidths, eps: float) -> None:
        super().__init__()
        self.embeddings = SiglipEmbeddings(widths)
        self.encoder = SiglipEncoder(widths, eps)
        self.post_layernorm = nn.LayerNorm(widths.width, eps=eps)

    def forward(self, images: Tensor) -> Tensor:
        return self.post_layernorm(self.encoder(self.embeddings(images)))


class SiglipVisionTower(nn.Module):
    """transformers' SiglipVisionModel: the transformer under `vision_model`."""

    def __init__(self, widths: SiglipWidths, eps: float) -> None:
        super().__init__()
        self.vision_model = SiglipVisionTransformer(widths, eps)

    def forward(self, images: Tensor) -> Tensor:
        """(N, 3, H, W) -> (N, patches, width), the last hidden state."""
        return self.vision_model(images)


class MultiModalProjector(nn.Module):
    """Vision width -> language width, one biased linear layer."""

    def __init__(self, vision_width: int, language_width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(vision_width, language_width)

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features)
