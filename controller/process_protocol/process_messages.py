"""The messages between the control process and its inference process, one class each, its
encoding and decoding side by side (the form on the channel: `message_codec`).

    control -> inference   Build                  a standing-by process: load the policy now
                           AttachSlots            the observation slots, after Hello
                           Infer                  one observation (frames in a slot, or in a
                                                  driver's ring slot: `ring`, with the state;
                                                  `infer_message`), one batch's consecutive
                           AttachRing             a same-host driver's frame ring
                           DetachRing             its session ended
                           Stop
    inference -> control   Standby                imported, waiting for Build
                           Prepared               a spare's wait used: the compiler
                                                  imported, the policy read ahead (or not)
                           Hello                  the policy is loaded, warmed, checked
                           Ready                  slots attached (pinned?): serving
                           RingReady              a driver's ring attached (pinned?)
                           FailedStart            it cannot serve (the sentence why)
                           ChunkReply             a step's chunk, memory, timings, status
                           RequestFailed          a request not served, and whose fault:
                                                  refused (a malformed observation: that
                                                  robot's), input_fault (the FP32 reference
                                                  fails on it too: the input's, InputFault),
                                                  failed (the policy's, a torn slot, a ring
                                                  that cannot be attached), fatal (the device
                                                  is unusable: the process exits)

    data = encode(Ready(pinned=True))
    message = decode(data)            # a Message; MessageError with one sentence if malformed

Only numpy, msgpack, pydantic and the standard library (the control process never imports
torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
from pydantic import ValidationError

from controller.process_protocol.infer_message import Infer
from controller.process_protocol.message_codec import (
    MAX_MESSAGE_BYTES,
    Message,
    MessageError,
    MessageFields,
    pack_array,
    pack_arrays,
    pack_map,
    unpack_map,
)
from policies.base import PolicySpec

__all__ = [
    "MAX_MESSAGE_BYTES",
    "AttachRing",
    "AttachSlots",
    "Build",
    "ChunkReply",
    "DetachRing",
    "FailedStart",
    "FailureCause",
    "Hello",
    "Infer",
    "Message",
    "MessageError",
    "Prepared",
    "Ready",
    "RequestFailed",
    "RingReady",
    "Standby",
    "Stop",
    "decode",
    "decode_map",
    "encode",
]


# ---- control -> inference --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Build(Message):
    KIND = "build"


@dataclass(frozen=True, eq=False)
class Stop(Message):
    KIND = "stop"


@dataclass(frozen=True, eq=False)
class AttachSlots(Message):
    """The control process's observation slots (their memory rides along as a descriptor)."""

    KIND = "attach"
    path: str
    count: int

    def fields(self) -> dict[str, Any]:
        return {"path": self.path, "count": self.count}

    @classmethod
    def read(cls, fields: MessageFields) -> AttachSlots:
        return cls(fields.text("path"), fields.integer("count"))


@dataclass(frozen=True, eq=False)
class AttachRing(Message):
    """A same-host driver's frame ring: attach (and pin) it, to be named `id` from now on."""

    KIND = "attach_ring"
    id: int
    path: str
    count: int

    def fields(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path, "count": self.count}

    @classmethod
    def read(cls, fields: MessageFields) -> AttachRing:
        return cls(fields.integer("id"), fields.text("path"), fields.integer("count"))


@dataclass(frozen=True, eq=False)
class DetachRing(Message):
    KIND = "detach_ring"
    ring: int

    def fields(self) -> dict[str, Any]:
        return {"ring": self.ring}

    @classmethod
    def read(cls, fields: MessageFields) -> DetachRing:
        return cls(fields.integer("ring"))


# ---- inference -> control --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Standby(Message):
    KIND = "standby"


@dataclass(frozen=True, eq=False)
class Prepared(Message):
    """A spare has done what it can before `Build` (process_main.prepare_while_standing_by):
    `read_ahead`, whether it holds the policy read onto the host (the build then reads nothing)."""

    KIND = "prepared"
    read_ahead: bool

    def fields(self) -> dict[str, Any]:
        return {"read_ahead": self.read_ahead}

    @classmethod
    def read(cls, fields: MessageFields) -> Prepared:
        return cls(fields.boolean("read_ahead"))


