"""The sessions a daemon serves: opened on hello (check_name_free, make_room, then open), found
by session id (and the identity that opened it), closed on bye, a lost connection, a time-out
or to make room; at most `server.max_robots` at once.

A robot's name is one session at a time, across every policy: a hello naming a robot another
connection's live session holds is refused, so no second driver can act as a connected robot
(its observations would go into that robot's recording). A holder that has sent no observation
for `server.session_timeout_s` is stale (its driver crashed, and restarts): it is replaced.

The tick iterates `live`, a tuple rebuilt when a session opens or closes (no list built per
tick; a session closed mid-tick is harmless). Status reads `sessions` from another thread.
"""

from __future__ import annotations

import collections
import logging
import uuid
from collections.abc import Callable

from controller.action.pipeline import ActionPipeline
from controller.config_sections import ServerConfig
from controller.daemon.session import Session
from controller.daemon.tick_messages import TickHeaders
from controller.errors import ErrorCode, ProtocolError
from controller.observe.log_safety import TEXT_CHARS, shown
from controller.process_protocol.frame_slots import FrameSlots
from controller.record.queue import PolicyRecording
from controller.record.tick_observer import NOT_RECORDED
from policies.base import PolicySpec

log = logging.getLogger(__name__)

# Slots of a same-host driver's frame ring (frames in place). The daemon holds a slot from the
# observation naming it until it drops that observation (served or superseded); the driver
# writes the free ones round robin, and sends frames on the socket when none is free.
DRIVER_RING_SLOTS = 4
# driver's joint limits from hello -> that robot's action pipeline (raises ValueError if invalid)
PipelineFactory = Callable[[dict[str, tuple[float, float]]], ActionPipeline]
# robot name -> the registry and live session holding it, among every policy's (or None)
RobotHolder = Callable[[str], "tuple[SessionRegistry, Session] | None"]


