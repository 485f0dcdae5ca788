"""pi0's and pi0.5's checkpoint part (policies.registry.CheckpointFamily): LeRobot's `pi0` /
`pi05` directories and openpi's PyTorch checkpoints served as they are (policies.pi0.policy),
`tempo checkpoint inspect` from their files alone (policies.pi0.inspect), and the step in
Tempo's own format (its config: policies.pi0.step.Pi0StepConfig).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from policies.base import PolicySpec
from policies.pi0.inspect import describe_pi0_checkpoint
from policies.pi0.pi05_config import Pi05Config
from policies.pi0.policy import pi0_policy, read_pi0_policy
from policies.pi0.step import Pi0Step, Pi0StepConfig
from policies.registry import CheckpointFamily
from policies.tensor_policy import TensorPolicy


def step_spec_problems(spec: PolicySpec, config: Pi0StepConfig) -> list[str]:
    """Where the spec and the step's config disagree."""
    problems = []
    sizes = tuple((c.height, c.width) for c in spec.cameras)
    if sizes != config.camera_sizes:
        problems.append(
            f"the spec's camera sizes {sizes} differ from the model's {config.camera_sizes}"
        )
    if spec.state_size != config.state_size:
        problems.append(
            f"the spec's state_size {spec.state_size} is not the model's {config.state_size}"
        )
    if spec.action_dim != config.action_size:
        problems.append(
            f"the spec has {spec.action_dim} joints, the model {config.action_size} actions"
        )
    if spec.chunk_size != config.network.chunk_size:
        problems.append(
            f"the spec's chunk_size {spec.chunk_size} is not the model's "
            f"{config.network.chunk_size}"
        )
    return problems


def describe_step(spec: PolicySpec, config: Pi0StepConfig) -> list[str]:
    network = config.network
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras)
    return [
        f"cameras ({len(spec.cameras)}): {cameras}; {network.empty_cameras} empty slot(s)",
        f"state: {config.state_size} entries ({config.state_norm}), "
        f"actions: {config.action_size} ({config.action_norm})",
        f"prompt: {network.tokenizer_max_length} tokens; chunk {network.chunk_size}, "
        f"{network.n_action_steps} executed, {network.num_inference_steps} Euler steps",
        f"towers: vision {network.vision.width}x{network.vision.depth}, language "
        f"{network.language.width}x{network.language.depth}, expert "
        f"{network.expert.width}x{network.expert.depth}",
    ]


def step_policy(module: nn.Module, spec: PolicySpec) -> TensorPolicy:
    if not isinstance(module, Pi0Step):
        raise TypeError(f"a pi0 checkpoint builds a Pi0Step, not {type(module).__name__}")
    return pi0_policy(module, spec)


def _is_pi05(module: nn.Module) -> bool:
    return isinstance(module, Pi0Step) and isinstance(module.config.network, Pi05Config)


def describe_directory(path: Path) -> list[str]:
    return describe_pi0_checkpoint(path)


def checkpoint_family(lerobot_type: str, reads_openpi: bool) -> CheckpointFamily:
    return CheckpointFamily(
        config_model=Pi0StepConfig,
        module_type=Pi0Step,
        holds=lambda module: _is_pi05(module) == (lerobot_type == "pi05"),
        spec_problems=step_spec_problems,
        describe=describe_step,
        to_policy=step_policy,
        lerobot_type=lerobot_type,
        read_lerobot=read_pi0_policy,
        # openpi's converter writes one layout for both; its reader tells them apart.
        read_openpi=read_pi0_policy if reads_openpi else None,
        describe_directory=describe_directory,
    )


PI0_CHECKPOINT = checkpoint_family("pi0", reads_openpi=True)
PI05_CHECKPOINT = checkpoint_family("pi05", reads_openpi=False)
