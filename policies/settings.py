"""What the policies read of the daemon's `policy:` and `robot:` sections, as protocols: the
catalog and the families type their arguments with these, so policies/ names none of the
config's classes. controller.policy_sections' PolicyConfig and RobotConfig (which document each
field) fit them as they are; tests may pass anything else that does. A family's own settings
are its section's model (policies.registry.FamilySettings), reached by `section(name)`.

Read-only properties, so that a config field of a narrower type (a Literal, a tuple) fits.
Standard library only (see policies.registry).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class PolicySettings(Protocol):
    """Which policy is served and how (`policy:`): policies.catalog and every family's
    `build` and `serve_settings` read it."""

    @property
    def kind(self) -> str: ...
    @property
    def path(self) -> Path | None: ...
    @property
    def joint_names(self) -> Sequence[str] | None: ...
    def section(self, name: str) -> Any:
        """The family section `policy.<name>`, as the model its family declares."""


class CameraSettings(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def height(self) -> int: ...
    @property
    def width(self) -> int: ...


class RobotSettings(Protocol):
    """The robot's joints and cameras (`robot:`), for a built-in policy such as reach."""

    @property
    def joints(self) -> Sequence[str]: ...
    @property
    def cameras(self) -> Sequence[CameraSettings]: ...
