"""SmolVLM's image path: a SigLIP-style vision encoder, then the connector that trades
resolution for width (pixel shuffle) and projects into the language model's width.

    image (N, 3, S, S) in [-1, 1]
      -> patches (conv, stride patch_size) + a learned position per patch
      -> `depth` pre-norm encoder layers (attention with biases, GELU-tanh MLP), final LayerNorm
      -> pixel shuffle: each scale_factor x scale_factor block of patches becomes one token of
         scale_factor^2 times the width
      -> a linear projection (no bias) to the language model's width

Attribute names are those of transformers' SmolVLMVisionTransformer and SmolVLMConnector, so
state_dict keys match LeRobot's under `model.vlm_with_expert.vlm.model.vision_model.` and
`...connector.`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.smolvla.config import VisionWidths


def patch_positions(widths: VisionWidths, side: int) -> Tensor:
    """The position-table row of each of side x side patches, as transformers' SmolVLM vision
    embeddings compute them for a fully valid image: fractional coordinates bucketed into the
    table's grid (the identity when the image is the size the table was made for)."""
    grid = widths.patches_per_side
    boundaries = torch.arange(1 / grid, 1.0, 1 / grid)
    coords = torch.arange(side, dtype=torch.float32) * (1.0 / torch.tensor(float(side)))
    buckets = torch.bucketize(coords.clamp(max=1.0 - 1e-6), boundaries, right=True)
    return (buckets[:, None] * grid + buckets[None, :]).reshape(-1)


class VisionEmbeddings(nn.Module):
    positions: Tensor

    def __init__(self, widths: VisionWidths, image_side: int) -> None:
        super().__init__()
        patch = widths.patch_size
        self.patch_embedding = nn.Conv2d(3, widths.width, patch, stride=patch)
        self.position_embedding = nn.Embedding(widths.patches_per_side**2, widths.width)
        side = image_side // patch
        self.register_buffer("positions", patch_positions(widths, side), persistent=False)

    def forward(self, images: Tensor) -> Tensor:
        patches = self.patch_embedding(images).flatten(2).transpose(1, 2)
        return patches + self.position_embedding(self.positions)[None]


class VisionAttention(nn.Module):
    def __init__(self, widths: VisionWidths) -> None:
        super().__init__()
        width = widths.width
        self.num_heads = widths.num_heads
        self.head_dim = width // widths.num_heads
        self.q_proj = nn.Linear(width, width)
        self.k_proj = nn.Linear(width, width)
        self.v_proj = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: Tensor) -> Tensor:
        batch, length = x.shape[:2]

        def heads(t: Tensor) -> Tensor:
            return t.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        out = F.scaled_dot_product_attention(q, k, v)  # every patch of a frame is valid
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, -1))


class VisionMLP(nn.Module):
    def __init__(self, widths: VisionWidths) -> None:
        super().__init__()
        self.fc1 = nn.Linear(widths.width, widths.mlp_dim)
        self.fc2 = nn.Linear(widths.mlp_dim, widths.width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class VisionLayer(nn.Module):
    def __init__(self, widths: VisionWidths, eps: float) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(widths.width, eps=eps)
        self.self_attn = VisionAttention(widths)
        self.layer_norm2 = nn.LayerNorm(widths.width, eps=eps)
        self.mlp = VisionMLP(widths)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class VisionEncoder(nn.Module):
    def __init__(self, widths: VisionWidths, eps: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VisionLayer(widths, eps) for _ in range(widths.depth))


class VisionModel(nn.Module):
    """(N, 3, S, S) -> (N, patches, vision width)."""

    def __init__(self, widths: VisionWidths, image_side: int, eps: float) -> None:
        super().__init__()
        self.embeddings = VisionEmbeddings(widths, image_side)
        self.encoder = VisionEncoder(widths, eps)
        self.post_layernorm = nn.LayerNorm(widths.width, eps=eps)

    def forward(self, images: Tensor) -> Tensor:
        hidden = self.embeddings(images)
        for layer in self.encoder.layers:
            hidden = layer(hidden)
        return self.post_layernorm(hidden)


class ModalityProjection(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, out_features, bias=False)


class Connector(nn.Module):
    """Pixel shuffle, then the projection into the language model's width."""

    def __init__(self, vision_width: int, text_width: int, scale_factor: int) -> None:
        super().__init__()
        self.scale_factor = scale_factor
        self.modality_projection = ModalityProjection(vision_width * scale_factor**2, text_width)

    def pixel_shuffle(self, x: Tensor) -> Tensor:
        """(N, side*side, D) -> (N, side*side / f^2, D * f^2): each f x f block of patches,
        read row by row within the block, becomes one token (transformers' order)."""
        batch, length, dim = x.shape
        side, f = int(length**0.5), self.scale_factor
        x = x.view(batch, side, side // f, dim * f)  # f neighbours in a row side by side
        x = x.permute(0, 2, 1, 3).reshape(batch, side // f, side // f, dim * f * f)
        return x.permute(0, 2, 1, 3).reshape(batch, length // (f * f), dim * f * f)

    def forward(self, features: Tensor) -> Tensor:
        return self.modality_projection.proj(self.pixel_shuffle(features))
