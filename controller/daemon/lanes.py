"""Several policies in one daemon: a lane per policy, one socket, one pacer, one loop thread.

A lane is what serving one policy's robots takes: the policy and its inference feed, the
execution settings in effect, its admission (capacity), and its own session registry,
dispatcher and control loop (controller.daemon.control), built from the policy's view of the
config (controller.config.policy_views). The daemon's one loop thread ticks every lane in turn
and services every lane's inference process while it waits; a lane whose process restarts
holds only its own robots.

    lanes = Lanes()
    lanes.add(build_lane(name, view, policy, lanes, shared))    # the first added: the default
    transport.receive_until(until_ns, lanes.handle, lanes.side_channel())
    lanes.tick(step, deadline_ns, now_ns)

A message goes to the lane holding its connection's session (a connection without one: the
default lane); every hello goes to the lane of the policy it names, or the default's, and
moves the connection there once that lane has checked it (`route_hello`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from controller.config import TempoConfig
from controller.config_sections import ExecutionConfig
from controller.daemon.admission import Capacity
from controller.daemon.control import Control, build_control
from controller.daemon.dispatch import unknown_policy
from controller.daemon.execution import resolve_execution
from controller.daemon.refusals import Sender
from controller.daemon.registry import PipelineFactory, SessionRegistry
from controller.daemon.session import Session
from controller.daemon.side_channels import SideChannels
from controller.daemon.tick_sender import PreparedSender
from controller.errors import ErrorCode, ProtocolError
from controller.feed.batch_window import step_times_of
from controller.feed.inference_feed import InferenceFeed, SideChannel
from controller.feed.served_policy import ServedPolicy
from controller.link.serving_watch import serving_watch
from controller.observe.telemetry import Telemetry
from controller.record.queue import PolicyRecording
from controller.wire.protocol import Limits, Message


@dataclass(frozen=True)
class Shared:
    """What every lane shares: the socket's sends, the pacer's step, the clock's period."""

    telemetry: Telemetry
    send: Sender
    send_prepared: PreparedSender | None
    current_step: Callable[[], int]
    period_ns: int
    frames_in_place: bool


@dataclass(frozen=True)
class Lane:
    name: str
    config: TempoConfig  # the policy's view: the top level with its own sections in place
    policy: ServedPolicy
    feed: InferenceFeed
    execution_settings: ExecutionConfig  # in effect (config, else checkpoint, else default)
    execution: str  # one line saying so
    limits: Limits
    capacity: Capacity
    control: Control

    @property
    def robots(self) -> int:
        return len(self.control.registry.sessions)


def build_lane(
    name: str,
    view: TempoConfig,
    policy: ServedPolicy,
    lanes: Lanes,
    shared: Shared,
    *,
    limits: Limits,
    new_pipeline: PipelineFactory,
    recorder: PolicyRecording | None = None,
) -> Lane:
    """One policy's lane (its feed not started); `lanes`: the daemon's, which it joins."""
    rtc = view.policy.section("rtc")
    settings, execution = resolve_execution(view.execution, policy.spec, rtc)
    rate_hz = view.control.rate_hz
    capacity = Capacity(
        name,
        rate_hz / settings.query_period,
        # The buckets the policy serves (a policy handed in may have its own), else the config's.
        tuple(policy.status().get("batch_sizes") or settings.batch_sizes),
        settings.max_load,
        lambda: step_times_of(policy.status()),
    )
    feed = policy.feed(shared.telemetry)
    control = build_control(
        policy.spec,
        feed,
        shared.send,
        shared.current_step,
        new_pipeline,
        control_hz=rate_hz,
        period_ns=shared.period_ns,
        valid_ticks=view.control.action_valid_ticks,
        server=view.server,
        execution=settings,
        limits=limits,
        telemetry=shared.telemetry,
        send_prepared=shared.send_prepared,
        frames_in_place=shared.frames_in_place,
        serving=serving_watch(policy),  # False while its process restarts or switches: hold
        recorder=recorder,
        policy_name=name,
        route_hello=lanes.route_hello,
        # openpi clients of this policy take its inference time as robots do.
        admit=lambda robots: capacity.admit(robots + lanes.clients(name)),
        occupied=lanes.occupied,
        holder=lanes.holder,
    )
    return Lane(name, view, policy, feed, settings, execution, limits, capacity, control)


class Lanes:
    def __init__(self) -> None:
        self.all: list[Lane] = []
        self._by_name: dict[str, Lane] = {}
        # A policy's openpi clients (controller.daemon.openpi_endpoint), once there is one,
        # and whether one of them goes by a robot name.
        self.clients: Callable[[str], int] = lambda name: 0
        self.client_named: Callable[[str], bool] = lambda robot: False

    def add(self, lane: Lane) -> None:
        self.all.append(lane)
        self._by_name[lane.name] = lane

    @property
    def default(self) -> Lane:
        return self.all[0]

    def handle(self, identity: bytes, frames: list[object], now_ns: int) -> None:
        """The transport's handler: the message goes to its connection's lane."""
        for lane in self.all:
            if lane.control.registry.serves(identity):
                lane.control.dispatcher.handle(identity, frames, now_ns)
                return
        self.default.control.dispatcher.handle(identity, frames, now_ns)

    def route_hello(self, name: str | None, identity: bytes, message: Message, now_ns: int) -> None:
        """A hello: to the policy it names (None: the default). The target checks it first
        (a refusal changes nothing); then the connection's session with any other policy
        ends, and one with the target opens."""
        target = self.default if name is None else self._by_name.get(name)
        if target is None:
            raise ProtocolError(ErrorCode.NOT_ALLOWED, unknown_policy(name or "", self._by_name))
        prompt = target.control.dispatcher.check_hello(identity, message, now_ns)
        for lane in self.all:
            if lane is not target:
                lane.control.registry.leave(identity, f"the driver said hello to policy {name}")
        target.control.dispatcher.open_session(identity, message, prompt, now_ns)

    def tick(self, step: int, deadline_ns: int, now_ns: int) -> None:
        for lane in self.all:
            lane.control.loop.tick(step, deadline_ns, now_ns)

    def peer_gone(self, identity: bytes) -> None:
        for lane in self.all:
            lane.control.registry.peer_gone(identity)

    def holder(self, robot: str) -> tuple[SessionRegistry, Session] | None:
        """Who holds a robot's name, among every policy's sessions (a name is one at a time);
        ProtocolError when an openpi client holds it."""
        if self.client_named(robot):
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"robot {robot} is the name of a connected openpi client; give this driver "
                "another name",
            )
        for lane in self.all:
            found = lane.control.registry.holding(robot)
            if found is not None:
                return found
        return None

    def occupied(self) -> int:
        """Robots and openpi clients served by every policy (what server.max_robots bounds)."""
        return sum(lane.robots + self.clients(lane.name) for lane in self.all)

    def sessions(self) -> Iterator[tuple[Lane, Session]]:
        for lane in self.all:
            for session in list(lane.control.registry.sessions.values()):
                yield lane, session

    def side_channel(self) -> SideChannel | None:
        """What the loop services while it waits: the inference processes' channels."""
        sides = [lane.feed.side_channel for lane in self.all]
        present = [side for side in sides if side is not None]
        if len(present) <= 1:
            return present[0] if present else None
        return SideChannels(present)


def widest(limits: list[Limits]) -> Limits:
    """Limits a message to any of the policies fits in (each lane checks its own spec)."""
    return Limits(
        max_arrays=max(lim.max_arrays for lim in limits),
        max_array_bytes=max(lim.max_array_bytes for lim in limits),
    )
