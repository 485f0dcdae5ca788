"""Which linear layers of ACT are quantized, and the one change ACT needs first.

ACT's attention keeps q, k and v in one packed `in_proj_weight` (nn.MultiheadAttention's
layout), applied with F.linear. Their inputs differ (q and k read x + pos, v reads x), so each
gets its own DuQuant transform: `split_attention` replaces every `Attention` of the encoder and
decoder by `SplitAttention`, with three nn.Linear made of the packed weight's thirds (same
numbers, same math). After that every layer to quantize is an nn.Linear, found by name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.act.transformer import Attention
from policies.quant.config import QuantSettings
from policies.quant.target import QuantTarget


class SplitAttention(nn.Module):
    """ACT's multi-head attention with q, k and v as three separate linear layers."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q_proj: nn.Module = nn.Linear(dim, dim)
        self.k_proj: nn.Module = nn.Linear(dim, dim)
        self.v_proj: nn.Module = nn.Linear(dim, dim)
        self.out_proj: nn.Module = nn.Linear(dim, dim)

    @classmethod
    def from_attention(cls, attention: Attention) -> SplitAttention:
        dim = attention.out_proj.in_features
        split = cls(dim, attention.n_heads)
        weights = attention.in_proj_weight.detach().chunk(3)
        biases = attention.in_proj_bias.detach().chunk(3)
        with torch.no_grad():
            projections = (split.q_proj, split.k_proj, split.v_proj)
            for linear, w, b in zip(projections, weights, biases, strict=True):
                linear.weight.copy_(w)  # type: ignore[operator]
                linear.bias.copy_(b)  # type: ignore[operator]
            split.out_proj.load_state_dict(attention.out_proj.state_dict())
        return split.to(attention.in_proj_weight.device)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        q = self._split_heads(self.q_proj(query))
        k = self._split_heads(self.k_proj(key))
        v = self._split_heads(self.v_proj(value))
        out = F.scaled_dot_product_attention(q, k, v)
        batch, _, tokens, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(batch, tokens, -1))

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        return x.view(batch, tokens, self.n_heads, dim // self.n_heads).transpose(1, 2)


def split_attention(module: nn.Module) -> nn.Module:
    """Replace, in place, every Attention under `encoder` and `decoder` by a SplitAttention."""
    return _replace_attention(module, SplitAttention.from_attention)


def split_shell(module: nn.Module) -> nn.Module:
    """The same replacement with empty layers, for loading a quantized checkpoint."""
    return _replace_attention(
        module, lambda child: SplitAttention(child.out_proj.in_features, child.n_heads)
    )


def _replace_attention(module: nn.Module, make: Callable[[Attention], SplitAttention]) -> nn.Module:
    for prefix in ("encoder", "decoder"):
        root = getattr(module, prefix, None)
        if root is None:
            continue
        for name, child in list(root.named_modules()):
            if isinstance(child, Attention):
                set_submodule(root, name, make(child))
    return module


def target_layers(module: nn.Module, settings: QuantSettings) -> list[str]:
    """Names of the nn.Linear layers `settings.layers` selects (after `split_attention`); ACT
    has no vision transformer (its backbone is convolutional), so `settings.vision` is refused."""
    if settings.vision:
        raise ValueError(
            "ACT's vision backbone is convolutional: it has no linear layers to quantize"
        )
    selection = settings.layers
    names = [
        name
        for name, child in module.named_modules()
        if isinstance(child, nn.Linear) and name.split(".")[0] in ("encoder", "decoder")
    ]
    if selection == "transformer+head" and isinstance(
        getattr(module, "action_head", None), nn.Linear
    ):
        names.append("action_head")
    if not names:
        raise ValueError("the module has no encoder or decoder linear layers to quantize")
    return names


def set_submodule(root: nn.Module, name: str, value: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, child, value)


def empty_act(config: ACTConfig) -> nn.Module:
    """The ACT of `config` with its attention split, ready for a quantized checkpoint's tensors."""
    with torch.no_grad():
        return split_shell(ACT(config))


ACT_TARGET = QuantTarget(
    title="ACT",
    policy_type="act",
    prepare=split_attention,
    empty_module=empty_act,
    layers=target_layers,
)
