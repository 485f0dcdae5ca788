"""Diffusion Policy's serving settings, `policy.diffusion:`. Pydantic only (the control process
validates the config; see policies.section_model)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from policies.section_model import FamilySection


class DiffusionSettings(FamilySection):
    """How a Diffusion Policy checkpoint is served."""

    noise: Literal["fresh", "fixed"] = Field(
        default="fresh",
        description="fresh: every chunk starts from (and, DDPM, steps with) new noise from "
        "the device's generator, as LeRobot samples. fixed: every chunk from one fixed noise "
        "bank, so a chunk is a function of the observations alone (reproducible runs, "
        "comparisons across machines and against an in-process model).",
    )
