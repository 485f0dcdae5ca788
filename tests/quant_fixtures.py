"""Small models for the quantization tests (CPU and GPU): an ACT without cameras, and the naive
layer that calibrates itself on its first forward."""

from __future__ import annotations

import torch
from torch import nn

from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.tensor_policy import TensorPolicy, example_inputs

JOINTS = tuple(f"joint_{i}" for i in range(6))


def small_act_policy(seed: int = 0) -> TensorPolicy:
    """ACT with no camera (robot state 6 + environment state 4), width 32: milliseconds a step."""
    config = ACTConfig(
        n_cameras=0,
        image_height=1,
        image_width=1,
        state_dim=6,
        env_state_dim=4,
        action_dim=6,
        chunk_size=8,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=8,
        use_vae=False,
    )
    spec = PolicySpec(cameras=(), state_size=10, joint_names=JOINTS, chunk_size=8)
    torch.manual_seed(seed)
    with torch.no_grad():
        module = ACT(config).eval()
    return TensorPolicy(spec=spec, module=module)


def calibration_runner(policy: TensorPolicy, count: int = 6):  # type: ignore[no-untyped-def]
    """run_calibration for quantize_module: `count` example observations through the module."""
    inputs = [example_inputs(policy.spec, seed=seed) for seed in range(count)]

    def run() -> None:
        with torch.no_grad():
            for images, state in inputs:
                policy.module(images, state)

    return run


class NaiveQuantLinear(nn.Module):
    """The pattern that breaks compile and capture: the activation scale is computed on the
    first forward and assigned to the module, inside whatever code is running."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.act_scale: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_scale is None:
            self.act_scale = x.abs().amax() / 127
        q = torch.clamp(torch.round(x / self.act_scale), -127, 127)
        return (q * self.act_scale) @ self.weight.t()
