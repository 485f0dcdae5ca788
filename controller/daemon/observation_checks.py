"""The checks an observation passes before it reaches its session: clock, frames (on the
socket or in the driver's frame ring), state and teleop vectors. Each refusal is a
ProtocolError with its code and one sentence (controller.daemon.dispatch answers with it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from controller.daemon.session import Session
from controller.errors import ErrorCode, ProtocolError
from controller.wire.protocol import Message
from controller.wire.slot_ring import SlotFrames
from policies.base import HALF_MAX, PolicySpec


class Superseded(Exception):
    """An observation written in place whose slot the driver has written again since."""


class ObservationChecker:
    """One observation's arrays against the policy's spec: exactly the arrays it must carry,
    its frames (on the socket or in the slot it names), state and teleop within range."""

    def __init__(self, spec: PolicySpec) -> None:
        self.spec = spec
        self._camera_names = [c.name for c in spec.cameras]
        self._observation_arrays = frozenset(spec.camera_names) | {"state"}
        # What the model represents (state) and any robot can be commanded (teleop): values
        # past these are refused like NaN, before they reach the model or the guards.
        self._state_range = spec.state_range()
        teleop_high = np.full(spec.action_dim, HALF_MAX, dtype=np.float32)
        self._teleop_range = (-teleop_high, teleop_high)

    def check(
        self, message: Message, session: Session
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray | None]:
        """(images, state, teleop or None); raises ProtocolError, or Superseded."""
        arrays = message.arrays
        slot = message.header.get("frame_slot")
        expected = self._observation_arrays if slot is None else {"state"}
        names = set(arrays)
        if not expected <= names or names - expected - {"teleop"}:
            where = "" if slot is None else " (its frames are in the frame slot it names)"
            raise ProtocolError(
                ErrorCode.SHAPE,
                f"an observation{where} carries exactly the arrays {sorted(expected)} (and "
                f"optionally 'teleop'); got {sorted(names)}",
            )
        images: dict[str, np.ndarray]
        if slot is not None:
            images = slot_frames(slot, session, self._camera_names)
        else:
            images = camera_frames(arrays, self.spec)
        state = float_vector(arrays["state"], "state", self._state_range, self.spec.joint_names)
        teleop = None
        if "teleop" in arrays:
            teleop = float_vector(
                arrays["teleop"], "teleop", self._teleop_range, self.spec.joint_names
            ).copy()
        return images, state, teleop


def check_clock(session: Session, time_ns: int) -> None:
    """An observation's time_ns is the driver's monotonic clock: never 0, never earlier than
    the session's last observation that the clock estimate used."""
    if time_ns == 0:
        raise ProtocolError(
            ErrorCode.CLOCK,
            "obs time_ns is 0; stamp each observation with the driver's CLOCK_MONOTONIC in "
            "nanoseconds (protocol section 6)",
        )
    if time_ns < session.last_driver_time_ns:
        session.count("clock_backwards")
        raise ProtocolError(
            ErrorCode.CLOCK,
            f"obs time_ns {time_ns} is earlier than this session's previous observation "
            f"({session.last_driver_time_ns}); a monotonic clock never goes back, so the "
            "observation was refused (a driver that restarted says hello again)",
        )


def slot_frames(slot: dict[str, Any], session: Session, camera_names: Sequence[str]) -> SlotFrames:
    """The frames of an observation written in place: the slot must be complete (even
    generation) and hold the generation the driver named, or the driver is still writing
    it; from here on it is the daemon's until the driver writes it again, which the
    generation check after inference catches (controller.feed.in_process_feed)."""
    ring = session.frame_ring
    if ring is None:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            "obs.frame_slot names a frame slot, but this session has no frame ring: ask "
            "for one with hello.frames_in_place over an ipc:// endpoint, or send the frames",
        )
    index, generation = slot.get("index"), slot.get("generation")
    if (
        set(slot) != {"index", "generation"}
        or not isinstance(index, int)
        or not isinstance(generation, int)
        or isinstance(index, bool)
        or isinstance(generation, bool)
        or not 0 <= index < ring.count
        or not 0 <= generation < 2**63  # the slot header's int64
    ):
        raise ProtocolError(
            ErrorCode.MALFORMED,
            f"obs.frame_slot must be a map of 'index' (0 to {ring.count - 1}) and "
            "'generation' (an integer from 0 to 2**63 - 1)",
        )
    frames = SlotFrames(ring, index, generation, camera_names)  # held from here
    current = ring.generation(index)
    if current == generation and generation % 2 == 0:
        return frames
    if current > generation and generation % 2 == 0:
        # The driver has written the slot again since: this message waited in the socket
        # while the ring came round, and a newer observation follows it.
        raise Superseded
    session.count("frame_slot_refused")
    raise ProtocolError(
        ErrorCode.FRAME_SLOT,
        f"frame slot {index} holds generation {current}, not {generation} as the "
        "observation says: the driver sent it before it had finished writing it; write "
        "the slot (frame_buffers, or send_observation's copy), then send",
    )


def camera_frames(arrays: dict[str, np.ndarray], spec: PolicySpec) -> dict[str, np.ndarray]:
    """Each of the spec's cameras: a uint8 frame of its shape."""
    images = {}
    for camera in spec.cameras:
        frame = arrays[camera.name]
        if frame.dtype != np.uint8 or frame.shape != camera.shape:
            raise ProtocolError(
                ErrorCode.SHAPE,
                f"camera {camera.name!r} must be uint8 of shape {list(camera.shape)}, got "
                f"{frame.dtype} {list(frame.shape)}",
            )
        images[camera.name] = frame
    return images


def float_vector(
    array: np.ndarray,
    name: str,
    bounds: tuple[np.ndarray, np.ndarray],
    joint_names: Sequence[str],
) -> np.ndarray:
    """A finite float32 vector of the bounds' length within them (state, teleop)."""
    low, high = bounds
    size = len(low)
    if array.dtype.kind != "f" or array.shape != (size,):
        raise ProtocolError(
            ErrorCode.SHAPE,
            f"{name!r} must be float32 or float64 of shape [{size}], got {array.dtype} "
            f"{list(array.shape)}",
        )
    # Cast first: a float64 beyond float32's range would become Inf after the check.
    with np.errstate(over="ignore", invalid="ignore"):
        vector = array.astype(np.float32, copy=False)
    if not np.isfinite(vector).all():
        raise ProtocolError(
            ErrorCode.NON_FINITE,
            f"{name!r} contains NaN, Inf or values beyond float32's range; the observation "
            "was refused",
        )
    outside = (vector < low) | (vector > high)
    if outside.any():
        i = int(np.argmax(outside))
        joints = joint_names
        label = f" ({joints[i]})" if name == "teleop" or len(joints) == size else ""
        what = "the policy represents after normalization" if name == "state" else "allowed"
        raise ProtocolError(
            ErrorCode.OUT_OF_RANGE,
            f"{name}[{i}]{label} is {float(vector[i]):.6g}, outside [{float(low[i]):.6g}, "
            f"{float(high[i]):.6g}], the range {what}; the observation was refused",
        )
    return vector
