"""A driver's connection to the daemon, which TempoClient (controller.wire.client) owns: a
fresh DEALER socket for each hello, the hello/welcome handshake, the frame ring the welcome
offers, the loop that takes the daemon's messages off the socket (the session's actions and
holds go to the client's CommandInbox), and reconnecting when the daemon restarts (an
`unknown_session` error) or falls silent. Until a new `welcome` nothing from an earlier session
is acted on.

Also `checked_task`, the check of a robot's task as the daemon will make it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from controller.errors import DaemonUnavailable, ErrorCode, HandshakeRefused, ProtocolError
from controller.wire.commands import ClientCounters, CommandInbox
from controller.wire.curve import ClientKeys
from controller.wire.declared_robot import DeclaredRobot
from controller.wire.frame_ring_writer import FrameRingWriter
from controller.wire.handshake_watch import HandshakeWatch, no_answer
from controller.wire.header_schema import check_task
from controller.wire.protocol import DEFAULT_LIMITS, Message, decode, encode
from controller.wire.sockets import configure_common

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Welcome:
    """What the daemon's welcome says: the session, its control rate, the spec and limits."""

    session: str
    control_hz: float
    spec: dict[str, Any]
    limits: dict[str, list[float]]


class ClientConnection:
    def __init__(
        self,
        endpoint: str,
        robot: str,
        declared: DeclaredRobot,
        *,
        task: str | None,
        policy: str | None,
        frames_in_place: bool | None,
        lockstep: bool = False,
        keys: ClientKeys | None,
        context: zmq.Context,
        counters: ClientCounters,
        inbox: CommandInbox,
        handshake_timeout_ns: int,
        silence_reconnect_ns: int,
    ) -> None:
        """declared: the robot its hello declares; task: already checked (checked_task);
        counters and inbox: the client's, which this connection counts and delivers into."""
        self.endpoint = endpoint
        self.robot = robot
        self._declared = declared
        self.task = task
        self.policy = policy
        self.frames_in_place = frames_in_place
        self.lockstep = lockstep
        self._ask_in_place = frames_in_place is True or (
            frames_in_place is None and endpoint.startswith("ipc://")
        )
        self._keys = keys
        self.context = context
        self._counters = counters
        self._inbox = inbox
        self.handshake_timeout_ns = handshake_timeout_ns
        self.silence_reconnect_ns = silence_reconnect_ns
        self.welcome: Welcome | None = None
        # The daemon's frame ring for this session (frames in place), once welcomed.
        self.frames: FrameRingWriter | None = None
        self._socket: zmq.Socket | None = None
        self._watch: HandshakeWatch | None = None  # why ZeroMQ's own handshake failed, if it did
        self._seq = 0
        self._last_heard_ns = 0
        self._hello_sent_ns = 0

    @property
    def seq(self) -> int:
        """The sequence number of the last message sent (0 before any)."""
        return self._seq

    def say_task(self, task: str) -> None:
        """The robot's task (checked) from now on: the next hello says it."""
        self.task = task

    # -- the handshake ------------------------------------------------------------------------

    def connect(self, task: str | None = None) -> Welcome:
        """Handshake, waiting up to the handshake timeout. Raises HandshakeRefused (also when
        the daemon's CurveZMQ security refused this driver's keys, or their absence) or
        DaemonUnavailable. `task` (or the one given before): the robot's task, for a policy
        that reads a text prompt; a reconnection says it again. ValueError, before sending,
        for a blank task or one over 1,000 bytes of UTF-8."""
        if task is not None:
            self.task = checked_task(task, "hello")
        self._send_hello()
        deadline = time.monotonic_ns() + self.handshake_timeout_ns
        while self.welcome is None:
            refused = self._watch.failure() if self._watch is not None else None
            if refused is not None:
                raise HandshakeRefused("security", refused)
            remaining_ms = (deadline - time.monotonic_ns()) // 1_000_000
            if remaining_ms <= 0:
                timeout_s = self.handshake_timeout_ns / 1e9
                raise DaemonUnavailable(no_answer(self.endpoint, timeout_s, self._keys is not None))
            self.pump(min(remaining_ms, 50), raise_refusal=True)  # 50: look at the watch too
        return self.welcome

    @property
    def connected(self) -> bool:
        return self.welcome is not None

    def _send_hello(self) -> None:
        """A fresh socket each time, so nothing queued for an old daemon survives."""
        self._close_socket()
        self._socket = self.context.socket(zmq.DEALER)
        configure_common(self._socket, DEFAULT_LIMITS)
        if self._keys is not None:
            self._keys.apply(self._socket)
        self._watch = HandshakeWatch(self._socket, self.endpoint, self._keys is not None)
        self._socket.connect(self.endpoint)
        self.welcome = None
        self._inbox.clear()
        self._hello_sent_ns = time.monotonic_ns()
        self._last_heard_ns = self._hello_sent_ns
        self._close_ring()
        fields: dict[str, Any] = {"spec": self._declared.spec}
        if self._ask_in_place:
            fields["frames_in_place"] = True
        if self.lockstep:
            fields["lockstep"] = True
        if self.task is not None:
            fields["task"] = self.task
        fields.update({"policy": self.policy} if self.policy is not None else {})
        self.send("hello", fields)

    def _close_socket(self) -> None:
        if self._watch is not None:
            self._watch.close()  # before its socket
            self._watch = None
        if self._socket is not None:
            self._socket.close(linger=0)
        self._socket = None

    def _reconnect(self, why: str) -> None:
        refused = self._watch.failure() if self._watch is not None else None
        if refused is not None:  # say why, not only that nothing came
            why = f"{why}; the handshake was refused: {refused}"
            self._counters.last_error = f"handshake refused: {refused}"
        self._counters.reconnects += 1
        log.warning("reconnecting to %s: %s", self.endpoint, why)
        self._send_hello()

    def close(self) -> None:
        """Say bye (best effort) and close the socket."""
        if self._socket is None:
            return
        if self.welcome is not None:
            self.send("bye", {"session": self.welcome.session})
        self._close_socket()
        self.welcome = None
        self._close_ring()

    def _close_ring(self) -> None:
        if self.frames is not None:
            self.frames.close()
        self.frames = None

    # -- the socket ---------------------------------------------------------------------------

    def send(
        self, kind: str, fields: dict[str, Any], arrays: Mapping[str, np.ndarray] | None = None
    ) -> int:
        """Send one message of this robot, as it is (no checks: the client made them); its
        sequence number. Dropped and counted when the socket's queue is full."""
        self._seq += 1
        frames = encode(
            kind,
            robot=self.robot,
            seq=self._seq,
            time_ns=time.monotonic_ns(),
            fields=fields,
            arrays=arrays,
        )
        if self._socket is None:
            raise DaemonUnavailable("the client is closed; create a new one or call connect()")
        try:
            self._socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._counters.dropped_observations += 1
        return self._seq

    def pump(self, timeout_ms: int, raise_refusal: bool) -> None:
        """Wait up to `timeout_ms` for a message, then take every one queued. raise_refusal:
        a refused hello raises HandshakeRefused (else it is logged and counted)."""
        if self._socket is None:
            return
        if timeout_ms > 0 and not self._socket.poll(timeout_ms):
            return
        while True:
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                message = decode(frames)
            except ProtocolError as exc:
                self._counters.errors += 1
                self._counters.last_error = f"undecodable message from the daemon: {exc}"
                continue
            self._last_heard_ns = time.monotonic_ns()
            self._on_message(message, raise_refusal)

    def _on_message(self, message: Message, raise_refusal: bool) -> None:
        header = message.header
        if message.kind == "welcome":
            self._inbox.new_session()
            offer = header.get("frame_ring")
            if offer is not None:
                self.frames = FrameRingWriter.attach(
                    offer, self._declared.camera_shapes, bool(self.frames_in_place), self._counters
                )
            elif self.frames_in_place:
                raise HandshakeRefused(
                    ErrorCode.FRAME_SLOT.value,
                    "the daemon offers no frame ring (frames in place need an ipc:// endpoint "
                    "on this host); pass frames_in_place=None or False",
                )
            self.welcome = Welcome(
                header["session"],
                float(header["control_hz"]),
                header["spec"],
                header.get("limits", {}),
            )
            return
        if message.kind == "error":
            code, text = header["code"], header["message"]
            self._counters.errors += 1
            self._counters.error_codes[code] = self._counters.error_codes.get(code, 0) + 1
            self._counters.last_error = f"{code}: {text}"
            if (
                self.welcome is None
                and self._ask_in_place
                and self.frames_in_place is None
                and code == ErrorCode.MALFORMED.value
                and "frames_in_place" in text
            ):
                # A daemon older than frames in place refuses the hello field: ask again
                # without it, and send frames through the socket.
                log.info("the daemon at %s predates frames in place; frames go through the "
                         "socket", self.endpoint)  # fmt: skip
                self._ask_in_place = False
                self._send_hello()
                return
            if self.welcome is None and code != ErrorCode.UNKNOWN_SESSION.value:
                if raise_refusal:
                    raise HandshakeRefused(code, text)
                log.error("handshake refused (%s): %s", code, text)
            elif code == ErrorCode.UNKNOWN_SESSION.value:
                self._reconnect("the daemon does not know our session (it restarted?)")
            return
        if self.welcome is None or message.session != self.welcome.session:
            return  # from an earlier session: never act on it
        self._inbox.take(message, self.welcome.session)

    def keep_alive(self) -> None:
        """Say hello again, on a fresh socket, when no welcome came within the handshake
        timeout or the daemon has been silent for `silence_reconnect_ns`."""
        now = time.monotonic_ns()
        if self.welcome is None:
            if self._socket is not None and now - self._hello_sent_ns > self.handshake_timeout_ns:
                self._reconnect("no welcome within the handshake timeout")
        elif now - self._last_heard_ns > self.silence_reconnect_ns:
            self._reconnect(f"nothing from the daemon for {self.silence_reconnect_ns / 1e9:.1f} s")


def checked_task(task: str | None, kind: str) -> str | None:
    """The task as the daemon accepts it (ValueError with the daemon's sentence otherwise)."""
    if task is None:
        return None
    if not isinstance(task, str):
        raise ValueError(f"the task must be a string, not {type(task).__name__}")
    try:
        check_task(task, kind, episode_start=True)
    except ProtocolError as exc:
        raise ValueError(str(exc)) from None
    return task
