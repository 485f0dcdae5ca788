"""How SmolVLA models are stored in Tempo's checkpoint format and read back: the smolvla
family's checkpoint part (`CHECKPOINT`, see policies.registry), and the family of LeRobot
`"type": "smolvla"` directories (policies.smolvla.lerobot).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from torch import nn

from policies.base import PolicySpec
from policies.checkpoints.execution import describe as describe_execution
from policies.registry import CheckpointFamily
from policies.smolvla.codec import smolvla_policy
from policies.smolvla.config import SmolVLAConfig
from policies.smolvla.lerobot import LEROBOT_TYPE, LeRobotSmolVLA, read_lerobot_smolvla
from policies.smolvla.model import SmolVLAPolicy
from policies.tensor_policy import TensorPolicy


def smolvla_spec_problems(spec: PolicySpec, config: SmolVLAConfig) -> list[str]:
    """Where the spec and the SmolVLA config disagree."""
    problems = []
    sizes = tuple((c.height, c.width) for c in spec.cameras)
    if sizes != config.camera_sizes:
        problems.append(
            f"the spec's camera sizes {sizes} differ from the model's {config.camera_sizes}"
        )
    pairs = [
        ("state_size", spec.state_size, config.state_size),
        ("state_history", spec.state_history, 1),
        ("chunk_size", spec.chunk_size, config.chunk_size),
        ("action size (joint_names)", spec.action_dim, config.action_size),
    ]
    return problems + [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]


def describe_smolvla(spec: PolicySpec, config: SmolVLAConfig) -> list[str]:
    """`tempo checkpoint inspect`'s lines about a SmolVLA policy."""
    vision, text, expert = config.vision, config.text, config.expert
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras)
    width, height = config.resize_imgs_with_padding
    self_layers = sum(config.self_attends(i) for i in range(expert.depth))
    prompt = spec.prompt
    return [
        f"cameras ({len(spec.cameras)}): {cameras}; resized with padding to {width}x{height}, "
        f"{config.image_tokens} tokens each",
        f"state: {config.state_size} entries ({config.state_norm}, padded to "
        f"{config.max_state_dim}), actions: {config.action_size} ({config.action_norm}, padded "
        f"to {config.max_action_dim})",
        f"vision: {vision.width} wide, {vision.depth} layers, patch {vision.patch_size}, pixel "
        f"shuffle x{config.scale_factor}",
        f"language model: {text.width} wide, {text.depth} layers, {text.num_heads} heads "
        f"({text.num_kv_heads} key/value), vocabulary {config.vocab_size}",
        f"action expert: {expert.width} wide ({config.expert_width_multiplier:g} x), "
        f"{expert.depth} layers: {self_layers} self-attention, {expert.depth - self_layers} "
        "cross-attention",
        f"flow matching: chunk {config.chunk_size}, {config.num_steps} Euler steps; prompt "
        f"{config.tokenizer_max_length} tokens, tokenizer "
        + (prompt.tokenizer if prompt is not None else "none (set policy.prompt.tokenizer)"),
        describe_execution(spec.execution),
    ]


def _to_policy(module: nn.Module, spec: PolicySpec) -> TensorPolicy:
    return smolvla_policy(cast(SmolVLAPolicy, module), spec)


def _read_lerobot(directory: Path, joint_names: Sequence[str] | None) -> LeRobotSmolVLA:
    return read_lerobot_smolvla(directory, joint_names=joint_names)


CHECKPOINT = CheckpointFamily(
    config_model=SmolVLAConfig,
    module_type=SmolVLAPolicy,
    spec_problems=smolvla_spec_problems,
    describe=describe_smolvla,
    to_policy=_to_policy,
    lerobot_type=LEROBOT_TYPE,
    read_lerobot=_read_lerobot,
)