class SessionRegistry:
    def __init__(
        self,
        spec: PolicySpec,
        new_pipeline: PipelineFactory,
        server: ServerConfig,
        *,
        frames_in_place: bool = False,
        recorder: PolicyRecording | None = None,
        occupied: Callable[[], int] | None = None,
        holder: RobotHolder | None = None,
    ) -> None:
        """`frames_in_place`: a driver may ask for a shared-memory frame ring in hello (the
        daemon's endpoint is ipc://, so drivers are on this host); `recorder`: the flight
        recorder each session records into (None: off); `occupied`: the sessions that count
        against `server.max_robots` (a daemon of several policies: all of theirs; None: these);
        `holder`: who holds a robot's name (several policies: among all of theirs; None: here)."""
        self.spec = spec
        self.new_pipeline = new_pipeline
        self.max_robots = server.max_robots
        self.timeout_ns = int(server.session_timeout_s * 1e9)
        self.idle_when_full_ns = server.idle_when_full_s * 1e9
        self.frames_in_place = frames_in_place
        self.recorder = recorder
        self.occupied = occupied or (lambda: len(self.sessions))
        self.sessions: dict[str, Session] = {}
        self.live: tuple[Session, ...] = ()
        self._by_identity: dict[bytes, str] = {}
        self._by_robot: dict[str, str] = {}  # robot name -> its session's id
        self.holder = holder or self.holding
        # Guard interventions of sessions that have ended, so totals survive a disconnect.
        self.closed_guard_counts: collections.Counter[str] = collections.Counter()

    def holding(self, robot: str) -> tuple[SessionRegistry, Session] | None:
        """This registry and the session holding `robot`'s name here, if any."""
        session = self.sessions.get(self._by_robot.get(robot, ""))
        return None if session is None else (self, session)

    def check_name_free(self, robot: str, identity: bytes, now_ns: int) -> None:
        """Before a hello naming `robot` opens a session: ProtocolError while another
        connection's live session holds the name; a stale holder is closed instead."""
        found = self.holder(robot)
        if found is None:
            return
        registry, session = found
        if session.identity == identity:
            return  # the same connection said hello again: make_room (or leave) closes it
        idle_ns = now_ns - session.idle_since_ns
        if idle_ns > registry.timeout_ns:
            registry.close(
                session.id,
                "another connection said hello as this robot, and this session had sent no "
                "observation within server.session_timeout_s",
            )
            return
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"robot {robot} is connected already, in another session; a robot's name is one "
            "session at a time: give this driver its own name, or end the other session (bye, "
            f"or no observation for server.session_timeout_s, {registry.timeout_ns / 1e9:g} s)",
        )

    def make_room(self, identity: bytes, now_ns: int) -> None:
        """Before a driver's hello opens a session: its earlier session, if any, is closed, and
        when every slot is taken the idlest is freed if idle long enough; else ProtocolError."""
        old = self._by_identity.get(identity)
        if old is not None:
            self.close(old, "the driver said hello again")
        if self.occupied() >= self.max_robots and self.sessions:
            self._free_an_idle_slot(now_ns)  # (only among this policy's robots)
        if self.occupied() >= self.max_robots:
            raise ProtocolError(
                ErrorCode.FULL,
                f"this daemon already serves {self.occupied()} robots "
                f"(server.max_robots); disconnect one or raise the limit",
            )

    def open(
        self,
        identity: bytes,
        robot: str,
        now_ns: int,
        driver_limits: dict[str, tuple[float, float]],
        frame_ring: bool = False,
        lockstep: bool = False,
    ) -> Session:
        """A new session for a driver's hello, after `make_room`; raises ProtocolError when
        the driver's limits are invalid. `frame_ring`: the driver asked for frames in place;
        `lockstep`: its world waits for each action (Session)."""
        try:
            pipeline = self.new_pipeline(driver_limits)
        except ValueError as exc:  # limits naming unknown joints, or with lower > upper
            raise ProtocolError(ErrorCode.NOT_ALLOWED, f"hello spec.limits: {exc}") from None
        ring = None
        if frame_ring and self.frames_in_place:
            try:
                ring = FrameSlots.create(self.spec, DRIVER_RING_SLOTS)
            except OSError as exc:  # no memory for it: this robot's frames come on the socket
                log.warning("robot %s gets no frame ring: %s", shown(robot), exc)
        session_id = uuid.uuid4().hex
        session = Session(
            session_id,
            identity,
            robot,
            self.spec,
            now_ns,
            pipeline,
            tick_headers=TickHeaders(session_id, self.spec.action_dim),
            frame_ring=ring,
            lockstep=lockstep,
            recording=NOT_RECORDED
            if self.recorder is None
            else self.recorder.robot(robot, session_id),
        )
        self.sessions[session_id] = session
        self.live = tuple(self.sessions.values())
        self._by_identity[identity] = session_id
        self._by_robot[robot] = session_id
        log.info(
            "robot %s connected (session %s%s)",
            shown(robot),
            session_id,
            ", frames in place" if ring is not None else "",
        )
        return session

    def _free_an_idle_slot(self, now_ns: int) -> None:
        """Every slot is taken: close the session that has sent no observation for longest, if
        that is `server.idle_when_full_s` or more (sessions that only send teleop, or only said
        hello, must not keep a real driver out)."""
        idlest = min(self.sessions.values(), key=lambda s: s.idle_since_ns)
        if now_ns - idlest.idle_since_ns >= self.idle_when_full_ns:
            self.close(idlest.id, "no observation while every slot was taken")

    def serves(self, identity: bytes) -> bool:
        """Whether that connection has a session here."""
        return identity in self._by_identity

    def leave(self, identity: bytes, reason: str) -> None:
        """That connection's session here, if any, ends (it said hello to another policy)."""
        session_id = self._by_identity.get(identity)
        if session_id is not None:
            self.close(session_id, reason)

    def find(self, session_id: str | None, identity: bytes) -> Session:
        """The live session of that id opened by that connection; else ProtocolError."""
        session = self.sessions.get(session_id or "")
        if session is None or session.identity != identity:
            raise ProtocolError(
                ErrorCode.UNKNOWN_SESSION,
                "unknown session (the daemon may have restarted); send hello again",
            )
        return session

    def expire(self, now_ns: int) -> None:
        """Close the sessions without an observation for `server.session_timeout_s` (teleop or
        anything else alone does not keep one alive)."""
        for session in self.live:
            if now_ns - session.idle_since_ns > self.timeout_ns:
                self.close(session.id, "no observation within server.session_timeout_s")

    def peer_gone(self, identity: bytes) -> None:
        """The transport lost a connection: its session ends."""
        session_id = self._by_identity.get(identity)
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
        # Counted before the session leaves `sessions`: status, read from another thread,
        # never misses its guard interventions (at worst counts them twice for an instant).
        self.closed_guard_counts.update(session.pipeline.guards.counters)
        session.close()
        del self.sessions[session_id]
        self.live = tuple(self.sessions.values())
        if self._by_identity.get(session.identity) == session_id:
            del self._by_identity[session.identity]
        if self._by_robot.get(session.robot) == session_id:
            del self._by_robot[session.robot]
        log.info("robot %s disconnected (%s)", shown(session.robot), shown(reason, TEXT_CHARS))
