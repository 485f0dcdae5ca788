"""A small ACT with random weights, for demos, CPU runs and tests, and ACT at LeRobot's ALOHA
defaults for benchmarks.

It is a real ACT (ResNet18 backbone, transformer encoder-decoder, normalization buffers) at a
width small enough to run on a laptop CPU, with statistics chosen for the simulated 6-joint arm
(policies.demo_arm): the action head is scaled so that every action stays within
`ACTION_REACH` of a home pose, which keeps all outputs inside about +-1.4 rad whatever the
inputs. It has learned nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from policies.act.config import ACTConfig, camera_fields
from policies.act.model import ACT
from policies.base import CameraSpec, PolicySpec
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo_arm import (
    ACTION_REACH,
    ACTION_STD,
    DEFAULT_JOINTS,
    HOME_POSE,
    IMAGENET_MEAN,
    IMAGENET_STD,
)
from policies.tensor_policy import TensorPolicy


def make_demo_policy(
    *,
    cameras: Sequence[tuple[str, int, int]] = (("front", 96, 128),),
    joint_names: Sequence[str] = DEFAULT_JOINTS,
    state_size: int = 6,
    chunk_size: int = 20,
    seed: int = 0,
    state_history: int = 1,
) -> TensorPolicy:
    """The demo ACT policy in memory (FP32, eval mode, CPU); `state_history` > 1 makes it read
    that many past joint states."""
    if not cameras:
        raise ValueError("the demo ACT needs at least one camera")
    n_joints = len(joint_names)
    config = ACTConfig(
        **camera_fields([(height, width) for _, height, width in cameras]),
        state_dim=state_size,
        action_dim=n_joints,
        chunk_size=chunk_size,
        state_history=state_history,
        vision_backbone="resnet18",
        dim_model=64,
        n_heads=4,
        dim_feedforward=256,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=16,
        use_vae=False,
    )
    spec = PolicySpec(
        cameras=tuple(CameraSpec(name=n, height=h, width=w) for n, h, w in cameras),
        state_size=config.state_size,
        joint_names=tuple(joint_names),
        chunk_size=chunk_size,
        state_history=state_history,
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        module = ACT(config)
        home = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(n_joints)])
        module.image_norm.mean.copy_(torch.tensor(IMAGENET_MEAN).expand(len(cameras), 3))
        module.image_norm.std.copy_(torch.tensor(IMAGENET_STD).expand(len(cameras), 3))
        state_home = torch.tensor([HOME_POSE[i % len(HOME_POSE)] for i in range(state_size)])
        module.state_norm.mean.copy_(state_home)
        module.state_norm.std.fill_(0.5)
        module.action_norm.mean.copy_(home)
        module.action_norm.std.fill_(ACTION_STD)
        # The decoder ends in a LayerNorm (unit weight, zero bias), so its outputs have norm
        # sqrt(dim_model); rows of this norm keep |normalized action| <= REACH / STD.
        head = module.action_head
        row_norm = ACTION_REACH / ACTION_STD / config.dim_model**0.5
        head.weight.mul_(row_norm / head.weight.norm(dim=1, keepdim=True))
        head.bias.zero_()
    return TensorPolicy(spec=spec, module=module.eval())


def make_demo_checkpoint(
    directory: str | Path,
    *,
    cameras: Sequence[tuple[str, int, int]] = (("front", 96, 128),),
    joint_names: Sequence[str] = DEFAULT_JOINTS,
    state_size: int = 6,
    chunk_size: int = 20,
    seed: int = 0,
) -> Path:
    """Write the demo ACT policy as a Tempo checkpoint into `directory`; returns it."""
    policy = make_demo_policy(
        cameras=cameras,
        joint_names=joint_names,
        state_size=state_size,
        chunk_size=chunk_size,
        seed=seed,
    )
    return save_checkpoint(directory, policy)


def make_aloha_policy(seed: int = 0) -> TensorPolicy:
    """LeRobot's default ACT for ALOHA with random weights: resnet18, 3 cameras 480x640,
    14 joints, chunk 100, dim_model 512, 8 heads, feedforward 3200, 4 encoder / 1 decoder layers
    (51.6 M parameters with the VAE encoder). For benchmarks and GPU checks; it has learned
    nothing."""
    config = ACTConfig(
        n_cameras=3,
        image_height=480,
        image_width=640,
        state_dim=14,
        action_dim=14,
        chunk_size=100,
        vision_backbone="resnet18",
        dim_model=512,
        n_heads=8,
        dim_feedforward=3200,
        n_encoder_layers=4,
        n_decoder_layers=1,
        latent_dim=32,
        use_vae=True,
    )
    spec = aloha_spec(chunk_size=100)
    torch.manual_seed(seed)
    return TensorPolicy(spec=spec, module=ACT(config).eval())


def aloha_spec(chunk_size: int) -> PolicySpec:
    """ALOHA's robot as LeRobot's datasets describe it: two 7-joint arms (14 joints and state
    entries) and three 480x640 cameras."""
    joints = tuple(f"{side}_{j}" for side in ("left", "right") for j in range(7))
    cameras = ("cam_high", "cam_left_wrist", "cam_right_wrist")
    return PolicySpec(
        cameras=tuple(CameraSpec(name=c, height=480, width=640) for c in cameras),
        state_size=14,
        joint_names=joints,
        chunk_size=chunk_size,
    )
