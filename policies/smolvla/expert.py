"""SmolVLA's two stacks and the two passes over them:

    encode_prefix   images, prompt and state through the cut language model once: for every
                    layer, the keys and values the action expert's layer of that depth reads
                    (PrefixCache)
    run_expert      the action expert over the action tokens at one Euler step, against the
                    cache

The expert is as deep as the language model (LeRobot's num_expert_layers <= 0) and alternates:
layer i self-attends (to the prefix's keys and values of layer i, after rotary, and to its own,
causally) when i is a multiple of self_attn_every_n_layers, else it cross-attends to the prefix
alone, through its own key and value projections of the language model's keys and values.
Those projections depend on the observation only, so they are made once per observation here,
not at every Euler step as LeRobot does.

Positions (rotary) as LeRobot's: the prefix's valid tokens are numbered from 0; the action
tokens continue after them in the self-attention layers and start again at 0 in the
cross-attention ones. Masks: prompt padding is masked as a key; images and prompt attend to each
other but not to the state token; the state token attends to all of them; action tokens attend
to the prefix and causally to each other.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from policies.pi0.gemma import HostTable, additive_mask, attend
from policies.smolvla.config import SmolVLAConfig
from policies.smolvla.layers import DecoderLayer, DecoderStack, apply_rotary, rotary


class PrefixCache(NamedTuple):
    """What every Euler step of one observation shares. keys/values: (depth, B, G, P, D), what
    expert layer i attends to from the prefix (the language model's keys after rotary for a
    self-attention layer, their expert projection for a cross-attention one). cos/sin
    (B, S, D) of the action tokens in the self-attention layers and in the cross-attention
    ones; the additive masks of both (policies.pi0.gemma.additive_mask)."""

    keys: Tensor
    values: Tensor
    self_cos: Tensor
    self_sin: Tensor
    cross_cos: Tensor
    cross_sin: Tensor
    self_mask: Tensor
    cross_mask: Tensor


def prefix_blocks(pad: Tensor) -> Tensor:
    """Block starts of the prefix: every token in block 0 but the state token (the last)."""
    blocks = torch.zeros_like(pad, dtype=torch.int64)
    blocks[:, -1] = 1
    return blocks


def allowed_keys(pad: Tensor, blocks: Tensor) -> Tensor:
    """big_vision's block-causal rule: (B, N) -> (B, N queries, N keys), True where a query may
    attend a key (a valid key of its own block or an earlier one)."""
    cumulative = torch.cumsum(blocks, dim=1)
    allowed = cumulative[:, None, :] <= cumulative[:, :, None]
    return allowed & (pad[:, None, :] & pad[:, :, None])


class VlmWithExpert(nn.Module):
    """The language model (`text`) and the action expert (`expert`)."""

    def __init__(self, config: SmolVLAConfig) -> None:
        super().__init__()
        self.config = config
        text, expert = config.text, config.expert
        eps = config.rms_norm_eps
        self.text = DecoderStack(
            [DecoderLayer(text, eps) for _ in range(text.depth)], text.width, eps
        )
        # The token table: only the codec reads it (on the host, when a prompt changes).
        self.text.embed_tokens = HostTable(config.vocab_size, text.width)
        kv_width = text.num_kv_heads * text.head_dim
        self.expert = DecoderStack(
            [
                DecoderLayer(expert, eps, None if config.self_attends(i) else kv_width)
                for i in range(expert.depth)
            ],
            expert.width,
            eps,
        )
        self.scale = text.head_dim**-0.5
        self.groups = text.num_heads // text.num_kv_heads

    def _rotary(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        return rotary(positions, self.config.text.head_dim, self.config.rope_base)

    def encode_prefix(self, embeddings: Tensor, pad: Tensor) -> PrefixCache:
        """The prefix (B, P, W) once through the language model -> the expert's PrefixCache."""
        config = self.config
        hidden = embeddings
        positions = torch.cumsum(pad.long(), dim=1) - 1
        cos, sin = self._rotary(positions)
        mask = additive_mask(allowed_keys(pad, prefix_blocks(pad)), hidden.dtype, self.groups)
        keys, values = [], []
        layers = self.text.decoder_layers()
        for index, layer in enumerate(layers):
            normed = layer.input_layernorm(hidden)
            k, v = layer.self_attn.keys_values(normed)
            k = apply_rotary(k, cos, sin)
            keys.append(k)
            values.append(v)
            if index < len(layers) - 1:  # the last layer's output is never read
                q = apply_rotary(layer.self_attn.queries(normed), cos, sin)
                hidden = layer.finish(hidden, attend(q, k, v, mask, self.scale))
        expert_keys, expert_values = [], []
        for index, layer in enumerate(self.expert.decoder_layers()):
            k, v = keys[index], values[index]
            if not config.self_attends(index):
                flat_k, flat_v = (t.transpose(1, 2).flatten(2) for t in (k, v))
                k = layer.self_attn.split_heads(
                    layer.self_attn.k_proj(flat_k), layer.self_attn.num_kv_heads
                )
                v = layer.self_attn.split_heads(
                    layer.self_attn.v_proj(flat_v), layer.self_attn.num_kv_heads
                )
            expert_keys.append(k)
            expert_values.append(v)
        return self._with_suffix_attention(
            torch.stack(expert_keys), torch.stack(expert_values), pad
        )

    def _with_suffix_attention(self, keys: Tensor, values: Tensor, pad: Tensor) -> PrefixCache:
        batch, length = pad.shape[0], self.config.chunk_size
        steps = torch.arange(length, device=pad.device)[None].expand(batch, length)
        self_cos, self_sin = self._rotary(pad.long().sum(dim=1, keepdim=True) + steps)
        cross_cos, cross_sin = self._rotary(steps)
        prefix_part = pad[:, None, :].expand(batch, length, pad.shape[1])
        causal = torch.ones(length, length, dtype=torch.bool, device=pad.device).tril()
        own = causal[None].expand(batch, length, length)
        dtype = keys.dtype
        self_mask = additive_mask(torch.cat([prefix_part, own], dim=2), dtype, self.groups)
        cross_mask = additive_mask(prefix_part, dtype, self.groups)
        return PrefixCache(
            keys, values, self_cos, self_sin, cross_cos, cross_sin, self_mask, cross_mask
        )

    def run_expert(self, cache: PrefixCache, suffix: Tensor) -> Tensor:
        """The expert over the action tokens (B, S, expert width) -> final-normed (B, S, W)."""
        hidden = suffix
        for index, layer in enumerate(self.expert.decoder_layers()):
            normed = layer.input_layernorm(hidden)
            queries = layer.self_attn.queries(normed)
            if self.config.self_attends(index):
                q = apply_rotary(queries, cache.self_cos, cache.self_sin)
                k, v = layer.self_attn.keys_values(normed)
                k = torch.cat(
                    [cache.keys[index], apply_rotary(k, cache.self_cos, cache.self_sin)], 2
                )
                v = torch.cat([cache.values[index], v], 2)
                attended = attend(q, k, v, cache.self_mask, self.scale)
            else:
                q = apply_rotary(queries, cache.cross_cos, cache.cross_sin)
                attended = attend(
                    q, cache.keys[index], cache.values[index], cache.cross_mask, self.scale
                )
            hidden = layer.finish(hidden, attended)
        return self.expert.norm(hidden)
