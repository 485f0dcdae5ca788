"""Gemma's layer math as pi0 uses it: RMSNorm with (1 + w) (or adaRMS for pi0.5's expert),
rotary embeddings, grouped-query attention over an explicit additive mask, the GELU-tanh gated
MLP, and HostTable for the vocabulary-sized matrices the serving path never multiplies.

Attribute names are those of transformers' Gemma modules, so state_dict keys match LeRobot's.
Casts follow LeRobot's PiGemma code: norms compute in float32 and return the input dtype; rotary
cos/sin are float32 cast to the hidden dtype.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.pi0.config import GemmaWidths
from policies.pi0.fused_projections import fuse_linears, split_sizes

# LeRobot's (openpi's) additive mask value; finite so fully masked rows (padding queries) give
# a uniform softmax instead of NaN.
MASK_VALUE = -2.3819763e38


class HostTable(nn.Module):
    """A (rows, cols) matrix that `.to()`, `.cuda()` and `.half()` leave where and as it is:
    the token table and the unused LM heads stay in host memory, off the accelerator."""

    def __init__(self, rows: int, cols: int) -> None:
        super().__init__()
        # Zeros, not torch.empty: a network built without a checkpoint (tests, benchmarks, the
        # demo's writer) must not embed whatever memory held (NaN at times); a checkpoint's
        # table replaces it (weights.load_weights), and on the meta device it costs nothing.
        self.weight = nn.Parameter(torch.zeros(rows, cols), requires_grad=False)

    def _apply(self, fn: Any, recurse: bool = True) -> HostTable:
        return self


class GemmaRMSNorm(nn.Module):
    """x / rms(x) * (1 + weight); with cond_dim (adaRMS) scale, shift and a residual gate come
    from `dense(cond)` instead of a weight. forward returns (normed, gate or None)."""

    def __init__(self, dim: int, eps: float, cond_dim: int | None = None) -> None:
        super().__init__()
        self.eps = eps
        self.dense: nn.Linear | None = None
        if cond_dim is None:
            self.weight = nn.Parameter(torch.zeros(dim))
        else:
            self.dense = nn.Linear(cond_dim, 3 * dim)
            nn.init.zeros_(self.dense.weight)  # as LeRobot: starts as a plain norm

    def forward(self, x: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + self.eps)
        if self.dense is None:
            return (normed * (1.0 + self.weight.float())).to(x.dtype), None
        if cond is None:
            raise ValueError("an adaptive RMSNorm needs its conditioning vector")
        modulation = self.dense(cond.to(self.dense.weight.dtype))
        if modulation.ndim == 2:
            modulation = modulation[:, None, :]
        scale, shift, gate = modulation.chunk(3, dim=-1)
        normed = normed * (1.0 + scale.float()) + shift.float()
        return normed.to(x.dtype), gate.to(x.dtype)


def gated_residual(x: Tensor, y: Tensor, gate: Tensor | None) -> Tensor:
    """x + y, or x + y * gate under adaRMS."""
    return x + y if gate is None else x + y * gate


class RotaryEmbedding(nn.Module):
    """Rotary cos/sin for integer positions. inv_freq is a non-persistent buffer, so it is cast
    with the model as transformers' is (LeRobot's bfloat16 model rounds it to bfloat16)."""

    inv_freq: Tensor

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", self.frequencies(), persistent=False)

    def frequencies(self, device: torch.device | str | None = None) -> Tensor:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device)
        return 1.0 / (self.theta ** (exponents.float() / self.head_dim))

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions (B, S) int -> cos, sin (B, S, head_dim) in `dtype` (computed in float32)."""
        freqs = positions.float()[..., None] * self.inv_freq.float()
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, H, S, D) rotated by cos/sin (B, S, D), halves convention."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def additive_mask(allowed: Tensor, dtype: torch.dtype, repeat: int) -> Tensor:
    """bool (B, S, L) -> additive (B, 1, repeat * S, L), 0 where a query may attend a key, else
    MASK_VALUE; the rows repeat once per query head of a key/value group (see attend). Built
    once per pass, not per layer."""
    batch, length, keys = allowed.shape
    folded = allowed[:, None, None].expand(batch, 1, repeat, length, keys)
    value = max(MASK_VALUE, torch.finfo(dtype).min)
    return torch.where(folded.reshape(batch, 1, repeat * length, keys), 0.0, value).to(dtype)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
    """Grouped-query attention. q (B, H, S, D), k/v (B, G, L, D), mask from additive_mask with
    repeat = H / G -> (B, S, H * D). The query heads of a group are folded into the query axis,
    so keys and values are never repeated."""
    batch, heads, length, dim = q.shape
    groups = k.shape[1]
    q = q.reshape(batch, groups, (heads // groups) * length, dim)
    # Written out as LeRobot's eager attention computes it (scores in the inputs' type, the
    # softmax in float32), not through scaled_dot_product_attention: with one key/value head
    # and 51 queries a denoising step's attention is a few small matrix products, where the
    # fused kernels ran one thread block per 32 query rows (13 of the H100's 132 processors)
    # and took 54-107 us a call, 180 calls a step.
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    probs = torch.softmax(scores.float() + mask.float(), dim=-1).to(v.dtype)
    out = torch.matmul(probs, v)
    out = out.reshape(batch, heads, length, dim).transpose(1, 2)
    return out.reshape(batch, length, heads * dim)


class GemmaAttention(nn.Module):
    """The q/k/v/o projections of one layer (no biases); attention itself is joint, see
    policies.pi0.joint_attention."""

    def __init__(self, widths: GemmaWidths) -> None:
        super().__init__()
        self.num_heads = widths.num_heads
        self.num_kv_heads = widths.num_kv_heads
        self.head_dim = widths.head_dim
        self.scaling = widths.head_dim**-0.5
        inner, kv_inner = widths.num_heads * widths.head_dim, widths.num_kv_heads * widths.head_dim
        self.q_proj = nn.Linear(widths.width, inner, bias=False)
        self.k_proj = nn.Linear(widths.width, kv_inner, bias=False)
        self.v_proj = nn.Linear(widths.width, kv_inner, bias=False)
        self.o_proj = nn.Linear(inner, widths.width, bias=False)
        self.fused_qkv: nn.Linear | None = None  # set by fuse_projections, for compiled tiers

    def fuse_projections(self) -> None:
        """q, k and v as one matrix product from now on (policies.pi0.fused_projections)."""
        self.fused_qkv = fuse_linears([self.q_proj, self.k_proj, self.v_proj])

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, S, W) -> q (B, H, S, D), k and v (B, G, S, D), before rotary."""
        batch, length = x.shape[:2]
        if self.fused_qkv is None:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:
            sizes = split_sizes([self.q_proj, self.k_proj, self.v_proj])
            q, k, v = self.fused_qkv(x).split(sizes, dim=-1)
        q = q.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v


class GemmaMLP(nn.Module):
    """down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, widths: GemmaWidths) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(widths.width, widths.mlp_dim, bias=False)
        self.up_proj = nn.Linear(widths.width, widths.mlp_dim, bias=False)
        self.down_proj = nn.Linear(widths.mlp_dim, widths.width, bias=False)
        self.fused_gate_up: nn.Linear | None = None  # set by fuse_projections

    def fuse_projections(self) -> None:
        """gate and up as one matrix product from now on."""
        self.fused_gate_up = fuse_linears([self.gate_proj, self.up_proj])

    def forward(self, x: Tensor) -> Tensor:
        if self.fused_gate_up is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = self.fused_gate_up(x).chunk(2, dim=-1)
        return self.down_proj(F.gelu(gate, approximate="tanh") * up)


class GemmaDecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with (gated) residuals."""

    def __init__(self, widths: GemmaWidths, eps: float, cond_dim: int | None) -> None:
        super().__init__()
        self.self_attn = GemmaAttention(widths)
        self.mlp = GemmaMLP(widths)
        self.input_layernorm = GemmaRMSNorm(widths.width, eps, cond_dim)
        self.post_attention_layernorm = GemmaRMSNorm(widths.width, eps, cond_dim)

    def finish(
        self, hidden: Tensor, attended: Tensor, gate: Tensor | None, cond: Tensor | None
    ) -> Tensor:
        """The rest of the layer once attention has run: o_proj, residual, MLP block."""
        out = self.self_attn.o_proj(attended.to(self.self_attn.o_proj.weight.dtype))
        hidden = gated_residual(hidden, out, gate)
        normed, gate = self.post_attention_layernorm(hidden, cond)
        out = self.mlp(normed.to(self.mlp.up_proj.weight.dtype))
        return gated_residual(hidden, out, gate)


class GemmaStack(nn.Module):
    """A Gemma decoder (transformers' GemmaModel attribute names): layers, the final norm, the
    rotary embedding and, for the language model only, the token table (kept on the host)."""

    def __init__(
        self,
        widths: GemmaWidths,
        eps: float,
        theta: float,
        vocab_size: int | None,
        cond_dim: int | None = None,
    ) -> None:
        super().__init__()
        if vocab_size is not None:
            self.embed_tokens = HostTable(vocab_size, widths.width)
        self.layers = nn.ModuleList(
            GemmaDecoderLayer(widths, eps, cond_dim) for _ in range(widths.depth)
        )
        self.norm = GemmaRMSNorm(widths.width, eps, cond_dim)
        self.rotary_emb = RotaryEmbedding(widths.head_dim, theta)

    def decoder_layers(self) -> list[GemmaDecoderLayer]:
        """The layers, typed."""
        return cast(list[GemmaDecoderLayer], list(self.layers))

    @property
    def query_groups(self) -> int:
        """Query heads per key/value head (the `repeat` of additive_mask)."""
        attention = self.decoder_layers()[0].self_attn
        return attention.num_heads // attention.num_kv_heads

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype hidden states enter the layers in (that of the projections)."""
        return self.decoder_layers()[0].self_attn.q_proj.weight.dtype
