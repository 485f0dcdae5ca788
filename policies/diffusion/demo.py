"""Diffusion Policies with random weights: a tiny one shaped for the simulated arm (`tempo demo
--policy diffusion`, the tests) and the real sizes the benchmark times (PushT's and an
ALOHA-sized one).

The tiny one keeps every part of the real model (a ResNet-18 per camera with spatial softmax,
the FiLM U-Net, DDPM or DDIM, two observation steps) at reduced widths: a U-Net of widths 32
and 64 instead of 512, 1024 and 2048, 16 keypoints. Its statistics suit the arm as the other
demos' do: actions within ACTION_REACH of the home pose (min-max normalized, the sample
clipped to [-1, 1], as LeRobot's default), so whatever the weights the arm stays in its range.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch

from policies.base import CameraSpec, Execution, PolicySpec
from policies.demo_arm import ACTION_REACH, DEFAULT_JOINTS, HOME_POSE, IMAGENET_MEAN, IMAGENET_STD
from policies.diffusion.codec import diffusion_policy
from policies.diffusion.config import DiffusionConfig
from policies.diffusion.model import DiffusionPolicy
from policies.tensor_policy import TensorPolicy

TINY_WIDTHS: dict[str, Any] = {
    "down_dims": (32, 64),
    "n_groups": 8,
    "kernel_size": 5,
    "diffusion_step_embed_dim": 32,
    "spatial_softmax_num_keypoints": 16,
    "horizon": 16,
    "n_action_steps": 8,
}


def make_diffusion_policy(
    config: DiffusionConfig,
    cameras: Sequence[str],
    joint_names: Sequence[str] | None = None,
    seed: int = 0,
) -> TensorPolicy:
    """A Diffusion Policy of `config` with random weights (FP32, eval mode, CPU), chunks played
    as LeRobot plays them (n_action_steps, the newest chunk)."""
    joints = tuple(joint_names or (f"joint_{i}" for i in range(config.action_dim)))
    spec = PolicySpec(
        cameras=tuple(
            CameraSpec(name=name, height=config.image_height, width=config.image_width)
            for name in cameras
        ),
        state_size=config.state_size,
        joint_names=joints,
        chunk_size=config.chunk_size,
        state_history=config.state_history,
        frame_history=config.frame_history,
        execution=Execution(
            query_period=config.n_action_steps,
            ensemble="newest",
            source=f"the checkpoint's n_action_steps {config.n_action_steps}",
        ),
    )
    torch.manual_seed(seed)
    module = DiffusionPolicy(config).eval()
    return diffusion_policy(module, spec)


def make_demo_diffusion_policy(
    *,
    cameras: Sequence[tuple[str, int, int]] = (("front", 96, 128),),
    joint_names: Sequence[str] = DEFAULT_JOINTS,
    state_size: int = 6,
    scheduler: str = "DDPM",
    steps: int | None = None,
    seed: int = 0,
) -> TensorPolicy:
    """The tiny Diffusion Policy for the simulated arm (see the module doc); DDPM 100 steps by
    default, as LeRobot's; `scheduler="DDIM"` with `steps` for fewer."""
    shapes = {(height, width) for _, height, width in cameras}
    if len(shapes) != 1:
        raise ValueError(f"Diffusion Policy reads cameras of one shape, got {sorted(shapes)}")
    height, width = shapes.pop()
    config = DiffusionConfig(
        n_cameras=len(cameras),
        image_height=height,
        image_width=width,
        state_dim=state_size,
        action_dim=len(joint_names),
        n_obs_steps=2,
        noise_scheduler_type=scheduler,  # type: ignore[arg-type]
        num_inference_steps=steps,
        **TINY_WIDTHS,
    )
    policy = make_diffusion_policy(config, [name for name, _, _ in cameras], joint_names, seed)
    module = cast(DiffusionPolicy, policy.module)
    home_state = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(state_size)])
    home = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(len(joint_names))])
    with torch.no_grad():
        module.image_norm.mean.copy_(torch.tensor(IMAGENET_MEAN).expand(len(cameras), 3))
        module.image_norm.std.copy_(torch.tensor(IMAGENET_STD).expand(len(cameras), 3))
        module.state_norm.min.copy_(home_state - 1.0)
        module.state_norm.max.copy_(home_state + 1.0)
        module.action_norm.min.copy_(home - ACTION_REACH)
        module.action_norm.max.copy_(home + ACTION_REACH)
    return policy


def write_demo_checkpoint(directory: Path, **options: Any) -> Path:
    """The tiny Diffusion Policy as a Tempo checkpoint in `directory` (made if absent)."""
    from policies.checkpoints.tempo_format import save_checkpoint

    return save_checkpoint(directory, make_demo_diffusion_policy(**options))
