"""The key space of LeRobot's PI0Pytorch / PI05Pytorch state_dict, loading tensors named in it,
and LeRobot's mixed precision.

Keys come from the transformers modules LeRobot instantiates: PaliGemmaForConditionalGeneration
(`paligemma.model.{vision_tower,multi_modal_projector,language_model}` and `paligemma.lm_head`)
and GemmaForCausalLM for the expert, whose `model.embed_tokens` LeRobot sets to None (so it has
no key) while its `lm_head` stays. LeRobot re-creates `paligemma.model` after the tying, so the
token table and the PaliGemma LM head are two keys. Neither LM head is used to serve.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from policies.pi0.config import GemmaWidths, PaliGemmaFlowConfig, Precision, SiglipWidths

TOWER = "paligemma_with_expert."
EMBED_TOKENS_KEY = TOWER + "paligemma.model.language_model.embed_tokens.weight"
# Vocabulary-sized matrices: kept on the host as given (policies.pi0.gemma.HostTable).
HOST_TABLE_KEYS = (
    EMBED_TOKENS_KEY,
    TOWER + "paligemma.lm_head.weight",
    TOWER + "gemma_expert.lm_head.weight",
)
# What LeRobot keeps in float32 when its dtype is bfloat16 (substrings of parameter names).
FLOAT32_UNDER_BFLOAT16 = (
    "vision_tower",
    "multi_modal_projector",
    "input_layernorm",
    "post_attention_layernorm",
    "model.norm",
)

Shapes = dict[str, tuple[int, ...]]


def _linear(shapes: Shapes, name: str, n_in: int, n_out: int, bias: bool = True) -> None:
    shapes[f"{name}.weight"] = (n_out, n_in)
    if bias:
        shapes[f"{name}.bias"] = (n_out,)


def _siglip(shapes: Shapes, prefix: str, w: SiglipWidths) -> None:
    shapes[prefix + "embeddings.patch_embedding.weight"] = (w.width, 3, w.patch_size, w.patch_size)
    shapes[prefix + "embeddings.patch_embedding.bias"] = (w.width,)
    shapes[prefix + "embeddings.position_embedding.weight"] = (w.num_patches, w.width)
    for i in range(w.depth):
        layer = f"{prefix}encoder.layers.{i}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            _linear(shapes, layer + "self_attn." + proj, w.width, w.width)
        for norm in ("layer_norm1", "layer_norm2"):
            shapes[f"{layer}{norm}.weight"] = (w.width,)
            shapes[f"{layer}{norm}.bias"] = (w.width,)
        _linear(shapes, layer + "mlp.fc1", w.width, w.mlp_dim)
        _linear(shapes, layer + "mlp.fc2", w.mlp_dim, w.width)
    shapes[prefix + "post_layernorm.weight"] = (w.width,)
    shapes[prefix + "post_layernorm.bias"] = (w.width,)


def _norm(shapes: Shapes, name: str, width: int, adaptive: bool) -> None:
    if adaptive:
        _linear(shapes, name + ".dense", width, 3 * width)
    else:
        shapes[name + ".weight"] = (width,)


def _gemma(shapes: Shapes, prefix: str, w: GemmaWidths, adaptive: bool) -> None:
    for i in range(w.depth):
        layer = f"{prefix}layers.{i}."
        _linear(shapes, layer + "self_attn.q_proj", w.width, w.num_heads * w.head_dim, False)
        _linear(shapes, layer + "self_attn.k_proj", w.width, w.num_kv_heads * w.head_dim, False)
        _linear(shapes, layer + "self_attn.v_proj", w.width, w.num_kv_heads * w.head_dim, False)
        _linear(shapes, layer + "self_attn.o_proj", w.num_heads * w.head_dim, w.width, False)
        _linear(shapes, layer + "mlp.gate_proj", w.width, w.mlp_dim, False)
        _linear(shapes, layer + "mlp.up_proj", w.width, w.mlp_dim, False)
        _linear(shapes, layer + "mlp.down_proj", w.mlp_dim, w.width, False)
        _norm(shapes, layer + "input_layernorm", w.width, adaptive)
        _norm(shapes, layer + "post_attention_layernorm", w.width, adaptive)
    _norm(shapes, prefix + "norm", w.width, adaptive)


def expected_shapes(config: PaliGemmaFlowConfig) -> Shapes:
    """Every key of LeRobot's PI0Pytorch (or PI05Pytorch, per the config's class) state_dict
    and its shape, written out from the module tree LeRobot builds."""
    shapes: Shapes = {}
    lang, expert, vocab = config.language, config.expert, config.vocab_size
    paligemma = TOWER + "paligemma.model."
    _siglip(shapes, paligemma + "vision_tower.vision_model.", config.vision)
    _linear(shapes, paligemma + "multi_modal_projector.linear", config.vision.width, lang.width)
    shapes[EMBED_TOKENS_KEY] = (vocab, lang.width)
    _gemma(shapes, paligemma + "language_model.", lang, adaptive=False)
    shapes[TOWER + "paligemma.lm_head.weight"] = (vocab, lang.width)
    _gemma(shapes, TOWER + "gemma_expert.model.", expert, adaptive=config.adarms)
    shapes[TOWER + "gemma_expert.lm_head.weight"] = (vocab, expert.width)
    width = expert.width
    _linear(shapes, "action_in_proj", config.max_action_dim, width)
    _linear(shapes, "action_out_proj", width, config.max_action_dim)
    if config.state_token:
        _linear(shapes, "state_proj", config.max_state_dim, width)
        _linear(shapes, "action_time_mlp_in", 2 * width, width)
        _linear(shapes, "action_time_mlp_out", width, width)
    else:
        _linear(shapes, "time_mlp_in", width, width)
        _linear(shapes, "time_mlp_out", width, width)
    return shapes


def expected_keys(config: PaliGemmaFlowConfig) -> list[str]:
    """The state_dict keys of LeRobot's PI0Pytorch / PI05Pytorch for this config."""
    return list(expected_shapes(config))


