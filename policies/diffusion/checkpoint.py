"""How Diffusion Policy models are stored in Tempo's checkpoint format and read back: the
diffusion family's checkpoint part (`CHECKPOINT`, see policies.registry), and the family of
LeRobot `"type": "diffusion"` directories (policies.diffusion.lerobot).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from torch import nn

from policies.act.backbone import feature_map_size
from policies.base import PolicySpec
from policies.checkpoints.execution import describe as describe_execution
from policies.checkpoints.tempo_format import interface_problems
from policies.diffusion.codec import diffusion_policy
from policies.diffusion.config import DiffusionConfig
from policies.diffusion.lerobot import LEROBOT_TYPE, LeRobotDiffusion, read_lerobot_diffusion
from policies.diffusion.model import DiffusionPolicy
from policies.registry import CheckpointFamily
from policies.tensor_policy import TensorPolicy


def diffusion_spec_problems(spec: PolicySpec, config: DiffusionConfig) -> list[str]:
    """Where the spec and the Diffusion Policy config disagree (a spec written before it named
    its frame history says 1: `upgrade_diffusion_spec` sets it)."""
    problems = interface_problems(spec, config, config.frame_sizes)
    if spec.frame_history not in (1, config.frame_history):
        problems.append(
            f"frame_history {spec.frame_history} in spec, {config.frame_history} in model"
        )
    return problems


def upgrade_diffusion_spec(spec: PolicySpec, config: DiffusionConfig, where: str) -> PolicySpec:
    """The spec with the frame history the model reads (n_obs_steps with cameras)."""
    if spec.frame_history == config.frame_history:
        return spec
    return spec.model_copy(update={"frame_history": config.frame_history})


def describe_diffusion(spec: PolicySpec, config: DiffusionConfig) -> list[str]:
    """Lines describing a Diffusion Policy's interface, architecture and sampler."""
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras) or "none"
    lines = [f"cameras ({len(spec.cameras)}): {cameras}"]
    if config.n_cameras:
        height, width = config.backbone_input
        rows, cols = feature_map_size(height, width)
        seen = []
        if config.resize_shape is not None:
            seen.append(f"resized to {config.resize_shape[0]}x{config.resize_shape[1]}")
        if config.crop_shape is not None:
            seen.append(f"center crop {height}x{width}")
        encoders = "one each" if config.use_separate_rgb_encoder_per_camera else "shared"
        lines.append(
            f"vision: {config.vision_backbone} ({'group' if config.use_group_norm else 'batch'} "
            f"norm), {encoders}, frames {', '.join(seen) or 'at their own size'}, feature map "
            f"{rows}x{cols}, {config.spatial_softmax_num_keypoints} spatial-softmax keypoints"
        )
    lines += [
        f"state: {spec.state_size} entries (robot {config.state_dim}, environment "
        f"{config.env_state_dim}) x {config.n_obs_steps} observation step(s)",
        f"joints ({spec.action_dim}): {', '.join(spec.joint_names)}",
        *(
            [
                f"observation history: the frames of the last {config.n_obs_steps} "
                "observations, kept by the robot's session (every one it sends)"
            ]
            if config.frame_history > 1
            else []
        ),
        f"horizon {config.horizon}, chunk {spec.chunk_size} (from the current step on), "
        f"LeRobot plays {config.n_action_steps}",
        f"U-Net: widths {', '.join(map(str, config.down_dims))}, kernel {config.kernel_size}, "
        f"{config.n_groups} groups, step embedding {config.diffusion_step_embed_dim}, FiLM "
        f"{'scale and bias' if config.use_film_scale_modulation else 'bias'}",
        f"sampler: {config.noise_scheduler_type} {config.steps} of {config.num_train_timesteps} "
        f"steps, {config.beta_schedule} betas, predicts {config.prediction_type}, "
        + (f"clipped to +-{config.clip_sample_range:g}" if config.clip_sample else "no clipping"),
        f"normalization: images {config.image_norm}, state {config.state_norm}, environment "
        f"{config.env_state_norm}, actions {config.action_norm}",
        describe_execution(spec.execution),
    ]
    return lines


def _to_policy(module: nn.Module, spec: PolicySpec) -> TensorPolicy:
    return diffusion_policy(cast(DiffusionPolicy, module), spec)


def _read_lerobot(directory: Path, joint_names: Sequence[str] | None) -> LeRobotDiffusion:
    return read_lerobot_diffusion(directory, joint_names=joint_names)


CHECKPOINT = CheckpointFamily(
    config_model=DiffusionConfig,
    module_type=DiffusionPolicy,
    spec_problems=diffusion_spec_problems,
    describe=describe_diffusion,
    to_policy=_to_policy,
    upgrade_spec=upgrade_diffusion_spec,
    lerobot_type=LEROBOT_TYPE,
    read_lerobot=_read_lerobot,
)
