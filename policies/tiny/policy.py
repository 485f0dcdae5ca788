"""A tiny conv + MLP policy with random weights: for runner tests, CPU demos and benchmarks.

It follows the module contract of `policies.tensor_policy` exactly as a learned policy does:
uint8 HWC frames in, the uint8 -> float conversion and every normalization inside `forward`,
constants as registered buffers, actions out in robot units. It is small so that compiling it
on a CPU takes seconds, not minutes; it is not a model of anything.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from policies.base import CameraSpec, PolicySpec
from policies.tensor_policy import TensorPolicy


class TinyVisuomotor(nn.Module):
    pixel_mean: torch.Tensor
    pixel_std: torch.Tensor
    state_mean: torch.Tensor
    state_std: torch.Tensor
    action_mean: torch.Tensor
    action_std: torch.Tensor

    def __init__(self, spec: PolicySpec, width: int = 32) -> None:
        super().__init__()
        self.n_cameras = len(spec.cameras)
        self.chunk_size = spec.chunk_size
        self.action_dim = spec.action_dim
        # Normalization constants: buffers, so they move with the module and are captured.
        self.register_buffer("pixel_mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("pixel_std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.register_buffer("state_mean", torch.linspace(-0.5, 0.5, spec.state_size))
        self.register_buffer("state_std", torch.linspace(0.5, 1.5, spec.state_size))
        self.register_buffer("action_mean", torch.linspace(-1.0, 1.0, spec.action_dim))
        self.register_buffer("action_std", torch.linspace(0.2, 2.0, spec.action_dim))
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width // 2, 5, stride=4, padding=2),
            nn.BatchNorm2d(width // 2),
            nn.ReLU(),
            nn.Conv2d(width // 2, width, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        features = self.n_cameras * width + spec.state_history * spec.state_size
        self.head = nn.Sequential(
            nn.Linear(features, 4 * width),
            nn.GELU(),
            nn.LayerNorm(4 * width),
            nn.Linear(4 * width, spec.chunk_size * spec.action_dim),
        )

    def forward(self, images: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        batch = images.shape[0]
        # (B, N, H, W, 3) uint8 -> (B*N, 3, H, W) float in [0, 1]; a view, channels_last strided.
        frames = images.flatten(0, 1).permute(0, 3, 1, 2).float() / 255.0
        frames = (frames - self.pixel_mean) / self.pixel_std
        visual = self.backbone(frames).reshape(batch, -1)
        proprio = ((state - self.state_mean) / self.state_std).reshape(batch, -1)
        out = self.head(torch.cat([visual, proprio], dim=1))
        out = out.view(batch, self.chunk_size, self.action_dim)
        return out * self.action_std + self.action_mean


def tiny_spec(
    cameras: int = 2,
    height: int = 48,
    width: int = 64,
    state_size: int = 6,
    joints: int = 6,
    chunk_size: int = 10,
    state_history: int = 1,
) -> PolicySpec:
    return PolicySpec(
        cameras=tuple(
            CameraSpec(name=f"cam{i}", height=height, width=width) for i in range(cameras)
        ),
        state_size=state_size,
        joint_names=tuple(f"joint_{i}" for i in range(joints)),
        chunk_size=chunk_size,
        state_history=state_history,
    )


def build_tiny_policy(
    spec: PolicySpec | None = None, seed: int = 0, width: int = 32
) -> TensorPolicy:
    """A TinyVisuomotor with seeded random weights, in eval mode, on the CPU."""
    spec = spec or tiny_spec()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = TinyVisuomotor(spec, width=width)
        # Non-trivial running statistics, so BatchNorm does real work in eval mode.
        norm = cast(nn.BatchNorm2d, module.backbone[1])
        cast(torch.Tensor, norm.running_mean).uniform_(-0.1, 0.1)
        cast(torch.Tensor, norm.running_var).uniform_(0.5, 1.5)
    return TensorPolicy(spec=spec, module=module.eval())