@dataclass(frozen=True, eq=False)
class Hello(Message):
    """The policy is loaded, warmed up and checked: its spec, outputs and the runner's status."""

    KIND = "hello"
    spec: PolicySpec
    outputs: tuple[str, ...]
    status: dict[str, Any]

    def fields(self) -> dict[str, Any]:
        spec = self.spec.model_dump(mode="json")
        return {"spec": spec, "outputs": list(self.outputs), "status": self.status}

    @classmethod
    def read(cls, fields: MessageFields) -> Hello:
        spec = fields.mapping("spec")
        try:
            policy_spec = PolicySpec.model_validate(spec)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "spec"
            raise MessageError(
                f"the 'spec' of a 'hello' message is not a policy spec ({where}: {error['msg']})"
            ) from None
        return cls(policy_spec, fields.texts("outputs"), fields.mapping("status"))


@dataclass(frozen=True, eq=False)
class Ready(Message):
    KIND = "ready"
    pinned: bool  # the observation slots are page-locked for DMA

    def fields(self) -> dict[str, Any]:
        return {"pinned": self.pinned}

    @classmethod
    def read(cls, fields: MessageFields) -> Ready:
        return cls(fields.boolean("pinned"))


@dataclass(frozen=True, eq=False)
class RingReady(Message):
    KIND = "ring_ready"
    id: int
    pinned: bool

    def fields(self) -> dict[str, Any]:
        return {"id": self.id, "pinned": self.pinned}

    @classmethod
    def read(cls, fields: MessageFields) -> RingReady:
        return cls(fields.integer("id"), fields.boolean("pinned"))


@dataclass(frozen=True, eq=False)
class FailedStart(Message):
    KIND = "failed_start"
    error: str

    def fields(self) -> dict[str, Any]:
        return {"error": self.error}

    @classmethod
    def read(cls, fields: MessageFields) -> FailedStart:
        return cls(fields.text("error"))


@dataclass(frozen=True, eq=False)
class ChunkReply(Message):
    """A step's answer: the chunk and the policy's new memory; `step_ns` the step as the
    inference process timed it (request taken -> chunk in host memory), `received_ns` when it
    took the request (CLOCK_MONOTONIC, the control side's clock too); `status` the runner's,
    at most every so often."""

    KIND = "chunk"
    id: int
    actions: np.ndarray
    memory: dict[str, np.ndarray] | None
    step_ns: int
    received_ns: int
    status: dict[str, Any] | None = None

    def fields(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "actions": pack_array(self.actions),
            "memory": pack_arrays(self.memory),
            "step_ns": self.step_ns,
            "received_ns": self.received_ns,
            "status": self.status,
        }

    @classmethod
    def read(cls, fields: MessageFields) -> ChunkReply:
        return cls(
            fields.integer("id"),
            fields.array("actions"),
            fields.arrays("memory"),
            fields.integer("step_ns"),
            fields.integer("received_ns"),
            fields.optional_mapping("status"),
        )


FailureCause = Literal["refused", "input_fault", "failed", "fatal"]
FAILURE_CAUSES: tuple[FailureCause, ...] = get_args(FailureCause)


@dataclass(frozen=True, eq=False)
class RequestFailed(Message):
    """Request `id` was not served; `cause` (its kind on the channel) says whose fault it is
    (see the module doc), `error` the sentence why."""

    KIND = "failed"
    id: int
    cause: FailureCause
    error: str

    def __post_init__(self) -> None:
        if self.cause not in FAILURE_CAUSES:
            raise MessageError(f"{self.cause!r} is not a cause of a failed request")

    @property
    def kind(self) -> str:
        return self.cause

    def fields(self) -> dict[str, Any]:
        return {"id": self.id, "error": self.error}

    @classmethod
    def read(cls, fields: MessageFields) -> RequestFailed:
        return cls(fields.integer("id"), fields.kind, fields.text("error"))  # type: ignore[arg-type]


_CLASSES: tuple[type[Message], ...] = (
    Build,
    Stop,
    AttachSlots,
    Infer,
    AttachRing,
    DetachRing,
    Standby,
    Prepared,
    Hello,
    Ready,
    RingReady,
    FailedStart,
    ChunkReply,
)
_BY_KIND: dict[str, type[Message]] = {
    **{cls.KIND: cls for cls in _CLASSES},
    **{cause: RequestFailed for cause in FAILURE_CAUSES},
}


def encode(message: Message) -> bytes:
    return pack_map({"kind": message.kind, **message.fields()})


def decode(data: bytes) -> Message:
    """The message `data` holds; MessageError (one sentence) when it is not a well-formed one."""
    return decode_map(unpack_map(data))


def decode_map(raw: dict[str, Any]) -> Message:
    """The message a map from `message_codec.unpack_map` holds (MessageError if malformed)."""
    fields = MessageFields(raw)
    cls = _BY_KIND.get(fields.kind)
    if cls is None:
        raise MessageError(f"{fields.kind!r} is not a message between the processes")
    message = cls.read(fields)
    fields.done()
    return message
