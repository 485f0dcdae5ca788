"""The daemon's threads: the control loop (owns the socket; it also feeds a policy served in its
own process, between ticks), the inference feed (a thread for a policy in this process), status.

Built by `controller.app` from a config, a ready policy and the socket it bound before loading
the policy (`open_transport`); constructing it does no I/O, `start()` binds (unless bound
already) and starts the threads, `stop()` sends `hold` to every driver and closes.
"""

from __future__ import annotations

import functools
import gc
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq

from controller.action.pipeline import ActionPipeline
from controller.config import TempoConfig, policy_views
from controller.daemon.daemon_status import daemon_status
from controller.daemon.execution import resolve_execution
from controller.daemon.helper_threads import HelperThreads, set_realtime
from controller.daemon.lanes import Lanes, Shared, build_lane, widest
from controller.daemon.openpi_endpoint import build_openpi
from controller.daemon.operator_marks import OperatorMarks
from controller.daemon.pacer import Pacer
from controller.daemon.registry import PipelineFactory
from controller.daemon.security import CurveServer, check_bind_allowed
from controller.daemon.side_channels import SideChannels
from controller.daemon.transport import RouterTransport
from controller.errors import ConfigError, SecurityError
from controller.feed.served_policy import ServedPolicy
from controller.observe.gc_pauses import GcPauses
from controller.observe.late_ticks import LateTicks
from controller.observe.telemetry import RECEIVE, TICK, TICK_LATENESS, Telemetry
from controller.record.writer import Recorder
from controller.wire.protocol import DEFAULT_LIMITS, Limits
from policies.base import PolicySpec

log = logging.getLogger(__name__)

# Python hands the GIL between threads every 5 ms by default; a tick that wakes while another
# thread holds it would wait that long. 25 us bounds that wait: on an H200 host, recording
# (whose writer thread runs Python beside the loop) had a 200 Hz tick lateness p99 of 163 and
# 170 us with 100 us here, and 122 and 122 us with 25 us; off, 212 and 77 us, and 89 and 97 us
# (bench_recording.py, two 12 s runs of each mode for each value, alternating, in one call).
GIL_SWITCH_INTERVAL_S = 2.5e-5
FINAL_HOLD_LINGER_MS = 100


def limits_for(spec: PolicySpec) -> Limits:
    """The tightest limits a legal message for this policy fits in: the largest frame is one
    camera image (or the state as float64), and an observation has one frame per camera plus
    state and teleop. ZeroMQ's MAXMSGSIZE is set from these, so an oversize frame is refused
    before it reaches Python."""
    largest = max(
        [c.height * c.width * 3 for c in spec.cameras] + [8 * spec.state_size, 8 * spec.action_dim]
    )
    return Limits(max_arrays=len(spec.cameras) + 2, max_array_bytes=largest)


def pipeline_factory(spec: PolicySpec, config: TempoConfig) -> PipelineFactory:
    """How the daemon builds one robot's action pipeline from its config (the tools use it too,
    so what they time is what is served): the driver's joint limits from hello -> pipeline.
    Ensembling follows the policy's checkpoint unless the config sets it (resolve_execution)."""
    execution, _ = resolve_execution(config.execution, spec)
    return functools.partial(
        ActionPipeline,
        spec,
        config.guards,
        config.teleop,
        config.control.rate_hz,
        execution.ensemble,
        execution.temporal_k,
    )


def check_action_config(spec: PolicySpec, config: TempoConfig) -> ActionPipeline:
    """Build one robot's action pipeline as a session would (without driver limits), so that
    guards or teleop naming joints the policy does not have are refused at start, not at the
    first hello; log which guards are active, and warn when no joint has position limits."""
    try:
        pipeline = pipeline_factory(spec, config)({})
    except ValueError as exc:
        raise ConfigError(f"{exc} (the policy's joints come from its checkpoint)") from None
    log.info("guards for robots of joints %s: %s", ", ".join(spec.joint_names),
             pipeline.guards.describe())  # fmt: skip
    if not pipeline.guards.has_position_limits:
        log.warning(
            "no position limits are configured (guards.position_limits), so only limits a "
            "driver sends in hello bound this policy's commands; set them for a real robot"
        )
    return pipeline


def unopened_transport(
    config: TempoConfig, context: zmq.Context, limits: Limits = DEFAULT_LIMITS
) -> RouterTransport:
    """The daemon's socket as the config describes it (with CurveZMQ when keys are set)."""
    curve = CurveServer(context, config.security) if config.security.enabled else None
    return RouterTransport(context, config.server.bind, limits, curve=curve)