def _names(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def load_weights(network: nn.Module, tensors: Mapping[str, Tensor]) -> None:
    """Check `tensors` against the network's state_dict (keys and shapes, all at once) and load
    them. ValueError (one sentence) naming what does not fit; nothing is loaded then."""
    targets = network.state_dict()
    missing = sorted(set(targets) - set(tensors))
    unexpected = sorted(set(tensors) - set(targets))
    misshapen = sorted(
        f"{key} {tuple(tensors[key].shape)} instead of {tuple(targets[key].shape)}"
        for key in set(targets) & set(tensors)
        if tuple(tensors[key].shape) != tuple(targets[key].shape)
    )
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing ({_names(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected ({_names(unexpected)})")
    if misshapen:
        problems.append(f"{len(misshapen)} of the wrong shape ({_names(misshapen)})")
    if problems:
        raise ValueError(
            f"the weights do not fit this {type(network).__name__}: keys " + "; ".join(problems)
        )
    with torch.no_grad():
        for key, tensor in tensors.items():
            if key in HOST_TABLE_KEYS:
                holder = network.get_submodule(key.rsplit(".", 1)[0])
                # The checkpoint's tensors are mapped from its file. The token table, read for
                # every new prompt while serving, is copied into memory the process owns: with
                # a file overwritten in place, the next prompt read the mapped table and died of
                # SIGBUS. The LM heads, never read while serving, stay mapped (no 1.6 GB copy at
                # the real size).
                table = tensor.detach().to("cpu", copy=key == EMBED_TOKENS_KEY)
                holder.weight = nn.Parameter(table, requires_grad=False)
            else:
                targets[key].copy_(tensor)


def apply_precision(network: nn.Module, precision: Precision) -> None:
    """LeRobot's precision: `float32` everything; `bfloat16` casts paligemma_with_expert (its
    rotary buffers included) to bfloat16 but keeps the vision tower, the projector and every
    norm in float32. The action/state/time projections stay as they are (float32 in LeRobot);
    the vocabulary tables stay on the host as loaded."""
    tower = network.get_submodule("paligemma_with_expert")
    if precision == "float32":
        tower.to(torch.float32)
        return
    tower.to(torch.bfloat16)
    for name, param in tower.named_parameters():
        if any(part in name for part in FLOAT32_UNDER_BFLOAT16):
            param.data = param.data.to(torch.float32)
