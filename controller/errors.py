"""Every error a Tempo user can meet, in one place.

    TempoError                      base; its message is one sentence: what is wrong, what to do
    ├── ConfigError                 a config file or --set override is invalid (names both)
    ├── CheckpointError             a checkpoint directory is missing, corrupt or unsupported
    ├── SpecMismatchError           the driver's spec disagrees with the policy's (handshake)
    ├── ProtocolError               a message broke the wire protocol; carries a wire `code`
    │   └── (codes: see ErrorCode)
    ├── HandshakeRefused            client side: the daemon answered `hello` with `error`
    ├── DaemonUnavailable           client side: no answer from the daemon within the timeout
    ├── ObservationError            client side: an observation does not fit the declared spec
    ├── PolicyError                 the policy failed to produce a usable chunk
    │   └── InputFault              ... because of the robot's observation (the reference fails too)
    ├── DeviceError                 tempo drive: a LeRobot robot's or leader arm's own call failed
    ├── SecurityError               a bind or key setup that would expose the robot is refused
    └── BindError                   a socket cannot bind its endpoint (in use, bad path, ...)

Only `ProtocolError` and `SpecMismatchError` travel on the wire, as an `error` message with a code
and the sentence; nothing else (and never a traceback) is sent to a client.

This module imports nothing heavy: drivers import it through `controller.wire.client`.
"""

from __future__ import annotations

from enum import Enum


class ErrorCode(str, Enum):
    """Codes carried by `error` messages; drivers switch on these, people read the sentence."""

    MALFORMED = "malformed"  # not decodable: bad msgpack, bad header, bad frames
    VERSION = "version"  # protocol version this daemon does not speak
    NOT_ALLOWED = "not_allowed"  # a dtype, kind or size outside the allowlist or limits
    SHAPE = "shape"  # an array's shape disagrees with the session spec or its bytes
    NON_FINITE = "non_finite"  # NaN or Inf in an observation
    SPEC_MISMATCH = "spec_mismatch"  # hello refused: driver and policy disagree
    UNKNOWN_SESSION = "unknown_session"  # no such session (daemon restarted?): send hello again
    NO_SESSION = "no_session"  # a message that needs a session came before hello
    STALE = "stale"  # replayed or out-of-order sequence number
    FULL = "full"  # the daemon serves as many robots as it is configured for
    INTERNAL = "internal"  # the daemon failed; details are in its log, not on the wire
    OUT_OF_RANGE = "out_of_range"  # a state or teleop value the model cannot represent
    UNUSABLE_INPUT = "unusable_input"  # the policy's reference gives NaN or Inf for this input
    CLOCK = "clock"  # time_ns is zero or goes backwards within a session
    FRAME_SLOT = "frame_slot"  # a frame slot (frames in place) named wrongly, or written after


class TempoError(Exception):
    """Base of every error Tempo raises on purpose."""


class ConfigError(TempoError):
    """A configuration file or override is invalid."""


class CheckpointError(TempoError):
    """A checkpoint is missing, corrupt, or uses an option Tempo does not implement."""


class SpecMismatchError(TempoError):
    """The driver's robot spec does not match what the policy was trained for."""

    code = ErrorCode.SPEC_MISMATCH


class ProtocolError(TempoError):
    """A message broke the wire protocol. `code` is what goes on the wire."""

    def __init__(self, code: ErrorCode, message: str, reply_version: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        # An older protocol version the peer speaks, to answer it in: its decoder refuses ours.
        self.reply_version = reply_version


class HandshakeRefused(TempoError):
    """The daemon refused this driver's `hello`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"the daemon refused the handshake ({code}): {message}")
        self.code = code


class DaemonUnavailable(TempoError):
    """No answer from the daemon in time."""


class PolicyError(TempoError):
    """The policy could not produce a usable action chunk."""


class InputFault(PolicyError):
    """The policy's FP32 reference turns this observation into NaN or Inf as well: the input
    is at fault, not the tier serving it. The robot's observation is refused; no tier changes."""


class DeviceError(TempoError):
    """A robot's or leader arm's own call (`get_observation`, `send_action`, `get_action`)
    failed while `tempo drive` ran it: a serial port, a camera; named with the device's error."""


class SecurityError(TempoError):
    """A setup that would expose the robot to the network is refused."""


class ObservationError(TempoError, ValueError):
    """Client side: an observation does not fit the spec the driver declared (raised before
    anything is sent; the daemon would refuse it)."""


class BindError(TempoError):
    """A daemon socket cannot bind its endpoint; the sentence names it and what to do."""


def internal_error(exc: BaseException) -> str:
    """The sentence a command prints for an exception that is a bug of ours (not a TempoError):
    what it was, and a file holding the traceback (never printed at the user)."""
    import os
    import tempfile
    import time
    import traceback
    from pathlib import Path

    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = Path(tempfile.gettempdir()) / f"tempo-error-{stamp}-{os.getpid()}.txt"
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    try:
        path.write_text("".join(traceback.format_exception(exc)))
        where = f"; the traceback is in {path}"
    except Exception:  # noqa: BLE001 - the sentence must come out whatever the file does
        where = ""
    name = type(exc).__name__
    return f"internal error, a bug in Tempo ({name}: {first}){where}; please report it"
