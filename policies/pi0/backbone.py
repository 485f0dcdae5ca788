"""PaliGemma with an action expert: the module tree LeRobot's `PaliGemmaWithExpertModel` has
(so the keys match) and the three ways pi0 runs it:

    encode_prefix   images + prompt through the language model once: every layer's keys and
                    values (PrefixCache)
    run_suffix      the expert over the suffix tokens, attending to the cached prefix (one
                    Euler step)
    run_joint       both streams together without a cache (LeRobot's training forward), to
                    check the cache against

Hidden states enter each stack in its projections' dtype, as LeRobot's PiGemma casts them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.pi0.config import PaliGemmaFlowConfig
from policies.pi0.gemma import GemmaStack, HostTable, additive_mask
from policies.pi0.joint_attention import block_causal_mask, joint_layer
from policies.pi0.siglip import MultiModalProjector, SiglipVisionTower

KEY_ALIGNMENT = 8


class SuffixAttention(NamedTuple):
    """What every expert layer of every denoising step shares: the suffix's rotary cos/sin
    (B, S, head_dim) and the additive mask over the cached prefix's keys and its own."""

    cos: Tensor
    sin: Tensor
    mask: Tensor


class PrefixCache(NamedTuple):
    """The prefix's keys and values, (depth, B, kv heads, P, head_dim) each, after rotary, and
    its padding mask (B, P) (False: a padded prompt token, an empty camera, or one of the spare
    slots that make P + the suffix's length a multiple of KEY_ALIGNMENT). `suffix`: the
    suffix's SuffixAttention, made once per observation (PaliGemmaFlowNetwork.encode_prefix)
    instead of at each of the ten steps; None: run_suffix makes it."""

    keys: Tensor
    values: Tensor
    pad: Tensor
    suffix: SuffixAttention | None = None


class PaliGemmaModel(nn.Module):
    """transformers' PaliGemmaModel: vision tower, projector, language model."""

    def __init__(self, config: PaliGemmaFlowConfig) -> None:
        super().__init__()
        self.vision_tower = SiglipVisionTower(config.vision, config.layer_norm_eps)
        self.multi_modal_projector = MultiModalProjector(config.vision.width, config.language.width)
        self.language_model = GemmaStack(
            config.language, config.rms_norm_eps, config.rope_theta, config.vocab_size
        )


class PaliGemma(nn.Module):
    """PaliGemmaForConditionalGeneration: the model and its (unused) LM head."""

    def __init__(self, config: PaliGemmaFlowConfig) -> None:
        super().__init__()
        self.model = PaliGemmaModel(config)
        self.lm_head = HostTable(config.vocab_size, config.language.width)


class GemmaExpert(nn.Module):
    """GemmaForCausalLM as LeRobot keeps it: no token table, an (unused) LM head."""

    def __init__(self, config: PaliGemmaFlowConfig) -> None:
        super().__init__()
        cond_dim = config.expert.width if config.adarms else None
        self.model = GemmaStack(
            config.expert, config.rms_norm_eps, config.rope_theta, None, cond_dim
        )
        self.lm_head = HostTable(config.vocab_size, config.expert.width)


