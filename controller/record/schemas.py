"""What a recording holds: its topics, their JSON schemas, and each record as JSON (camera
frames are binary: controller/record/image_cdr.py).

Per robot R (docs/recording.md is the reference):

    /R/camera/<name>        sensor_msgs/msg/Image  a frame as received (or downscaled), rgb8, CDR
    /R/observation          tempo.Observation  obs_seq, step, state, teleop, driver time
    /R/session              tempo.Session      a session began (hello), with its task
    /R/episode              tempo.Episode      an episode began, with its task
    /R/inference_request    tempo.InferenceRequest  the context the policy got
    /R/chunk                tempo.Chunk        the chunk that came back, with its tier
    /R/command              tempo.Command      the action or hold sent, guard clamps, teleop
    /R/mark                 tempo.Mark         a driver's mark, or a guard stop

Every record names the session it came from (`session`, the id its robot's welcome gave), so
one robot name's sessions are told apart. Every message's publish time is the daemon's
monotonic clock when it happened (an observation's and its frames': when it was received, the
key that joins them); its log time is the same moment in wall-clock nanoseconds (what Foxglove
shows). Arrays are JSON lists of numbers; float32 values survive the trip exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from controller.record.queue import Record

PROFILE = "tempo"
METADATA = "tempo.recording"  # the metadata record: frames mode, joints, control rate

_NUMBERS = {"type": "array", "items": {"type": "number"}}
_MATRIX = {"type": "array", "items": _NUMBERS}
_INT = {"type": "integer"}
_TEXT_OR_NULL = {"type": ["string", "null"]}
_STRINGS = {"type": "array", "items": {"type": "string"}}


def _object(title: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A record's schema: its own properties, and the session it came from (every record)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "type": "object",
        "properties": {"session": {"type": "string"}, **properties},
    }


SCHEMAS: dict[str, dict[str, Any]] = {
    "tempo.Session": _object(
        "tempo.Session",
        {
            "task": _TEXT_OR_NULL,
            "policy": _TEXT_OR_NULL,  # the named policy serving the robot
            "joints": _STRINGS,  # its joints, in the order of state, action and command
        },
    ),
    "tempo.Observation": _object(
        "tempo.Observation",
        {
            "obs_seq": _INT,
            "step": _INT,
            "received_ns": _INT,
            "driver_time_ns": _INT,
            "episode": _INT,
            "state": _NUMBERS,
            "teleop": {"anyOf": [_NUMBERS, {"type": "null"}]},
            "cameras": _STRINGS,
        },
    ),
    "tempo.Episode": _object(
        "tempo.Episode", {"episode": _INT, "step": _INT, "task": _TEXT_OR_NULL}
    ),
    "tempo.InferenceRequest": _object(
        "tempo.InferenceRequest",
        {
            "obs_seq": _INT,
            "received_ns": _INT,
            "episode": _INT,
            "step": _INT,
            "episode_start": {"type": "boolean"},
            "state_history": _MATRIX,
            "inference_delay": _INT,
            "previous_plan": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {"start_step": _INT, "actions": _MATRIX},
                    },
                    {"type": "null"},
                ]
            },
            "memory": {"type": "object"},
            "prompt": {
                "anyOf": [
                    {
                        "type": "object",
                        "properties": {
                            "ids": {"type": "array", "items": _INT},
                            "mask": {"type": "array", "items": {"type": "boolean"}},
                        },
                    },
                    {"type": "null"},
                ]
            },
        },
    ),
    "tempo.Chunk": _object(
        "tempo.Chunk",
        {
            "obs_seq": _INT,
            "start_step": _INT,
            "episode": _INT,
            "landed_step": _INT,
            "obs_received_ns": _INT,
            "inference_ns": _INT,
            "late_steps": {"type": ["integer", "null"]},
            "tier": _TEXT_OR_NULL,
            "checkpoint": _TEXT_OR_NULL,  # the policy.path that served it (null: unknown)
            "actions": _MATRIX,
        },
    ),
    "tempo.Command": _object(
        "tempo.Command",
        {
            "step": _INT,
            "kind": {"enum": ["action", "hold"]},
            "reason": _TEXT_OR_NULL,
            "action": {"anyOf": [_NUMBERS, {"type": "null"}]},
            "proposed": {"anyOf": [_NUMBERS, {"type": "null"}]},
            "clamped_joints": _STRINGS,
            "teleop_joints": _STRINGS,
        },
    ),
    "tempo.Mark": _object(
        "tempo.Mark", {"reason": {"type": "string"}, "trigger": {"type": "string"}}
    ),
}

# Record kind -> (topic under /<robot>/, schema).
TOPICS = {
    "session": ("session", "tempo.Session"),
    "observation": ("observation", "tempo.Observation"),
    "episode": ("episode", "tempo.Episode"),
    "request": ("inference_request", "tempo.InferenceRequest"),
    "chunk": ("chunk", "tempo.Chunk"),
    "command": ("command", "tempo.Command"),
    "mark": ("mark", "tempo.Mark"),
}


def topic(robot: str, name: str) -> str:
    return f"/{robot}/{name}"


def camera_topic(robot: str, camera: str) -> str:
    return f"/{robot}/camera/{camera}"


def _array(array: np.ndarray | None) -> Any:
    """An array as it is (packed_json writes it as a list), or None."""
    return None if array is None else np.asarray(array)


def context_json(context: Any) -> dict[str, Any]:
    """A policies.base.RobotContext as its schema's value (everything the policy's codec reads),
    arrays kept as arrays, as record_json's."""
    plan = context.previous_plan
    prompt = context.prompt
    return {
        "step": context.step,
        "episode_start": bool(context.episode_start),
        "state_history": _array(context.state_history),
        "inference_delay": int(context.inference_delay),
        "previous_plan": None
        if plan is None
        else {"start_step": plan.start_step, "actions": _array(plan.actions)},
        "memory": {
            name: {
                "dtype": str(value.dtype),
                "shape": list(value.shape),
                "data": _array(value.ravel()),
            }
            for name, value in context.memory.items()
        },
        "prompt": None
        if prompt is None
        else {"ids": _array(prompt.ids), "mask": _array(prompt.mask)},
    }


