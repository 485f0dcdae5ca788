"""The reach family's settings, `policy.reach:` (`policy.chunk_size`, `policy.target` and
`policy.time_constant_steps` before). Pydantic only (see policies.section_model)."""

from __future__ import annotations

from pydantic import Field

from policies.section_model import FamilySection


class ReachSettings(FamilySection):
    """The built-in scripted policy: where it goes and how fast."""

    chunk_size: int = Field(default=20, ge=1, le=1000, description="Steps per chunk.")
    target: tuple[float, ...] | None = Field(
        default=None, description="Target pose, one value per joint (default: 0.5 rad each)."
    )
    time_constant_steps: float = Field(
        default=25.0, gt=0, description="Steps to cover ~63% of the way to the target."
    )
