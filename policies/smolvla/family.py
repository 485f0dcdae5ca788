"""The smolvla family: Hugging Face's SmolVLA (SmolVLM2 cut to N layers, a flow-matching
action expert alternating cross- and self-attention), from LeRobot `"type": "smolvla"`
directories and Tempo checkpoints.

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

from policies.registry import CheckpointFamily, PolicyFamily


def _checkpoint() -> CheckpointFamily:
    from policies.smolvla.checkpoint import CHECKPOINT

    return CHECKPOINT


FAMILY = PolicyFamily(
    name="smolvla",
    title="SmolVLA",
    summary="Hugging Face's SmolVLA (SmolVLM2 + flow-matching action expert), from LeRobot or "
    "Tempo checkpoints",
    checkpoint=_checkpoint,
)