def clamped(
    proposed: np.ndarray | None, command: np.ndarray | None, joints: Sequence[str]
) -> list[str]:
    """The joints whose command the guards moved away from the proposed action."""
    if proposed is None or command is None or len(joints) != len(command):
        return []
    return [joints[int(i)] for i in np.flatnonzero(proposed != command)]


def record_json(record: Record, joints: Sequence[str], tier: str | None) -> dict[str, Any]:
    """A record (not its frames) as its schema's value, its arrays kept as arrays (the file
    process writes them as JSON lists: packed_json); `tier`: the tier serving now (chunks)."""
    return {"session": record.session, **_fields_json(record, joints, tier)}


def _fields_json(record: Record, joints: Sequence[str], tier: str | None) -> dict[str, Any]:
    f = record.fields
    kind = record.kind
    if kind == "observation":
        return {
            "obs_seq": f["obs_seq"],
            "step": f["step"],
            "received_ns": record.time_ns,
            "driver_time_ns": f["driver_time_ns"],
            "episode": f["episode"],
            "state": _array(f["state"]),
            "teleop": _array(f["teleop"]),
            "cameras": list(f["images"]),
        }
    if kind == "request":
        return {
            "obs_seq": f["obs_seq"],
            "received_ns": f["received_ns"],
            "episode": f["episode"],
            **context_json(f["context"]),
        }
    if kind == "chunk":
        return {**{k: v for k, v in f.items() if k not in ("actions", "_policy")},
                "tier": tier, "actions": _array(f["actions"])}  # fmt: skip
    if kind == "command":
        return {
            "step": f["step"],
            "kind": "hold" if f["reason"] is not None else "action",
            "reason": f["reason"],
            "action": _array(f["command"]),
            "proposed": _array(f["proposed"]),
            "clamped_joints": clamped(f["proposed"], f["command"], joints),
            "teleop_joints": list(f["teleop_joints"]),
        }
    return dict(f)  # a session record names its session itself: the same id
