"""W4A8 pi0 and pi0.5: which layers are quantized, and their quantized checkpoints' reader.

    PI0_TARGET          policies.quant.target.QuantTarget of the Pi0Step (pi0.5's:
                        policies.pi0.quantized_pi05.PI05_TARGET; the same layers)
    VARIANT             quantized pi0 checkpoints (pi0.5's: policies.pi0.quantized_pi05)

The layers, by `QuantSettings`, match the public pi0 DuQuant port's default (its
`OPENPI_DUQUANT_INCLUDE` of q/k/v/o and gate/up/down, excluding the vision tower, the
multi-modal projector, norms and embeddings):

    layers="transformer"        the Gemma prefix (language model) and the action expert: every
                                self_attn.{q,k,v,o}_proj and mlp.{gate,up,down}_proj
    layers="transformer+head"   also the network's own projections (state, action in and out,
                                the time MLP)
    vision=True                 also SigLIP's encoder layers (self_attn q/k/v/out, mlp fc1/fc2)

Layer names are the Pi0Step's (`network.` then PI0Pytorch's names, as LeRobot and openpi have
them); the port's .npz packs are named after PI0Pytorch's, so `pack_root` is "network".
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from policies.meta_device import shapes_only
from policies.pi0.config import PaliGemmaFlowConfig, Pi0Config
from policies.pi0.gemma import HostTable
from policies.pi0.step import Pi0Step, Pi0StepConfig
from policies.quant.checkpoint import quantized_variant
from policies.quant.config import QuantSettings
from policies.quant.target import QuantTarget, identity

_PREFIX = ("network.paligemma_with_expert.paligemma.model.language_model.layers.",)
_EXPERT = ("network.paligemma_with_expert.gemma_expert.model.layers.",)
_VISION = ("network.paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.",)
_TOWERS = "network.paligemma_with_expert."
# The port's include pattern (pi0.5's adaRMS `dense` layers in the expert's norms stay FP32).
_PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
_PROJECTIONS |= {"out_proj", "fc1", "fc2"}  # SigLIP's, with vision=True


def pi0_layers(module: nn.Module, settings: QuantSettings) -> list[str]:
    """Names of the Pi0Step's nn.Linear layers `settings` selects (see the module doc)."""
    starts = _PREFIX + _EXPERT + (_VISION if settings.vision else ())
    names = []
    for name, child in module.named_modules():
        if not isinstance(child, nn.Linear):
            continue
        head = settings.layers == "transformer+head" and not name.startswith(_TOWERS)
        if (name.startswith(starts) and name.rsplit(".", 1)[-1] in _PROJECTIONS) or head:
            names.append(name)
    if not names:
        raise ValueError("the pi0 model has no prefix or expert linear layers to quantize")
    return names


def empty_step(config: Pi0StepConfig, network: type[PaliGemmaFlowConfig] = Pi0Config) -> nn.Module:
    """The step of `config` on the meta device: nothing allocated until `materialize`. The
    network config is read as `network`'s: config.json does not say which of pi0's and pi0.5's
    (their fields are the same), the checkpoint's policy_type does."""
    if type(config.network) is not network:
        config = config.model_copy(update={"network": network(**config.network.model_dump())})
    with shapes_only():
        return Pi0Step(config)


def materialize(module: nn.Module) -> nn.Module:
    """The step on the CPU, uninitialised, its computed buffers (rotary, blocks) set."""
    if not isinstance(module, Pi0Step):
        raise TypeError(f"a pi0 target materializes a Pi0Step, not {type(module).__name__}")
    module.to_empty(device="cpu")
    # The vocabulary tables ignore `.to()` (HostTable): given host memory here, one tensor for
    # a table that several layers share.
    made: dict[int, nn.Parameter] = {}
    for table in module.modules():
        if isinstance(table, HostTable) and table.weight.is_meta:
            key = id(table.weight)
            if key not in made:
                made[key] = nn.Parameter(torch.empty(table.weight.shape), requires_grad=False)
            table.weight = made[key]
    module.network.reset_buffers()
    return module


def pi0_target(policy_type: str, network: type[PaliGemmaFlowConfig]) -> QuantTarget:
    """The QuantTarget of the family whose network config is `network` (pi0's or pi0.5's)."""
    return QuantTarget(
        title="pi0",
        policy_type=policy_type,
        prepare=identity,
        empty_module=partial(empty_step, network=network),
        layers=pi0_layers,
        materialize=materialize,
        pack_root="network",
    )


PI0_TARGET = pi0_target("pi0", Pi0Config)
VARIANT = quantized_variant("pi0", PI0_TARGET)
