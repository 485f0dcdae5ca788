"""The built-in `reach` policy: a scripted stand-in, not a learned model.

Each chunk moves every joint smoothly from the observed position toward a fixed target pose along
a first-order curve: action[i] = s + (target - s) * (1 - exp(-(i + 1) / tau)). It ignores the
camera frames. It exists so that the daemon, the wire and the loop can be exercised end to end
(demo, tests) without a trained model; it follows the same module contract as learned policies,
so it runs through the same runner.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from policies.base import CameraSpec, PolicySpec
from policies.tensor_policy import TensorPolicy


class ReachModule(nn.Module):
    # Buffers registered in __init__, declared so that type checkers see tensors.
    target: torch.Tensor
    progress: torch.Tensor

    def __init__(
        self, target: Sequence[float], chunk_size: int, time_constant_steps: float
    ) -> None:
        super().__init__()
        steps = torch.arange(1, chunk_size + 1, dtype=torch.float32)
        self.register_buffer("target", torch.tensor(list(target), dtype=torch.float32))
        self.register_buffer("progress", 1.0 - torch.exp(-steps / time_constant_steps))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        # Frames (one tensor per camera shape) are ignored; the state history comes last.
        current = inputs[-1][:, -1, :]  # newest state, (batch, joints)
        remaining = self.target.unsqueeze(0) - current
        return current.unsqueeze(1) + remaining.unsqueeze(1) * self.progress.view(1, -1, 1)


def build_reach_policy(
    joint_names: Sequence[str],
    cameras: Sequence[CameraSpec],
    chunk_size: int = 20,
    target: Sequence[float] | None = None,
    time_constant_steps: float = 25.0,
) -> TensorPolicy:
    """A reach policy for a robot whose state vector is its joint positions, in joint order."""
    if target is None:
        target = [0.5] * len(joint_names)
    if len(target) != len(joint_names):
        raise ValueError(
            f"reach target has {len(target)} values but the robot has {len(joint_names)} joints; "
            "give one value per joint"
        )
    spec = PolicySpec(
        cameras=tuple(cameras),
        state_size=len(joint_names),
        joint_names=tuple(joint_names),
        chunk_size=chunk_size,
    )
    return TensorPolicy(spec=spec, module=ReachModule(target, chunk_size, time_constant_steps))
