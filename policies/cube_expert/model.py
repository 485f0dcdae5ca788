"""The transfer-cube expert as a policy module: joint targets looked up in a table of
trajectories (policies.cube_expert.joint_table) by the episode's elapsed steps and the cube's
starting position, interpolated bilinearly between the grid's trajectories.

    forward(frames, state, episode, elapsed) -> (actions, episode)
        state:   (B, 1, state_size); the cube's x, y at [joint_state, joint_state + 2)
        episode: (B, 4) the robot's memory: the episode's first step (high, low 16 bits, exact in
                 float32) and the cube's x, y then; the codec fills it at an episode's start
        elapsed: (B, 1) control steps since the episode's first observation
        actions: (B, chunk_size, action_dim), rows for elapsed, elapsed + 1, ... (the last
                 row of the table past its end)
"""

from __future__ import annotations

import time

import torch
from torch import nn

from policies.cube_expert.config import CubeExpertConfig


class CubeExpert(nn.Module):
    table: torch.Tensor  # (nx, ny, steps, action_dim)

    def __init__(self, config: CubeExpertConfig) -> None:
        super().__init__()
        self.config = config
        shape = (config.nx, config.ny, config.steps, config.action_dim)
        self.register_buffer("table", torch.zeros(shape, dtype=torch.float32))

    def _cell(
        self, value: torch.Tensor, span: tuple[float, float], n: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The grid cell (its lower index) of each value and the fraction across it, clamped
        to the grid."""
        u = (value - span[0]) / (span[1] - span[0]) * (n - 1)
        u = u.clamp(0.0, float(n - 1))
        low = u.floor().clamp(max=n - 2)
        return low.long(), u - low

    def forward(
        self,
        frames: torch.Tensor,
        state: torch.Tensor,
        episode: torch.Tensor,
        elapsed: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        if c.study_delay_ms > 0:
            time.sleep(c.study_delay_ms / 1000)  # an injected inference delay (the delay study)
        i, fx = self._cell(episode[:, 2], c.x_range, c.nx)
        j, fy = self._cell(episode[:, 3], c.y_range, c.ny)
        rows = elapsed[:, :1].long() + torch.arange(c.chunk_size, device=elapsed.device)
        rows = rows.clamp(0, c.steps - 1)  # (B, H)
        corners = [
            self.table[(i + di).view(-1, 1), (j + dj).view(-1, 1), rows]  # (B, H, A)
            for di in (0, 1)
            for dj in (0, 1)
        ]
        wx, wy = fx.view(-1, 1, 1), fy.view(-1, 1, 1)
        low = corners[0] * (1 - wy) + corners[1] * wy
        high = corners[2] * (1 - wy) + corners[3] * wy
        return low * (1 - wx) + high * wx, episode
