"""The `hello` check: does the driver's robot match what the policy was trained for?

A mismatch is refused with a sentence naming the first disagreement and what the policy expects,
so the person wiring a driver knows what to change.
"""

from __future__ import annotations

import math
import re
from typing import Any

from controller.errors import ErrorCode, ProtocolError, SpecMismatchError
from policies.base import PolicySpec

ROBOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_robot_name(name: str) -> None:
    """The robot's name goes into logs and status: plain ASCII letters, digits, '_', '-' and
    '.', 1 to 64 of them, so no name can forge a log line or carry terminal escapes."""
    if not ROBOT_NAME.fullmatch(name):
        shown = ascii(name[:40]) + ("..." if len(name) > 40 else "")
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"robot name {shown} is not allowed: use 1 to 64 ASCII letters, digits, '_', '-' or "
            "'.'",
        )


def parse_driver_spec(
    raw: dict[str, Any],
) -> tuple[tuple[str, ...], dict[str, tuple[int, int]], int]:
    """hello's `spec` map -> (joints, {camera: (height, width)}, state_size), or ProtocolError."""
    if not isinstance(raw, dict):
        raise ProtocolError(ErrorCode.MALFORMED, "hello spec must be a map")
    joints = raw.get("joints")
    cameras = raw.get("cameras")
    state_size = raw.get("state_size")
    unknown = set(raw) - {"joints", "cameras", "state_size", "camera_hz", "limits"}
    if unknown:
        raise ProtocolError(
            ErrorCode.MALFORMED, f"unknown fields in hello spec: {sorted(unknown, key=str)}"
        )
    if not isinstance(joints, list) or not all(isinstance(j, str) for j in joints):
        raise ProtocolError(ErrorCode.MALFORMED, "hello spec.joints must be a list of joint names")
    if not isinstance(state_size, int) or isinstance(state_size, bool) or state_size < 0:
        raise ProtocolError(ErrorCode.MALFORMED, "hello spec.state_size must be an integer >= 0")
    if not isinstance(cameras, list):
        raise ProtocolError(
            ErrorCode.MALFORMED, "hello spec.cameras must be a list of {name, height, width} maps"
        )
    camera_hz = raw.get("camera_hz")
    if camera_hz is not None and not (
        isinstance(camera_hz, (int, float))
        and not isinstance(camera_hz, bool)
        and 0 < camera_hz < float("inf")
    ):
        raise ProtocolError(
            ErrorCode.MALFORMED, "hello spec.camera_hz, when sent, must be a positive number"
        )
    parsed: dict[str, tuple[int, int]] = {}
    for camera in cameras:
        if (
            not isinstance(camera, dict)
            or set(camera) != {"name", "height", "width"}
            or not isinstance(camera["name"], str)
            or not all(_positive_int(camera[k]) for k in ("height", "width"))
        ):
            raise ProtocolError(
                ErrorCode.MALFORMED,
                "each hello spec.cameras entry must be "
                "{name: str, height: int > 0, width: int > 0}",
            )
        if camera["name"] in parsed:
            # A dict would keep only the last of the two; refuse instead of guessing.
            raise ProtocolError(
                ErrorCode.MALFORMED, f"hello spec.cameras names {camera['name']!r} more than once"
            )
        parsed[camera["name"]] = (camera["height"], camera["width"])
    return tuple(joints), parsed, state_size


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def parse_driver_limits(raw: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """hello's optional `spec.limits`: joint name -> [lower, upper] position limits of the robot.
    The guards intersect them with the configured ones (the tighter bound wins)."""
    limits = raw.get("limits", {})
    if not isinstance(limits, dict):
        raise ProtocolError(
            ErrorCode.MALFORMED, "hello spec.limits must be a map of joint -> [lower, upper]"
        )
    parsed: dict[str, tuple[float, float]] = {}
    for joint, bounds in limits.items():
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        ):
            raise ProtocolError(
                ErrorCode.MALFORMED, f"hello spec.limits[{joint!r}] must be [lower, upper] numbers"
            )
        lower, upper = float(bounds[0]), float(bounds[1])
        if not (math.isfinite(lower) and math.isfinite(upper)):
            # An infinite robot limit bounds nothing: leave the joint out instead.
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"hello spec.limits[{joint!r}] must be finite numbers, got [{lower}, {upper}]; "
                "leave out a joint the robot does not limit",
            )
        parsed[joint] = (lower, upper)
    return parsed


def check_driver_spec(raw: dict[str, Any], policy: PolicySpec) -> None:
    """Raise SpecMismatchError unless the driver's robot is the one the policy expects."""
    joints, cameras, state_size = parse_driver_spec(raw)
    if joints != policy.joint_names:
        raise SpecMismatchError(
            f"the driver's joints {list(joints)} differ from the policy's "
            f"{list(policy.joint_names)}; send the policy's joint names in this order"
        )
    if state_size != policy.state_size:
        raise SpecMismatchError(
            f"the driver's state vector has {state_size} values; the policy expects "
            f"{policy.state_size}"
        )
    expected = {c.name: (c.height, c.width) for c in policy.cameras}
    missing = sorted(set(expected) - set(cameras))
    extra = sorted(set(cameras) - set(expected))
    if missing or extra:
        raise SpecMismatchError(
            f"camera names differ: the policy expects {sorted(expected)}"
            + (f", missing {missing}" if missing else "")
            + (f", unexpected {extra}" if extra else "")
        )
    for name, shape in expected.items():
        if cameras[name] != shape:
            raise SpecMismatchError(
                f"camera {name!r} sends {cameras[name][0]}x{cameras[name][1]} frames; the policy "
                f"expects {shape[0]}x{shape[1]} (height x width)"
            )


def spec_to_wire(policy: PolicySpec) -> dict[str, Any]:
    """The policy's spec as sent in `welcome` (same shape as hello's spec, plus chunking)."""
    return {
        "joints": list(policy.joint_names),
        "cameras": [{"name": c.name, "height": c.height, "width": c.width} for c in policy.cameras],
        "state_size": policy.state_size,
        "chunk_size": policy.chunk_size,
        "state_history": policy.state_history,
    }
