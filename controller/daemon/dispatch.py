"""Incoming messages: decode, check, and route them to sessions (runs on the loop thread).

A bad message is answered with an `error` (a code and one sentence) and counted; it never raises
out of here, so one misbehaving driver cannot disturb the others.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from controller.action.pipeline import ActionPipeline
from controller.config_sections import InferenceConfig, ServerConfig
from controller.daemon.connection_budget import ConnectionBudget
from controller.daemon.handshake import (
    check_driver_spec,
    check_robot_name,
    parse_driver_limits,
    spec_to_wire,
)
from controller.daemon.observation_checks import ObservationChecker, Superseded, check_clock
from controller.daemon.refusals import Refusals, Sender
from controller.daemon.session import PendingObservation, Session, StateHistory
from controller.daemon.tick_messages import TickHeaders
from controller.errors import ErrorCode, ProtocolError, SpecMismatchError
from controller.link.frame_slots import FrameSlots
from controller.link.inference_feed import InferenceFeed
from controller.observe.telemetry import PREPROCESS, Telemetry
from controller.wire.header_schema import DRIVER_KINDS
from controller.wire.protocol import DEFAULT_LIMITS, Limits, Message, decode
from policies.base import PolicySpec

log = logging.getLogger(__name__)

# Slots of a same-host driver's frame ring (frames in place). The daemon holds a slot from the
# observation naming it until it drops that observation (served or superseded); the driver
# writes the free ones round robin, and sends frames on the socket when none is free.
DRIVER_RING_SLOTS = 4
# (identity, packed header frame, array or None) -> sent? (RouterTransport.send_prepared)
PreparedSender = Callable[[bytes, Any, Any], bool]
# driver's joint limits from hello -> that robot's action pipeline (raises ValueError if invalid)
PipelineFactory = Callable[[dict[str, tuple[float, float]]], ActionPipeline]


class Dispatcher:
    def __init__(
        self,
        spec: PolicySpec,
        worker: InferenceFeed,
        send: Sender,
        current_step: Callable[[], int],
        new_pipeline: PipelineFactory,
        *,
        control_hz: float,
        server: ServerConfig,
        inference: InferenceConfig,
        limits: Limits = DEFAULT_LIMITS,
        telemetry: Telemetry | None = None,
        send_prepared: PreparedSender | None = None,
        frames_in_place: bool = False,
    ) -> None:
        """`send_prepared`: the tick's allocation-free send of packed headers; without it the
        tick's messages go through `send` like every other (slower, allocating).
        `frames_in_place`: a driver may ask for a shared-memory frame ring in hello (the
        daemon's endpoint is ipc://, so drivers are on this host)."""
        self.control_hz = control_hz
        self.server = server
        self.inference = inference
        self.new_pipeline = new_pipeline
        self.spec = spec
        self.worker = worker
        self.send = send
        self.send_prepared = send_prepared
        self.frames_in_place = frames_in_place
        self.current_step = current_step
        self.limits = limits
        self.sessions: dict[str, Session] = {}
        # The sessions as a tuple, rebuilt when one opens or closes: the tick iterates it
        # without building a list each time (and a session closed mid-tick is harmless).
        self.session_list: tuple[Session, ...] = ()
        self.by_identity: dict[bytes, str] = {}
        self.refusals = Refusals(send, self.sessions)
        self.errors = self.refusals.errors  # per error code, for status
        # Guard interventions of sessions that have ended, so totals survive a disconnect.
        self.closed_guard_counts: collections.Counter[str] = collections.Counter()
        self.messages = 0
        # A flood from one connection is dropped unread past its budget: a driver sends about
        # one observation per tick; four per tick and a hundred more a second is plenty.
        self.budget = ConnectionBudget(max_messages=int(4 * control_hz) + 100)
        # Observation checks, timed as `preprocess` (the method itself when telemetry is off).
        check = ObservationChecker(spec).check
        self._check = check if telemetry is None else telemetry.section(PREPROCESS)(check)

    # -- entry point -----------------------------------------------------------------------

    def handle(self, identity: bytes, frames: list[Any], now_ns: int) -> None:
        self.messages += 1
        if not self.budget.admit(identity, now_ns):
            return  # this connection sent too much, or too much junk, just now: dropped unread
        message: Message | None = None
        errors = self.refusals.sent
        try:
            # A kind only the daemon sends is refused as such before its fields are checked.
            message = decode(frames, self.limits, kinds=DRIVER_KINDS)
            self._handlers[message.kind](self, identity, message, now_ns)
        except ProtocolError as exc:
            self.refusals.reply(identity, exc.code, str(exc), message, exc.reply_version)
        except SpecMismatchError as exc:
            self.refusals.reply(identity, exc.code, str(exc), message)
        except Exception:  # a bug of ours: log it here, tell the driver only that it happened
            log.exception("internal error while handling a message")
            self.refusals.reply(
                identity,
                ErrorCode.INTERNAL,
                "the daemon failed on this message; see its log",
                message,
            )
        if self.refusals.sent != errors and self.budget.refused(identity, now_ns):
            log.warning(
                "a connection caused more than %d refusals within a second; its messages are "
                "dropped unread for the rest of that second",
                self.budget.max_refusals,
            )

    # -- handlers --------------------------------------------------------------------------

    def _hello(self, identity: bytes, message: Message, now_ns: int) -> None:
        check_robot_name(message.header["robot"])
        check_driver_spec(message.header["spec"], self.spec)
        old = self.by_identity.get(identity)
        if old is not None:
            self.close(old, "the driver said hello again")
        if len(self.sessions) >= self.server.max_robots:
            self._free_an_idle_slot(now_ns)
        if len(self.sessions) >= self.server.max_robots:
            raise ProtocolError(
                ErrorCode.FULL,
                f"this daemon already serves {len(self.sessions)} robots "
                f"(server.max_robots); disconnect one or raise the limit",
            )
        robot = message.header["robot"]
        driver_limits = parse_driver_limits(message.header["spec"])
        try:
            session = self._new_session(identity, robot, now_ns, driver_limits)
        except ValueError as exc:  # limits naming unknown joints, or with lower > upper
            raise ProtocolError(ErrorCode.NOT_ALLOWED, f"hello spec.limits: {exc}") from None
        fields: dict[str, Any] = {
            "session": session.id,
            "control_hz": float(self.control_hz),
            "spec": spec_to_wire(self.spec),
            "limits": {
                name: list(bounds) for name, bounds in session.pipeline.guards.limits.items()
            },
        }
        if message.header.get("frames_in_place") and self.frames_in_place:
            try:
                session.frame_ring = FrameSlots.create(self.spec, DRIVER_RING_SLOTS)
            except OSError as exc:  # /dev/shm full: this robot's frames come on the socket
                log.warning("robot %s gets no frame ring: %s", robot, exc)
        if session.frame_ring is not None:
            fields["frame_ring"] = {
                "path": str(session.frame_ring.path),
                "slots": session.frame_ring.count,
                "parts": [
                    [name, list(shape), dtype] for name, shape, dtype in session.frame_ring.parts
                ],  # fmt: skip
            }
        self.sessions[session.id] = session
        self.session_list = tuple(self.sessions.values())
        self.by_identity[identity] = session.id
        log.info(
            "robot %s connected (session %s%s)",
            robot,
            session.id,
            ", frames in place" if session.frame_ring is not None else "",
        )
        self.send(identity, "welcome", seq=0, fields=fields)

    def _free_an_idle_slot(self, now_ns: int) -> None:
        """Every slot is taken: close the session that has sent no observation for longest, if
        that is `server.idle_when_full_s` or more (sessions that only send teleop, or only said
        hello, must not keep a real driver out)."""
        idlest = min(self.sessions.values(), key=lambda s: s.idle_since_ns)
        if now_ns - idlest.idle_since_ns >= self.server.idle_when_full_s * 1e9:
            self.close(idlest.id, "no observation while every slot was taken")

    def _new_session(
        self,
        identity: bytes,
        robot: str,
        now_ns: int,
        driver_limits: dict[str, tuple[float, float]],
    ) -> Session:
        session_id = uuid.uuid4().hex
        return Session(
            id=session_id,
            identity=identity,
            robot=robot,
            spec=self.spec,
            created_ns=now_ns,
            last_seen_ns=now_ns,
            pipeline=self.new_pipeline(driver_limits),
            history=StateHistory(self.spec.state_history, self.spec.state_size),
            tick_headers=TickHeaders(session_id, self.spec.action_dim),
        )

    # -- the tick's messages ----------------------------------------------------------------

    def send_action(
        self, session: Session, step: int, obs_seq: int, deadline_ns: int, command: np.ndarray
    ) -> bool:
        """One `action` to the session's robot (from the loop's tick; see tick_messages)."""
        headers = session.tick_headers
        if self.send_prepared is not None and headers is not None:
            header = headers.action(
                session.send_seq, time.monotonic_ns(), step, obs_seq, deadline_ns
            )
            if header is not None:
                return self.send_prepared(session.identity, header, command)
        fields = {"session": session.id, "step": step, "obs_seq": obs_seq}
        fields["deadline_ns"] = deadline_ns
        return self.send(
            session.identity, "action", seq=session.send_seq, fields=fields,
            arrays={"action": command},
        )  # fmt: skip

    def send_hold(self, session: Session, step: int, reason: str) -> bool:
        headers = session.tick_headers
        if self.send_prepared is not None and headers is not None:
            header = headers.hold(session.send_seq, time.monotonic_ns(), step, reason)
            if header is not None:
                return self.send_prepared(session.identity, header, None)
        fields = {"session": session.id, "step": step, "reason": reason}
        return self.send(session.identity, "hold", seq=session.send_seq, fields=fields)

    def _session_of(self, identity: bytes, message: Message) -> Session:
        session = self.sessions.get(message.session or "")
        if session is None or session.identity != identity:
            raise ProtocolError(
                ErrorCode.UNKNOWN_SESSION,
                "unknown session (the daemon may have restarted); send hello again",
            )
        return session

    def _obs(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self._session_of(identity, message)
        session.last_seen_ns = now_ns
        if message.seq <= session.last_obs_seq:
            session.counters["stale_observations"] += 1
            raise ProtocolError(
                ErrorCode.STALE,
                f"observation seq {message.seq} is not newer than {session.last_obs_seq}; dropped",
            )
        try:
            images, state, teleop = self._check(message, session)
        except Superseded:
            session.counters["observations_superseded"] += 1
            return
        time_ns = message.header["time_ns"]
        check_clock(session, time_ns)
        session.last_obs_seq = message.seq
        session.last_observation_ns = now_ns
        if not session.record_clock_offset(time_ns, now_ns):
            session.counters["clock_jumps"] += 1
        session.counters["observations"] += 1
        if message.header.get("episode_start"):
            session.start_episode()  # this robot only: plan, history, memory, chunks in flight
        resume = bool(message.header.get("resume"))
        if session.pipeline.on_observation(state, teleop, now_ns, resume):
            # Back from a watchdog hold or stop: chunks planned before it are stale.
            session.chunks.clear()
            session.counters["plans_dropped_after_watchdog"] += 1
        step = self.current_step()
        session.pending = PendingObservation(
            step=step,
            obs_seq=message.seq,
            received_ns=now_ns,
            images=images,
            state_window=session.history.push(state),
        )
        self.submit_if_due(session, step)

    def submit_if_due(self, session: Session, step: int) -> None:
        """Ask the policy at most every `query_period` steps, always on the newest observation,
        with the robot's context as it is now (its plan from the observation's step on)."""
        if step - session.last_request_step < self.inference.query_period:
            return
        request = session.request()
        if request is None:  # nothing new since the last request
            return
        session.last_request_step = step
        self.worker.submit(session, request)

    def _teleop(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self._session_of(identity, message)
        session.last_seen_ns = now_ns
        joints = message.header["joints"]
        if not all(isinstance(j, str) for j in joints):
            raise ProtocolError(ErrorCode.MALFORMED, "teleop.joints must be a list of joint names")
        teleop = session.pipeline.teleop
        try:
            teleop.set_owned(joints)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.NOT_ALLOWED, str(exc)) from None
        log.info("robot %s: operator now owns %s", session.robot, list(teleop.owned))

    def _bye(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self._session_of(identity, message)
        self.close(session.id, "the driver said bye")

    _handlers: dict[str, Callable[[Dispatcher, bytes, Message, int], None]] = {
        "hello": _hello,
        "obs": _obs,
        "teleop": _teleop,
        "bye": _bye,
    }

    # -- lifecycle -------------------------------------------------------------------------

    def peer_gone(self, identity: bytes) -> None:
        session_id = self.by_identity.get(identity)
        if session_id is not None:
            self.close(
                session_id,
                "connection lost: the driver closed it or was killed, or sent a message larger "
                "than the policy's spec allows (ZeroMQ drops those)",
            )

    def close(self, session_id: str, reason: str) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            return
        session.closed = True
        # Counted before the session leaves `sessions`: status, read from another thread,
        # never misses its guard interventions (at worst counts them twice for an instant).
        self.closed_guard_counts.update(session.pipeline.guards.counters)
        del self.sessions[session_id]
        self.session_list = tuple(self.sessions.values())
        if self.by_identity.get(session.identity) == session_id:
            del self.by_identity[session.identity]
        if session.frame_ring is not None:
            # Unlinked now; the mapping lasts while an inference in flight still reads it.
            session.frame_ring.close()
        log.info("robot %s disconnected (%s)", session.robot, reason)
