"""Incoming messages: decode, check, and route them to sessions (runs on the loop thread).

    hello -> registry.open, `welcome`     obs -> session.take_observation, requests.submit_if_due
    teleop -> session.own_joints          bye -> registry.close
    mark -> the session's flight recording, within the recorder's budget of marks
            (controller.record.mark_budget; an operator's mark, controller.daemon.operator_marks,
            goes through keep_mark too)

A bad message is answered with an `error` (a code and one sentence) and counted; it never raises
out of here, so one misbehaving driver cannot disturb the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from controller.config import DEFAULT_POLICY_NAME
from controller.daemon.connection_budget import ConnectionBudget
from controller.daemon.handshake import (
    check_driver_spec,
    check_robot_name,
    parse_driver_limits,
    spec_to_wire,
)
from controller.daemon.observation_checks import ObservationChecker, Superseded, check_clock
from controller.daemon.prompts import Prompt, RobotPrompts
from controller.daemon.refusals import Refusals, Sender
from controller.daemon.registry import SessionRegistry
from controller.daemon.session import Session
from controller.errors import ErrorCode, ProtocolError, SpecMismatchError
from controller.feed.pending_requests import InferenceRequests
from controller.observe.log_safety import TEXT_CHARS, LineLimiter, shown
from controller.observe.telemetry import PREPROCESS, Telemetry
from controller.wire.header_schema import DRIVER_KINDS
from controller.wire.protocol import DEFAULT_LIMITS, Limits, Message, decode
from policies.base import PolicySpec

log = logging.getLogger(__name__)

# A teleop change is logged at most this often per robot (a driver may flip its mask every
# message); the changes in between are counted into the next line.
TELEOP_LOG_INTERVAL_NS = 1_000_000_000
# (policy name, identity, hello, now_ns): a hello naming another policy than the dispatcher's.
# Several policies: (the hello's policy name or None, identity, hello, now) -> its session opened
# with the policy it names, or the daemon's default (controller.daemon.lanes.Lanes.route_hello).
HelloRouter = Callable[[str | None, bytes, Message, int], None]


def unknown_policy(wanted: str, served: Iterable[str]) -> str:
    """The sentence refusing a hello that names a policy the daemon does not serve."""
    names = ", ".join(repr(name) for name in served)
    return f"this daemon serves no policy named {shown(wanted, 64)!r}; it serves {names}"


class Dispatcher:
    def __init__(
        self,
        spec: PolicySpec,
        registry: SessionRegistry,
        requests: InferenceRequests,
        refusals: Refusals,
        send: Sender,
        current_step: Callable[[], int],
        *,
        control_hz: float,
        limits: Limits = DEFAULT_LIMITS,
        telemetry: Telemetry | None = None,
        policy_name: str = DEFAULT_POLICY_NAME,
        route_hello: HelloRouter | None = None,
        admit: Callable[[int], None] | None = None,
    ) -> None:
        """`send`: the `welcome`; `refusals`: every `error` reply; `requests`: an observation
        is asked about at once when due, not at the next tick. `policy_name`: the policy this
        dispatcher's robots are served by; `route_hello`: every hello goes there, which picks
        the policy (None: this daemon serves one, and a hello naming another is refused);
        `admit(robots)`: raises ProtocolError when the policy, serving `robots` others, cannot
        take one more (admission)."""
        self.control_hz = control_hz
        self.policy_name = policy_name
        self._route_hello = route_hello
        self._admit = admit
        self.spec = spec
        self.registry = registry
        self.requests = requests
        self.send = send
        self.current_step = current_step
        self.limits = limits
        self.refusals = refusals
        self.prompts = RobotPrompts(spec)  # robots' tasks, tokenized (a prompt policy's)
        self.errors = refusals.errors  # per error code, for status
        self.messages = 0
        # A flood from one connection is dropped unread past its budgets: a driver sends about
        # one observation per tick; four per tick on average (64 at once), and four per tick
        # and a hundred more a second, is plenty. Newcomers: sixteen messages a tick in all;
        # hellos: 50 a second (8 at once) in all.
        self.budget = ConnectionBudget(
            max_messages=int(4 * control_hz) + 100, period_ns=int(round(1e9 / control_hz))
        )
        # Observation checks, timed as `preprocess` (the method itself when telemetry is off).
        check = ObservationChecker(spec).check
        self._check = check if telemetry is None else telemetry.section(PREPROCESS)(check)
        # Lines a driver can cause once per message, rate-limited (log_safety.LineLimiter).
        self._muted_lines = LineLimiter()
        self._teleop_lines = LineLimiter(TELEOP_LOG_INTERVAL_NS)

    # -- entry point -----------------------------------------------------------------------

    def handle(self, identity: bytes, frames: list[Any], now_ns: int) -> None:
        self.messages += 1
        newcomer = not self.registry.serves(identity)
        if not self.budget.admit(identity, now_ns, newcomer):
            return  # this connection (or newcomers) sent too much just now: dropped unread
        message: Message | None = None
        errors = self.refusals.sent
        try:
            # A kind only the daemon sends is refused as such before its fields are checked.
            message = decode(frames, self.limits, kinds=DRIVER_KINDS)
            holder = None if newcomer else identity
            if message.kind == "hello" and not self.budget.hello(now_ns, holder):
                return  # a hello storm: its driver says hello again (its handshake time-out)
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
            more = self._muted_lines.due("muted")
            if more is not None:
                log.warning(
                    "a connection caused more than %d refusals within a second; its messages "
                    "are dropped unread for the rest of that second%s",
                    self.budget.max_refusals,
                    f" ({more} more such connections since the last line)" if more else "",
                )

    # -- handlers --------------------------------------------------------------------------

    def _hello(self, identity: bytes, message: Message, now_ns: int) -> None:
        wanted = message.header.get("policy")
        if self._route_hello is not None:
            self._route_hello(wanted, identity, message, now_ns)
            return
        if wanted is not None and wanted != self.policy_name:
            raise ProtocolError(ErrorCode.NOT_ALLOWED, unknown_policy(wanted, [self.policy_name]))
        self.open_session(identity, message, self.check_hello(identity, message, now_ns), now_ns)

    def check_hello(self, identity: bytes, message: Message, now_ns: int) -> Prompt | None:
        """Everything that may refuse a hello to this dispatcher's policy, before anything
        changes: the robot's name (well formed, and no other live session's), its spec, its
        task, admission. The hello's prompt."""
        robot = message.header["robot"]
        check_robot_name(robot)
        check_driver_spec(message.header["spec"], self.spec)
        prompt = self.prompts.for_hello(message.header.get("task"))
        if self._admit is not None:  # a second hello of a robot replaces its session
            self._admit(len(self.registry.sessions) - self.registry.serves(identity))
        self.registry.check_name_free(robot, identity, now_ns)  # last: it may close a stale one
        return prompt

    def open_session(
        self, identity: bytes, message: Message, prompt: Prompt | None, now_ns: int
    ) -> None:
        """A session with this dispatcher's policy for a checked hello, and its welcome."""
        self.registry.make_room(identity, now_ns)
        robot = message.header["robot"]
        driver_limits = parse_driver_limits(message.header["spec"])
        in_place = bool(message.header.get("frames_in_place"))
        session = self.registry.open(
            identity,
            robot,
            now_ns,
            driver_limits,
            frame_ring=in_place,
            lockstep=bool(message.header.get("lockstep")),
        )
        session.use_prompt(prompt)
        session.recording.hello(prompt.task if prompt is not None else None)
        fields: dict[str, Any] = {
            "session": session.id,
            "control_hz": float(self.control_hz),
            "spec": spec_to_wire(self.spec),
            "limits": {
                name: list(bounds) for name, bounds in session.pipeline.guards.limits.items()
            },
        }
        ring = session.frame_ring
        if ring is not None:
            fields["frame_ring"] = {
                "path": str(ring.path),
                "slots": ring.count,
                "parts": [[name, list(shape), dtype] for name, shape, dtype in ring.parts],
            }
        self.send(identity, "welcome", seq=0, fields=fields)

    def _obs(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self.registry.find(message.session, identity)
        session.check_newer(message.seq)
        try:
            images, state, teleop = self._check(message, session)
        except Superseded:
            session.count("observations_superseded")
            return
        time_ns = message.header["time_ns"]
        check_clock(session, time_ns)
        prompt = self.prompts.for_episode(message.header.get("task"))
        step = self.current_step()
        episode_start = bool(message.header.get("episode_start"))
        session.take_observation(
            message.seq,
            time_ns,
            now_ns,
            step,
            images,
            state,
            teleop,
            episode_start=episode_start,
            resume=bool(message.header.get("resume")),
            prompt=prompt,
        )
        recording = session.recording
        if episode_start:
            task = session.prompt.task if session.prompt is not None else None
            recording.episode(session.episode, step, task)
        recording.observation(
            message.seq, step, now_ns, time_ns, images, state, teleop, session.episode
        )
        self.requests.submit_if_due(session, step)

    def _teleop(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self.registry.find(message.session, identity)
        joints = message.header["joints"]
        if not all(isinstance(j, str) for j in joints):
            raise ProtocolError(ErrorCode.MALFORMED, "teleop.joints must be a list of joint names")
        try:
            owned = session.own_joints(joints)
        except ValueError as exc:
            raise ProtocolError(ErrorCode.NOT_ALLOWED, str(exc)) from None
        more = self._teleop_lines.due(session.id)
        if more is not None:
            log.info(
                "robot %s: operator now owns %s%s",
                shown(session.robot),
                shown(list(owned), TEXT_CHARS),
                f" ({more} more teleop changes since the last line)" if more else "",
            )

    def _mark(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self.registry.find(message.session, identity)
        refused = self.keep_mark(session, message.header["reason"], now_ns, by="its driver")
        if refused is not None:
            raise ProtocolError(ErrorCode.NOT_ALLOWED, refused)

    def keep_mark(self, session: Session, reason: str, now_ns: int, by: str) -> str | None:
        """A mark of this moment for `session`'s robot (from its driver, or from an operator:
        `by`) into its flight recording; None when kept, else why not (one sentence). A
        robot's marks, whoever asks, are kept within the recorder's budget (each may write a
        ring's seconds to disk: at most one a second, and so many a minute per robot and in
        all)."""
        refused = session.recording.mark_refused(now_ns)  # also when nothing is recorded
        if refused is not None:
            session.count("marks_refused")
            return refused
        session.count("marks")
        session.recording.mark(reason, now_ns)
        log.info("robot %s: %s marked this moment: %s", shown(session.robot), by,
                 shown(reason, TEXT_CHARS))  # fmt: skip
        return None

    def _bye(self, identity: bytes, message: Message, now_ns: int) -> None:
        session = self.registry.find(message.session, identity)
        self.registry.close(session.id, "the driver said bye")

    _handlers: dict[str, Callable[[Dispatcher, bytes, Message, int], None]] = {
        "hello": _hello,
        "obs": _obs,
        "teleop": _teleop,
        "mark": _mark,
        "bye": _bye,
    }
