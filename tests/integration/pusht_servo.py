"""A hand-built PushT policy for the closed-loop tests: it finds the T block in camera `image`
(its slate-grey pixels) and commands the agent to the block's centroid, in world units (gym-pusht
draws its 512x512 world into 96x96 pixels, x along columns, y along rows). Whether the agent
reaches the block depends on the frame reaching the right camera the right way round and the
action reaching the right joints, which is what the tests check."""

from __future__ import annotations

import torch
from torch import nn

from policies.base import CameraSpec, PolicySpec
from policies.tensor_policy import TensorPolicy

BLOCK_RGB = (119, 136, 153)  # pygame's LightSlateGray, the block's fill
WORLD_PER_PIXEL = 512.0 / 96.0
# The same target for several steps: an answer that lands a few ticks late still has an action
# for the step it lands on (a chunk of one would be dropped as late on a loaded machine).
CHUNK = 8


class BlockServo(nn.Module):
    rgb: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("rgb", torch.tensor(BLOCK_RGB, dtype=torch.float32))

    def forward(self, frames: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        image = frames[:, 0].float()  # (batch, 96, 96, 3): the one camera
        mask = ((image - self.rgb).abs().sum(-1) < 30).float()  # (batch, rows, cols)
        count = mask.sum((1, 2)).clamp(min=1.0)
        rows = torch.arange(mask.shape[1], dtype=torch.float32).view(1, -1, 1)
        cols = torch.arange(mask.shape[2], dtype=torch.float32).view(1, 1, -1)
        x = (mask * cols).sum((1, 2)) / count * WORLD_PER_PIXEL
        y = (mask * rows).sum((1, 2)) / count * WORLD_PER_PIXEL
        found = mask.sum((1, 2)) > 0
        target = torch.stack([x, y], dim=-1)
        current = state[:, -1, :]
        target = torch.where(found.unsqueeze(-1), target, current)  # no block seen: stay
        return target.unsqueeze(1).expand(-1, CHUNK, -1).contiguous()


def block_servo_policy() -> TensorPolicy:
    spec = PolicySpec(
        cameras=(CameraSpec(name="image", height=96, width=96),),
        state_size=2,
        joint_names=("x", "y"),
        chunk_size=CHUNK,
    )
    return TensorPolicy(spec=spec, module=BlockServo())


def served_block_servo():  # type: ignore[no-untyped-def]
    """The servo as the daemon serves a plain policy (eager FP32, on a feed thread)."""
    from controller.feed.served_policy import served_here
    from policies.tensor_policy import EagerPolicy

    return served_here(EagerPolicy(block_servo_policy()))
