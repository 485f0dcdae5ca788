"""The smolvla family: Hugging Face's SmolVLA (SmolVLM2 cut to N layers, a flow-matching
action expert alternating cross- and self-attention), from LeRobot `"type": "smolvla"`
directories and Tempo checkpoints.

Standard library only at import (see policies.registry); each part imports what it needs when
it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from policies.flow.family import RTC_SETTINGS
from policies.pi0.family import PROMPT_SETTINGS
from policies.registry import CheckpointFamily, DemoPolicy, PolicyFamily

if TYPE_CHECKING:
    from policies.settings import PolicySettings
    from policies.tensor_policy import TensorPolicy


def _checkpoint() -> CheckpointFamily:
    from policies.smolvla.checkpoint import CHECKPOINT

    return CHECKPOINT


def _serve_settings(policy: TensorPolicy, settings: PolicySettings) -> TensorPolicy:
    from policies.smolvla.serving import serve_smolvla_settings

    return serve_smolvla_settings(policy, settings)


def _demo_settings(cache: Path) -> list[str]:
    from policies.smolvla.demo import demo_settings

    return demo_settings(cache)


FAMILY = PolicyFamily(
    name="smolvla",
    title="SmolVLA",
    summary="Hugging Face's SmolVLA (SmolVLM2 + flow-matching action expert), from LeRobot or "
    "Tempo checkpoints",
    checkpoint=_checkpoint,
    serve_settings=_serve_settings,
    settings=(RTC_SETTINGS, PROMPT_SETTINGS),
    demo=DemoPolicy(
        help="SmolVLA at a reduced width with random weights (CPU-sized), prompted per robot",
        settings=_demo_settings,
    ),
)
