"""What the policies read of the daemon's `policy:` and `robot:` sections, as protocols: the
catalog and the families type their arguments with these, so policies/ names none of the
config's classes. controller.policy_sections' PolicyConfig and RobotConfig (which document each
field) fit them as they are; tests may pass anything else that does.

Read-only properties, so that a config field of a narrower type (a Literal, a tuple) fits.
Standard library only (see policies.registry).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol

# Real-time chunking's modes and mask schedules; controller.policy_sections names the same ones.
RTCMode = Literal["off", "exact", "stop_grad", "inpaint", "trained"]
MaskSchedule = Literal["exp", "linear", "ones", "zeros"]


class RTCSettings(Protocol):
    """How real-time chunking serves a flow, pi0 or pi0.5 policy (`policy.rtc`;
    policies.flow.guided_sampling). beta and overlap_rows None: the family's default."""

    @property
    def mode(self) -> RTCMode: ...
    @property
    def beta(self) -> float | None: ...
    @property
    def overlap_rows(self) -> int | None: ...
    @property
    def schedule(self) -> MaskSchedule: ...
    @property
    def regional_compile(self) -> bool: ...


class PlannerSettings(Protocol):
    """How a TD-MPC2 checkpoint is served (`policy.planner`; policies.tdmpc2.family)."""

    @property
    def mode(self) -> Literal["checkpoint", "plan", "prior"]: ...
    @property
    def compute(self) -> Literal["checkpoint", "fp32", "tf32", "bf16"]: ...
    @property
    def prior_steps(self) -> int | None: ...
    @property
    def fallback_budget_ms(self) -> float | None: ...


class PolicySettings(Protocol):
    """Which policy is served and how (`policy:`): policies.catalog and every family's
    `build` and `serve_settings` read it."""

    @property
    def kind(self) -> str: ...
    @property
    def path(self) -> Path | None: ...
    @property
    def joint_names(self) -> Sequence[str] | None: ...
    @property
    def chunk_size(self) -> int: ...
    @property
    def target(self) -> Sequence[float] | None: ...
    @property
    def time_constant_steps(self) -> float: ...
    @property
    def rtc(self) -> RTCSettings: ...
    @property
    def planner(self) -> PlannerSettings: ...
    @property
    def tokenizer(self) -> Path | None: ...
    @property
    def default_task(self) -> str | None: ...


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
