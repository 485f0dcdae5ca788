"""The cube_expert family: the scripted transfer-cube expert (ALOHA, gym-aloha), its joint
trajectories held in a Tempo checkpoint that scripts/sim/make_cube_expert.py writes.

Standard library only at import (see policies.registry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from policies.registry import PolicyFamily

if TYPE_CHECKING:
    from policies.registry import CheckpointFamily


def _checkpoint() -> CheckpointFamily:
    from policies.cube_expert.checkpoint import CHECKPOINT

    return CHECKPOINT


FAMILY = PolicyFamily(
    name="cube_expert",
    title="transfer-cube expert",
    summary="the scripted ALOHA transfer-cube expert (the ACT paper's demonstrations, in joint "
    "space), for env aloha-transfer-cube-state",
    checkpoint=_checkpoint,
)
