"""What a policy is, to the rest of Tempo.

A `Policy` turns one observation into an action chunk: `chunk_size` future joint targets, the first
for the control step the observation belongs to. The daemon never looks inside; accelerating,
profiling or fault injection are wrappers that are themselves a `Policy`.

This module imports numpy and pydantic only, so specs can be checked without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class CameraSpec(BaseModel):
    """One camera: frames arrive as uint8 arrays of shape (height, width, 3)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    height: int = Field(gt=0, le=4096)
    width: int = Field(gt=0, le=4096)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, 3)


class PolicySpec(BaseModel):
    """The interface a policy was trained for; a driver must match it to be served."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cameras: tuple[CameraSpec, ...] = Field(
        description="Cameras in the order the model stacks them."
    )
    state_size: int = Field(ge=1, le=1024, description="Length of the joint-state vector.")
    joint_names: tuple[str, ...] = Field(
        min_length=1, description="Names of the commanded joints, one per action element."
    )
    chunk_size: int = Field(ge=1, le=10_000, description="Actions predicted per inference.")
    state_history: int = Field(
        default=1, ge=1, le=64, description="How many past state vectors the policy reads."
    )

    @model_validator(mode="after")
    def _names_unique(self) -> PolicySpec:
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError("joint_names must be unique")
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError("camera names must be unique")
        return self

    @property
    def action_dim(self) -> int:
        return len(self.joint_names)

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)


@runtime_checkable
class Policy(Protocol):
    """The one interface the daemon serves."""

    @property
    def spec(self) -> PolicySpec: ...

    def predict_chunk(self, images: Mapping[str, np.ndarray], state: np.ndarray) -> np.ndarray:
        """Predict an action chunk.

        images: camera name -> uint8 array (height, width, 3), for every camera in `spec`.
        state: float32 array (state_history, state_size), oldest first, newest last.
        Returns float32 array (chunk_size, action_dim) in the robot's units (unnormalized).
        """
        ...

    def reset(self) -> None:
        """Forget any internal state (start of a new episode)."""
        ...
