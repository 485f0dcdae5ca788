"""The pi0.5 family: pi0 with adaRMS time conditioning and the state in the prompt, from LeRobot
`pi05` directories (openpi's pi0.5 checkpoints are read by the pi0 family's openpi reader).

Standard library only at import (see policies.registry).
"""

from __future__ import annotations

from pathlib import Path

from policies.flow.family import RTC_SETTINGS
from policies.pi0.family import PROMPT_SETTINGS
from policies.registry import CheckpointFamily, DemoPolicy, PolicyFamily


def _checkpoint() -> CheckpointFamily:
    from policies.pi0.checkpoint_family import PI05_CHECKPOINT

    return PI05_CHECKPOINT


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo --policy pi05`: pi0.5 at a reduced width (policies.pi0.demo)."""
    from policies.pi0 import demo

    return demo.demo_settings(cache, "pi05")


FAMILY = PolicyFamily(
    name="pi05",
    title="pi0.5",
    summary="Physical Intelligence's pi0.5 (adaRMS action expert, state in the prompt), from "
    "LeRobot checkpoints",
    checkpoint=_checkpoint,
    # policy.prompt and policy.rtc: the pi0 family's hook serves both (one module type).
    settings=(RTC_SETTINGS, PROMPT_SETTINGS),
    demo=DemoPolicy(
        help="pi0.5 at a reduced width with random weights (CPU-sized), prompted per robot",
        settings=demo_settings,
    ),
)
