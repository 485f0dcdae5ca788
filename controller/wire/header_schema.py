"""What a message header may hold, and the checks a decoded header passes: the protocol
version, the message kinds, each kind's required and optional fields with their types, and
only plain msgpack values (no bin, no ext), bounded in number. controller.wire.protocol (the
codec) runs these on every header it decodes; docs/protocol.md is the reference. Only the
standard library (a driver imports this).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.errors import ErrorCode, ProtocolError

PROTOCOL_VERSION = 2
# Older versions and what changed since: a peer speaking one of them gets its error in its own
# version (the `error` message has not changed), so an old client can read why it was refused.
OLDER_VERSIONS = {1: "version 2 added episode starts (obs.episode_start)"}

KINDS = ("hello", "welcome", "obs", "action", "hold", "teleop", "mark", "bye", "error")
DRIVER_KINDS = ("hello", "obs", "teleop", "mark", "bye")  # what a driver may send; the rest is ours
_WITH_ARRAYS = ("obs", "action")  # every other kind carries no array frames

_COMMON = {"version": int, "kind": str, "robot": str, "seq": int, "time_ns": int, "arrays": list}
# Fields each kind must (required) or may (optional) carry besides the common ones.
_REQUIRED: dict[str, dict[str, type | tuple[type, ...]]] = {
    "hello": {"spec": dict},
    "welcome": {"session": str, "control_hz": float, "spec": dict},
    "obs": {"session": str},
    "action": {"session": str, "step": int, "obs_seq": int, "deadline_ns": int},
    "hold": {"session": str, "step": int, "reason": str},
    "teleop": {"session": str, "joints": list},
    "mark": {"session": str, "reason": str},  # keep this moment in the flight recorder
    "bye": {"session": str},
    "error": {"code": str, "message": str},
}
_OPTIONAL: dict[str, dict[str, type | tuple[type, ...]]] = {
    # Frames in place (same host): hello asks, welcome hands over the ring, obs names the slot.
    # A task (a prompt-reading policy's text) comes in hello, and changes at an episode start.
    # A daemon serving several policies serves the one hello names (none: its default).
    # A lockstep driver's world waits for each action: its chunks play from the tick they land.
    "hello": {"frames_in_place": bool, "task": str, "policy": str, "lockstep": bool},
    "obs": {"resume": bool, "episode_start": bool, "frame_slot": dict, "task": str},
    "welcome": {"limits": dict, "frame_ring": dict},
    "error": {"session": str, "ref_seq": int},
}

_PLAIN = (str, int, float, bool, type(None))
# A robot's task, in UTF-8 bytes: a sentence or a few; it is tokenized, logged and shown.
MAX_TASK_BYTES = 1000
# Why a driver marked a moment (`mark`), in UTF-8 bytes: a short phrase, logged and recorded.
MAX_MARK_REASON_BYTES = 200
# A policy's name in hello (the daemon's config allows 1 to 64 of [A-Za-z0-9_.-]).
MAX_POLICY_NAME_CHARS = 64


def refuse_foreign_types(header: dict[str, Any], max_values: int) -> None:
    """A header holds maps, lists, strings, numbers, booleans and nil only: no bin (even empty,
    which no msgpack length limit can refuse), no ext (timestamps bypass ext_hook). Iterative,
    so nesting as deep as msgpack allows cannot exhaust the Python stack, and bounded, so a
    header packed with tiny values cannot hold the loop thread for long."""
    pending: list[Any] = [header]
    seen = 0
    while pending:
        node = pending.pop()
        seen += 1
        if seen > max_values:
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"the header holds more than {max_values} values; a real header holds a few "
                "hundred",
            )
        if isinstance(node, dict):
            pending.extend(node.keys())
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
        elif not isinstance(node, _PLAIN):
            kind = "bin" if isinstance(node, bytes) else "ext"
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"msgpack {kind} data is not allowed in a header; send text as str and "
                "binary data as an array frame",
            )


def check_fields(header: dict[str, Any], kinds: Sequence[str] = KINDS) -> str:
    """The header's version, kind (one of `kinds`) and fields, each of its type; returns the
    kind. A nil optional field is removed (nil means absent)."""
    for name, expected in _COMMON.items():
        if name not in header:
            raise ProtocolError(ErrorCode.MALFORMED, f"header is missing the field {name!r}")
        if not is_type(header[name], expected):
            raise ProtocolError(
                ErrorCode.MALFORMED, f"header field {name!r} must be {_type_name(expected)}"
            )
    version = header["version"]
    if version != PROTOCOL_VERSION:
        change = OLDER_VERSIONS.get(version)
        raise ProtocolError(
            ErrorCode.VERSION,
            f"protocol version {version} is not supported; this end speaks version "
            f"{PROTOCOL_VERSION}" + (f" ({change})" if change else "") + ": driver and daemon "
            "must speak one version, so upgrade the older (a driver: pip install -U "
            "tempo-controller)",
            reply_version=version if change else None,
        )
    kind = header["kind"]
    if kind not in _REQUIRED:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED, f"unknown message kind {kind!r}; expected one of {KINDS}"
        )
    if kind not in kinds:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED, f"this end accepts {', '.join(kinds)}, not {kind!r}"
        )
    required, optional = _REQUIRED[kind], _OPTIONAL.get(kind, {})
    for name in [n for n in optional if n in header and header[n] is None]:
        del header[name]  # nil in an optional field means the field is absent
    for name in required:
        if name not in header:
            raise ProtocolError(ErrorCode.MALFORMED, f"a {kind!r} message needs the field {name!r}")
    for name, value in header.items():
        allowed = _COMMON.get(name) or required.get(name) or optional.get(name)
        if allowed is None:
            raise ProtocolError(
                ErrorCode.MALFORMED, f"unknown header field {name!r} in a {kind!r} message"
            )
        if not is_type(value, allowed):
            raise ProtocolError(
                ErrorCode.MALFORMED, f"header field {name!r} must be {_type_name(allowed)}"
            )
    if header["arrays"] and kind not in _WITH_ARRAYS:
        raise ProtocolError(
            ErrorCode.MALFORMED,
            f"a {kind!r} message carries no arrays; only obs and action do (send 'arrays': [])",
        )
    if "task" in header:
        check_task(header["task"], kind, bool(header.get("episode_start")))
    if kind == "mark":
        check_mark_reason(header["reason"])
    if "policy" in header and not 1 <= len(header["policy"]) <= MAX_POLICY_NAME_CHARS:
        raise ProtocolError(
            ErrorCode.MALFORMED,
            f"hello's policy must name one in 1 to {MAX_POLICY_NAME_CHARS} characters",
        )
    if not 0 <= header["seq"] < 2**63:
        raise ProtocolError(ErrorCode.MALFORMED, "header field 'seq' must be in [0, 2^63)")
    if not 0 <= header["time_ns"] < 2**63:
        raise ProtocolError(
            ErrorCode.MALFORMED,
            "header field 'time_ns' must be the sender's monotonic clock in ns, in [0, 2^63)",
        )
    return kind


def check_task(task: str, kind: str, episode_start: bool) -> None:
    """A task is text of at most MAX_TASK_BYTES, in a hello or an episode's first observation
    (a robot's prompt changes between episodes, never within one)."""
    if kind == "obs" and not episode_start:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            "a task comes in hello or in an observation with episode_start, not in any other "
            "observation",
        )
    if not task.strip():
        raise ProtocolError(ErrorCode.NOT_ALLOWED, "a task must hold some text")
    size = len(task.encode("utf-8", "surrogatepass"))
    if size > MAX_TASK_BYTES:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"the task is {size} bytes of UTF-8; at most {MAX_TASK_BYTES} are allowed",
        )


def check_mark_reason(reason: str) -> None:
    """A mark's reason is some text of at most MAX_MARK_REASON_BYTES."""
    if not reason.strip():
        raise ProtocolError(ErrorCode.NOT_ALLOWED, "a mark's reason must hold some text")
    size = len(reason.encode("utf-8", "surrogatepass"))
    if size > MAX_MARK_REASON_BYTES:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"the mark's reason is {size} bytes of UTF-8; at most {MAX_MARK_REASON_BYTES} are "
            "allowed",
        )


def is_type(value: Any, expected: type | tuple[type, ...]) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _type_name(expected: type | tuple[type, ...]) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a map",
        bool: "true or false",
    }
    if isinstance(expected, tuple):
        return " or ".join(names.get(t, t.__name__) for t in expected)
    return names.get(expected, expected.__name__)