class PaliGemmaWithExpert(nn.Module):
    """The two towers and the passes over them."""

    def __init__(self, config: PaliGemmaFlowConfig) -> None:
        super().__init__()
        self.paligemma = PaliGemma(config)
        self.gemma_expert = GemmaExpert(config)
        self.suffix_length = config.suffix_length
        # What runs one layer; Pi0Step.compile_regions puts a compiled one here (one compile for
        # every layer of both towers, instead of one per layer call).
        self.layer_call = joint_layer

    def embed_images(self, images: Tensor) -> Tensor:
        """(N, 3, H, W) in [-1, 1] -> (N, patches, language width) in the images' dtype."""
        model = self.paligemma.model
        features = model.multi_modal_projector(model.vision_tower(images))
        return features.to(images.dtype)

    def encode_prefix(self, embeddings: Tensor, pad: Tensor) -> PrefixCache:
        """The prefix (B, P, W) through the language model, bidirectional among valid tokens;
        the last layer computes only its keys and values."""
        language = self.paligemma.model.language_model
        hidden = embeddings.to(language.compute_dtype)
        positions = torch.cumsum(pad, dim=1) - 1
        cos, sin = language.rotary_emb(positions, hidden.dtype)
        allowed = block_causal_mask(pad, torch.zeros_like(positions))
        mask = additive_mask(allowed, hidden.dtype, language.query_groups)
        keys, values = [], []
        depth = len(language.layers)
        for index, layer in enumerate(language.decoder_layers()):
            outputs, k, v = self.layer_call(
                [layer], [hidden], [None], cos, sin, mask, outputs=index < depth - 1
            )
            keys.append(k)
            values.append(v)
            if outputs:
                hidden = outputs[0]
        # Masked key slots after the prefix, so that an expert step's keys (cache + suffix) are a
        # multiple of 8 long: cuBLAS then takes its tensor-core kernels for the attention
        # matmuls, where 867 keys got 9 us unaligned (align1) ones, 360 calls a step.
        spare = -(pad.shape[1] + self.suffix_length) % KEY_ALIGNMENT
        stacked_keys, stacked_values = torch.stack(keys), torch.stack(values)
        if spare:
            stacked_keys = F.pad(stacked_keys, (0, 0, 0, spare))
            stacked_values = F.pad(stacked_values, (0, 0, 0, spare))
            pad = F.pad(pad, (0, spare), value=False)
        return PrefixCache(stacked_keys, stacked_values, pad)

    def run_suffix(
        self, cache: PrefixCache, suffix: Tensor, blocks: Tensor, cond: Tensor | None
    ) -> Tensor:
        """The expert over suffix (B, S, W), every token valid, `blocks` (S,) its block starts;
        returns the final-normed hidden states (B, S, W)."""
        expert = self.gemma_expert.model
        hidden = suffix.to(expert.compute_dtype)
        cos, sin, mask = cache.suffix or self.suffix_attention(cache.pad, blocks)
        for index, layer in enumerate(expert.decoder_layers()):
            past = (cache.keys[index], cache.values[index])
            outputs, _, _ = self.layer_call([layer], [hidden], [cond], cos, sin, mask, past=past)
            hidden = outputs[0]
        return expert.norm(hidden, cond)[0]

    def suffix_attention(self, pad: Tensor, blocks: Tensor) -> SuffixAttention:
        """The suffix's rotary and mask against a prefix of padding `pad` (B, P): the suffix's
        tokens follow the prefix's valid ones; `blocks` (S,) its block starts."""
        expert = self.gemma_expert.model
        dtype = expert.compute_dtype
        batch, length = pad.shape[0], blocks.shape[0]
        positions = pad.sum(dim=1, keepdim=True) + torch.arange(length, device=pad.device)[None]
        cos, sin = expert.rotary_emb(positions, dtype)
        own = block_causal_mask(
            torch.ones(batch, length, dtype=torch.bool, device=pad.device),
            blocks[None].expand(batch, length),
        )
        prefix_part = pad[:, None, :].expand(batch, length, pad.shape[1])
        allowed = torch.cat([prefix_part, own], dim=2)
        return SuffixAttention(cos, sin, additive_mask(allowed, dtype, expert.query_groups))

    def run_joint(
        self,
        prefix: Tensor,
        prefix_pad: Tensor,
        suffix: Tensor,
        blocks: Tensor,
        cond: Tensor | None,
    ) -> Tensor:
        """Prefix and suffix through both towers in one pass (no cache); returns the suffix's
        final-normed hidden states, as run_suffix does."""
        language, expert = self.paligemma.model.language_model, self.gemma_expert.model
        batch, length = suffix.shape[:2]
        hiddens = [prefix.to(language.compute_dtype), suffix.to(expert.compute_dtype)]
        suffix_pad = torch.ones(batch, length, dtype=torch.bool, device=suffix.device)
        pad = torch.cat([prefix_pad, suffix_pad], dim=1)
        all_blocks = torch.cat(
            [torch.zeros_like(prefix_pad, dtype=blocks.dtype), blocks[None].expand(batch, length)],
            dim=1,
        )
        positions = torch.cumsum(pad, dim=1) - 1
        cos, sin = language.rotary_emb(positions, hiddens[0].dtype)
        allowed = block_causal_mask(pad, all_blocks)
        mask = additive_mask(allowed, hiddens[0].dtype, language.query_groups)
        for lang_layer, expert_layer in zip(
            language.decoder_layers(), expert.decoder_layers(), strict=True
        ):
            hiddens, _, _ = self.layer_call(
                [lang_layer, expert_layer], hiddens, [None, cond], cos, sin, mask
            )
        return expert.norm(hiddens[1], cond)[0]
