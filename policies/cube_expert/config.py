"""The transfer-cube expert's model config (config.json's `model` section). Pydantic only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CubeExpertConfig(BaseModel):
    """A table of joint trajectories over a grid of cube positions (x, y on the table), read
    by bilinear interpolation at the cube's position when the episode began."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    x_range: tuple[float, float] = Field(description="Cube x of the grid's first and last row.")
    y_range: tuple[float, float] = Field(description="Cube y of the grid's first and last column.")
    nx: int = Field(ge=2, le=64, description="Grid points along x.")
    ny: int = Field(ge=2, le=64, description="Grid points along y.")
    steps: int = Field(ge=1, le=10_000, description="Control steps of each trajectory.")
    action_dim: int = Field(default=14, ge=1, le=64, description="Joint targets per step.")
    joint_state: int = Field(
        default=14, ge=0, le=64, description="State entries before the cube's pose (its x, y)."
    )
    state_size: int = Field(default=21, ge=2, le=1024, description="The state vector's length.")
    chunk_size: int = Field(default=1, ge=1, le=10_000, description="Steps per chunk.")
    study_delay_ms: float = Field(
        default=0.0,
        ge=0.0,
        le=10_000.0,
        description="For the delay study (scripts/sim/delay_study.py) only: each step sleeps "
        "this long on the host, as a slower policy's inference takes longer (eager tiers).",
    )

    @model_validator(mode="after")
    def _cube_in_state(self) -> CubeExpertConfig:
        if self.joint_state + 2 > self.state_size:
            raise ValueError("the state must hold the cube's x and y after the joint state")
        if not (self.x_range[0] < self.x_range[1] and self.y_range[0] < self.y_range[1]):
            raise ValueError("x_range and y_range must each go from low to high")
        return self
