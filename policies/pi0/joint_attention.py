"""pi0's joint attention: in every layer each token stream (the prefix through the PaliGemma
language model's weights, the suffix through the action expert's) is normed and projected by its
own layer, and ONE attention runs over the concatenated queries, keys and values. With a cache,
the prefix's keys and values (after rotary) stand in front of the suffix's.

Masks are big_vision's block-causal ones: `blocks` is 1 where a token starts a new block; a token
sees every valid token of its own and of earlier blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from policies.pi0.gemma import GemmaDecoderLayer, apply_rotary, attend


def block_causal_mask(pad: Tensor, blocks: Tensor) -> Tensor:
    """pad (B, N) bool (False: padding), blocks (B, N) int -> allowed (B, N queries, N keys)."""
    cumulative = torch.cumsum(blocks, dim=1)
    allowed = cumulative[:, None, :] <= cumulative[:, :, None]
    return allowed & (pad[:, None, :] & pad[:, :, None])


def joint_layer(
    layers: Sequence[GemmaDecoderLayer],
    hiddens: Sequence[Tensor],
    conds: Sequence[Tensor | None],
    cos: Tensor,
    sin: Tensor,
    mask: Tensor,
    past: tuple[Tensor, Tensor] | None = None,
    outputs: bool = True,
) -> tuple[list[Tensor], Tensor, Tensor]:
    """One layer over several streams. cos/sin (B, S, D) cover the streams' tokens in order;
    mask is additive_mask's over S queries and P + S keys, P the cached length (0 without
    `past`). Returns the streams' outputs (empty when `outputs` is False: only the keys and
    values are wanted) and this call's keys and values (B, G, S, D), after rotary."""
    queries, keys, values, gates = [], [], [], []
    for layer, hidden, cond in zip(layers, hiddens, conds, strict=True):
        normed, gate = layer.input_layernorm(hidden, cond)
        q, k, v = layer.self_attn.project(normed)
        queries.append(q)
        keys.append(k)
        values.append(v)
        gates.append(gate)
    q = apply_rotary(torch.cat(queries, dim=2), cos, sin)
    k = apply_rotary(torch.cat(keys, dim=2), cos, sin)
    v = torch.cat(values, dim=2)
    if not outputs:
        return [], k, v
    all_k, all_v = (
        (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
    )
    attended = attend(q, all_k, all_v, mask, layers[0].self_attn.scaling)
    results, start = [], 0
    for layer, hidden, cond, gate in zip(layers, hiddens, conds, gates, strict=True):
        end = start + hidden.shape[1]
        results.append(layer.finish(hidden, attended[:, start:end], gate, cond))
        start = end
    return results, k, v