def open_transport(config: TempoConfig, transport: RouterTransport) -> RouterTransport:
    """Bind the daemon's socket: SecurityError for an exposed bind without keys, BindError
    (one sentence) when the endpoint cannot be bound. Before the policy is loaded, so that
    these come before a long compile; the limits are narrowed to the policy at start."""
    try:
        # Beyond localhost only with CurveZMQ keys; refused here before anything listens.
        check_bind_allowed(config.server.bind, config.security)
        if transport.curve is not None:
            transport.curve.start()
        transport.open()
    except Exception:
        if transport.curve is not None:
            transport.curve.stop()
        transport.close()
        raise
    return transport


class Daemon:
    def __init__(
        self,
        config: TempoConfig,
        policy: ServedPolicy | Sequence[ServedPolicy],
        context: zmq.Context | None = None,
        telemetry: Telemetry | None = None,
        transport: RouterTransport | None = None,
    ):
        """`policy`: the served policy, or one for each of the config's (`policy_views`, in
        that order: several policies in one daemon, controller.daemon.lanes); `transport`: the
        daemon's socket, already bound by `open_transport` before the policies were loaded
        (the composition root does that); None: built here, bound by start."""
        self.config = config
        # One registry for the whole path; app.serve passes the one the runner records into.
        self.telemetry = telemetry or Telemetry.from_config(config.telemetry)
        policies = list(policy) if isinstance(policy, Sequence) else [policy]
        views = policy_views(config)
        if len(policies) != len(views):
            raise ConfigError(
                f"the config names {len(views)} policies but {len(policies)} were given to serve"
            )
        self.context = context or zmq.Context.instance()
        self.period_ns = int(round(1e9 / config.control.rate_hz))
        specs = [served.spec for served in policies]
        limits = [limits_for(spec) for spec in specs]
        self.limits = widest(limits)
        if transport is None:
            transport = unopened_transport(config, self.context, self.limits)
        self.transport = transport
        self.curve = transport.curve
        self.pacer = Pacer(self.period_ns, config.control.spin_us * 1000, idle=self._receive_until)
        # The flight recorder (record.mode): its writer thread reads the tier as chunks come.
        self.recorder: Recorder | None = None
        if config.record.mode != "off":
            self.recorder = Recorder(
                config.record,
                specs[0].joint_names,
                config.control.rate_hz,
                tier=_tier_of(policies[0]),
            )
        shared = Shared(
            self.telemetry,
            self.transport.send,
            self.transport.send_prepared,
            lambda: self.pacer.step,
            self.period_ns,
            # Drivers of an ipc:// endpoint are on this host: they may write frames in place.
            config.server.bind.startswith("ipc://"),
        )
        # A lane per policy: its feed (a policy in its own process is fed by the loop's thread
        # itself, between ticks, through its side channel; one in this process by a thread of
        # its own), its sessions, dispatcher and loop. The first is the default.
        self.lanes = Lanes()
        for (name, view), served, lane_limits in zip(views, policies, limits, strict=True):
            lane = build_lane(
                name,
                view,
                served,
                self.lanes,
                shared,
                limits=lane_limits,
                new_pipeline=pipeline_factory(served.spec, view),
                # Each policy's robots are recorded with its joints and its serving tier.
                recorder=None
                if self.recorder is None
                else self.recorder.policy(name, served.spec.joint_names, _tier_of(served)),
            )
            self.lanes.add(lane)
        self._side = self.lanes.side_channel()
        # openpi clients (server.openpi): sessions of a lane, serviced first while the loop
        # waits, so that a request handed to a process's channel goes out in the same pass.
        self.openpi = build_openpi(config, self.lanes, lambda: self.pacer.step)
        if self.openpi is not None:
            self.lanes.clients = self.openpi.clients
            self.lanes.client_named = self.openpi.sessions.holds
            sides = [self.openpi.side, *([self._side] if self._side is not None else [])]
            self._side = SideChannels(sides)
        self.openpi_endpoint = ""
        # One policy: its own objects straight (no routing on the loop's path).
        one = len(self.lanes.all) == 1
        control = self.lanes.default.control
        self.transport.on_peer_gone = control.registry.peer_gone if one else self.lanes.peer_gone
        handle = control.dispatcher.handle if one else self.lanes.handle
        self._tick = control.loop.tick if one else self.lanes.tick
        # Receive/decode: the handler wrapped once (the bound method itself when telemetry is off).
        self._handle = self.telemetry.section(RECEIVE)(handle)
        self._timed = self.telemetry.enabled
        self._t_lateness = self.telemetry.section(TICK_LATENESS)
        self.late_ticks = LateTicks()  # with telemetry on: late ticks, and which were preempted
        self._t_tick = self.telemetry.section(TICK)
        self.endpoint = ""
        self.started_ns = 0
        self._gc_pauses = GcPauses(self.telemetry)
        # The threads that run Python beside the loop: real-time below it once it is.
        self.helpers = HelperThreads()
        self.operator_marks = OperatorMarks()  # `tempo mark`, asked on the status socket
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_started = threading.Event()
        self._start_error: Exception | None = None

    def _receive_until(self, until_ns: int) -> None:
        self.transport.receive_until(until_ns, self._handle, self._side)

    def start(self) -> str:
        """Bind (unless bound already) and start serving; returns the bound endpoint."""
        if not self.transport.endpoint:
            open_transport(self.config, self.transport)
        try:
            self.transport.narrow(self.limits)  # the policy's frame size, now that it is known
            if self.recorder is not None:
                self.recorder.start()  # ConfigError when record.dir cannot be made
                self.helpers.add(self.recorder.thread)
        except Exception:
            self.transport.close()
            if self.curve is not None:
                self.curve.stop()
            raise
        self.endpoint = self.transport.endpoint
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        for lane in self.lanes.all:
            lane.feed.start()
        if self.openpi is not None:
            try:
                self.openpi_endpoint = self.openpi.start()
            except Exception:
                for lane in self.lanes.all:
                    lane.feed.stop(timeout=0.2)
                self.transport.close()
                raise
        gc.collect()
        gc.freeze()  # everything built so far is long-lived: keep it out of every collection
        self._gc_pauses.install()  # how long collections stop the process from here on
        self.started_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._run, name="tempo-loop", daemon=True)
        self._thread.start()
        self._loop_started.wait(5.0)
        if self._start_error is not None:
            self.stop()
            raise self._start_error
        return self.endpoint

    def _set_realtime_priority(self) -> None:
        priority = self.config.control.realtime_priority
        if priority is None:
            return
        try:
            # Only the loop thread gets real-time priority (not what it starts: REALTIME_POLICY).
            set_realtime(0, priority)
        except (OSError, AttributeError) as exc:
            raise SecurityError(
                f"control.realtime_priority={priority} needs SCHED_FIFO, which was refused "
                f"({exc}); run with CAP_SYS_NICE (systemd: AmbientCapabilities=CAP_SYS_NICE) or "
                "unset control.realtime_priority"
            ) from None
        log.info("control loop runs under SCHED_FIFO priority %d", priority)
        self.helpers.follow_loop(priority)

    def _run(self) -> None:
        try:
            try:
                self._set_realtime_priority()
            except SecurityError as exc:
                self._start_error = exc
                return
            finally:
                self._loop_started.set()
            self.pacer.start()
            last_tick_ns = 0
            while not self._stop.is_set():
                step = self.pacer.wait()
                if self._timed:
                    self._t_lateness.record_ns(self.pacer.last_lateness_ns)
                    self.late_ticks.record(
                        self.pacer.last_lateness_ns,
                        self.pacer.last_idle_overrun_ns,
                        self.transport.take_longest(),
                        last_tick_ns,
                    )
                    started = self._t_tick.start()
                tick_began = time.monotonic_ns()
                self._tick(step, self.pacer.deadline_of(step), tick_began)
                last_tick_ns = time.monotonic_ns() - tick_began
                if self.operator_marks.waiting:  # `tempo mark`: rare, after the tick
                    targets = ((lane.control.dispatcher, s) for lane, s in self.lanes.sessions())
                    self.operator_marks.take(targets, time.monotonic_ns())
                if self._timed:
                    self._t_tick.stop(started)
        except Exception:
            log.exception("the control loop failed; holding every robot and stopping")
        finally:
            try:
                self._shutdown_socket()
            finally:
                self._stopped.set()

    def _shutdown_socket(self) -> None:
        step = self.pacer.step
        for lane, session in list(self.lanes.sessions()):
            lane.control.sender.hold(session, step, "daemon_stopping")
            session.close()  # its frame ring's memory goes too
        # Linger just long enough to deliver those holds, bounded so exit stays well under 1 s.
        self.transport.close(linger_ms=FINAL_HOLD_LINGER_MS)

    def stop(self, timeout: float = 1.0) -> None:
        if self.openpi is not None:
            self.openpi.stop()  # first: no request is handed on while the loop stops
        self._stop.set()
        self._stopped.wait(timeout)
        for lane in self.lanes.all:
            lane.feed.stop(timeout=0.2)
        if self.recorder is not None:
            self.recorder.stop()  # after the loop: what it queued last is written
        self._gc_pauses.remove()
        if self.curve is not None:
            self.curve.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """A snapshot for `tempo status` and the demo (read from another thread: plain reads;
        see controller.daemon.daemon_status)."""
        return daemon_status(self)


def _tier_of(policy: ServedPolicy) -> Callable[[], str | None]:
    """The serving tier of `policy` now (the recorder's writer thread reads it per chunk)."""
    return lambda: policy.status().get("tier")
