"""The reach family: the built-in scripted policy (`policy.kind: reach`), made from the
`policy:` section and the robot's joints and cameras; no checkpoints.

Standard library only at import (see policies.registry).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import ConfigError
from policies.registry import DemoPolicy, FamilySettings, PolicyFamily

if TYPE_CHECKING:
    from policies.reach.settings import ReachSettings
    from policies.settings import PolicySettings, RobotSettings
    from policies.tensor_policy import TensorPolicy


def _reach_model() -> type[ReachSettings]:
    from policies.reach.settings import ReachSettings

    return ReachSettings


# `policy.reach:`; its fields sat directly under `policy:` before.
REACH_SETTINGS = FamilySettings(
    section="reach", model=_reach_model, old_fields=("chunk_size", "target", "time_constant_steps")
)


def build_from_config(policy: PolicySettings, robot: RobotSettings | None) -> TensorPolicy:
    """The reach policy the `policy:` section describes, for the robot's joints and cameras;
    a bad target (or settings reach has no use for) is refused with one sentence."""
    from policies.base import CameraSpec
    from policies.reach.policy import build_reach_policy

    if policy.section("rtc").mode != "off":
        raise ConfigError("policy.rtc needs a flow policy checkpoint; reach has no flow")
    if robot is None:
        raise ConfigError("policy.kind 'reach' needs the robot section (joints, cameras)")
    reach = policy.section("reach")
    cameras = [CameraSpec(name=c.name, height=c.height, width=c.width) for c in robot.cameras]
    try:
        return build_reach_policy(
            robot.joints,
            cameras,
            chunk_size=reach.chunk_size,
            target=reach.target,
            time_constant_steps=reach.time_constant_steps,
        )
    except ValueError as exc:
        raise ConfigError(f"policy.reach.target: {exc}") from None


def demo_settings(cache: Path) -> list[str]:
    """`tempo demo --policy reach`: the scripted policy, nothing to make."""
    return ["policy.kind=reach"]


FAMILY = PolicyFamily(
    name="reach",
    title="reach",
    summary="the built-in scripted policy: every joint moves smoothly toward a target pose",
    build=build_from_config,
    settings=(REACH_SETTINGS,),
    demo=DemoPolicy(help="the built-in scripted policy", settings=demo_settings),
)
