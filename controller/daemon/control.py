"""The objects that serve robots on the loop thread, built and wired together once:

    registry    SessionRegistry   the sessions (by id, time-outs, max_robots)
    requests    InferenceRequests asks the inference feed about observations when due
    refusals    Refusals          every `error` reply
    sender      TickSender        the tick's `action` / `hold` through the transport
    dispatcher  Dispatcher        routes the drivers' messages
    loop        ControlLoop       the tick: read -> update -> write

The daemon builds them from its config (service.py); tests build them without sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controller.config import DEFAULT_POLICY_NAME
from controller.config_sections import ExecutionConfig, ServerConfig
from controller.daemon.dispatch import Dispatcher, HelloRouter
from controller.daemon.loop import ControlLoop
from controller.daemon.refusals import Refusals, Sender
from controller.daemon.registry import PipelineFactory, RobotHolder, SessionRegistry
from controller.daemon.tick_sender import PreparedSender, TickSender
from controller.feed.inference_feed import InferenceFeed
from controller.feed.pending_requests import InferenceRequests
from controller.observe.telemetry import Telemetry
from controller.record.queue import PolicyRecording
from controller.wire.protocol import DEFAULT_LIMITS, Limits
from policies.base import PolicySpec


@dataclass(frozen=True)
class Control:
    registry: SessionRegistry
    requests: InferenceRequests
    refusals: Refusals
    sender: TickSender
    dispatcher: Dispatcher
    loop: ControlLoop


def build_control(
    spec: PolicySpec,
    feed: InferenceFeed,
    send: Sender,
    current_step: Callable[[], int],
    new_pipeline: PipelineFactory,
    *,
    control_hz: float,
    period_ns: int,
    valid_ticks: float,
    server: ServerConfig,
    execution: ExecutionConfig,
    limits: Limits = DEFAULT_LIMITS,
    telemetry: Telemetry | None = None,
    send_prepared: PreparedSender | None = None,
    frames_in_place: bool = False,
    serving: Callable[[], bool] = lambda: True,
    recorder: PolicyRecording | None = None,
    policy_name: str = DEFAULT_POLICY_NAME,
    route_hello: HelloRouter | None = None,
    admit: Callable[[int], None] | None = None,
    occupied: Callable[[], int] | None = None,
    holder: RobotHolder | None = None,
) -> Control:
    """`send`: any message through the transport; `send_prepared`: the tick's allocation-free
    send of packed headers (without it the tick's messages go through `send`, allocating);
    `frames_in_place`: a driver may ask for a shared-memory frame ring in hello (the endpoint
    is ipc://); `serving`: whether the policy can answer now (see ControlLoop); `recorder`:
    the flight recorder (None: off). A daemon of several policies builds one per policy
    (controller.daemon.lanes): `policy_name`, `route_hello`, `admit` go to the dispatcher
    (see Dispatcher), `occupied` and `holder` to the registry (the robots of every policy)."""
    registry = SessionRegistry(
        spec,
        new_pipeline,
        server,
        frames_in_place=frames_in_place,
        recorder=recorder,
        occupied=occupied,
        holder=holder,
    )
    requests = InferenceRequests(feed, execution.query_period, period_ns)
    refusals = Refusals(send, registry.sessions)
    sender = TickSender(send, send_prepared)
    dispatcher = Dispatcher(
        spec,
        registry,
        requests,
        refusals,
        send,
        current_step,
        control_hz=control_hz,
        limits=limits,
        telemetry=telemetry,
        policy_name=policy_name,
        route_hello=route_hello,
        admit=admit,
    )
    loop = ControlLoop(
        registry,
        sender,
        requests,
        refusals,
        period_ns,
        valid_ticks,
        telemetry=telemetry,
        serving=serving,
    )
    return Control(registry, requests, refusals, sender, dispatcher, loop)
