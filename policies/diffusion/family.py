"""The diffusion family: Diffusion Policy (a ResNet per camera, a conditional 1-D U-Net, DDPM
or DDIM), from LeRobot `"type": "diffusion"` directories and Tempo checkpoints.

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

from policies.registry import CheckpointFamily, PolicyFamily


def _checkpoint() -> CheckpointFamily:
    from policies.diffusion.checkpoint import CHECKPOINT

    return CHECKPOINT


FAMILY = PolicyFamily(
    name="diffusion",
    title="Diffusion Policy",
    summary="Diffusion Policy: ResNet keypoints per camera, a FiLM 1-D U-Net, DDPM or DDIM "
    "(LeRobot or Tempo checkpoints)",
    checkpoint=_checkpoint,
)
