"""The daemon's threads: the control loop (owns the socket), the inference worker, status.

Built by `controller.app` from a config and a ready policy; constructing it does no I/O,
`start()` binds and starts the threads, `stop()` sends `hold` to every driver and closes.
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import sys
import threading
import time
from typing import Any

import zmq

from controller.config import TempoConfig
from controller.daemon.dispatch import Dispatcher
from controller.daemon.loop import ControlLoop
from controller.daemon.pacer import Pacer
from controller.daemon.security import CurveServer, check_bind_allowed
from controller.daemon.transport import RouterTransport
from controller.errors import SecurityError
from controller.inference.worker import InferenceWorker
from controller.observe.stats import SampleWindow
from controller.observe.telemetry import RECEIVE, TICK, TICK_LATENESS, Telemetry
from controller.wire.protocol import Limits
from policies.base import Policy, PolicySpec

log = logging.getLogger(__name__)

# Python hands the GIL between threads every 5 ms by default; a tick that wakes while the worker
# thread holds it would wait that long. 100 us bounds that wait (measured in bench_loop.py).
GIL_SWITCH_INTERVAL_S = 1e-4
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


class Daemon:
    def __init__(
        self,
        config: TempoConfig,
        policy: Policy,
        context: zmq.Context | None = None,
        telemetry: Telemetry | None = None,
    ):
        self.config = config
        # One registry for the whole path; app.serve passes the one the runner records into.
        self.telemetry = telemetry or Telemetry.from_config(config.telemetry)
        self.policy = policy
        self.context = context or zmq.Context.instance()
        self.period_ns = int(round(1e9 / config.control.rate_hz))
        self.limits = limits_for(policy.spec)
        self.curve = CurveServer(self.context, config.security) if config.security.enabled else None
        self.transport = RouterTransport(
            self.context, config.server.bind, self.limits, curve=self.curve
        )
        self.worker = InferenceWorker(policy, self.telemetry)
        self.pacer = Pacer(self.period_ns, config.control.spin_us * 1000, idle=self._receive_until)
        self.dispatcher = Dispatcher(
            config,
            policy.spec,
            self.worker,
            self.transport.send,
            lambda: self.pacer.step,
            self.limits,
            telemetry=self.telemetry,
        )
        self.transport.on_peer_gone = self.dispatcher.peer_gone
        self.loop = ControlLoop(
            self.dispatcher,
            self.period_ns,
            config.control.action_valid_ticks,
            telemetry=self.telemetry,
        )
        # Receive/decode: the handler wrapped once (the bound method itself when telemetry is off).
        self._handle = self.telemetry.section(RECEIVE)(self.dispatcher.handle)
        self._timed = self.telemetry.enabled
        self._t_lateness = self.telemetry.section(TICK_LATENESS)
        self._t_tick = self.telemetry.section(TICK)
        self.tick_lateness_us = SampleWindow()
        self.endpoint = ""
        self.started_ns = 0
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_started = threading.Event()
        self._start_error: Exception | None = None

    def _receive_until(self, until_ns: int) -> None:
        self.transport.receive_until(until_ns, self._handle)

    def start(self) -> str:
        """Bind and start serving; returns the bound endpoint."""
        try:
            # Beyond localhost only with CurveZMQ keys; refused here before anything listens.
            check_bind_allowed(self.config.server.bind, self.config.security)
            if self.curve is not None:
                self.curve.start()
            self.endpoint = self.transport.open()
        except Exception:
            if self.curve is not None:
                self.curve.stop()
            self.transport.close()
            raise
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        self.worker.start()
        gc.collect()
        gc.freeze()  # everything built so far is long-lived: keep it out of every collection
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
            # pid 0 is the calling thread on Linux: only the loop thread gets real-time priority.
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except (OSError, AttributeError) as exc:
            raise SecurityError(
                f"control.realtime_priority={priority} needs SCHED_FIFO, which was refused "
                f"({exc}); run with CAP_SYS_NICE (systemd: AmbientCapabilities=CAP_SYS_NICE) or "
                "unset control.realtime_priority"
            ) from None
        log.info("control loop runs under SCHED_FIFO priority %d", priority)

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
            while not self._stop.is_set():
                step = self.pacer.wait()
                self.tick_lateness_us.record(self.pacer.last_lateness_ns / 1e3)
                if self._timed:
                    self._t_lateness.record_ns(self.pacer.last_lateness_ns)
                    started = self._t_tick.start()
                self.loop.tick(step, self.pacer.deadline_of(step), time.monotonic_ns())
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
        for session in list(self.dispatcher.sessions.values()):
            self.loop.send_hold(session, step, "daemon_stopping")
        # Linger just long enough to deliver those holds, bounded so exit stays well under 1 s.
        self.transport.close(linger_ms=FINAL_HOLD_LINGER_MS)

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._stopped.wait(timeout)
        self.worker.stop(timeout=0.2)
        if self.curve is not None:
            self.curve.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def status(self) -> dict[str, Any]:
        """A snapshot for `tempo status` and the demo (read from another thread: plain reads)."""
        now = time.monotonic_ns()
        uptime = (now - self.started_ns) / 1e9 if self.started_ns else 0.0
        ticks = self.pacer.step - self.pacer.missed_ticks  # ticks run, not skipped ones
        p50, p99 = self.tick_lateness_us.percentiles(50, 99)
        lat50, lat99 = self.loop.latency_ms.percentiles(50, 99)
        inf50, inf99 = self.worker.step_ms.percentiles(50, 99)
        robots = []
        for session in list(self.dispatcher.sessions.values()):
            age = (
                (now - session.last_obs_received_ns) / 1e6 if session.last_obs_received_ns else None
            )
            robots.append(
                {
                    "robot": session.robot,
                    "session": session.id,
                    "last_observation_age_ms": age,
                    "guard_state": session.guards.state,
                    "guards": dict(session.guards.counters),
                    "teleop_joints": list(session.teleop.owned),
                    "counters": dict(session.counters),
                    "sent": session.send_seq,
                }
            )
        guard_totals = collections.Counter(self.dispatcher.closed_guard_counts)
        for session in list(self.dispatcher.sessions.values()):
            guard_totals.update(session.guards.counters)
        policy_status = getattr(self.policy, "status", None)
        return {
            "uptime_s": uptime,
            "control_hz": self.config.control.rate_hz,
            "ticks": ticks,
            "achieved_hz": ticks / uptime if uptime > 0 else 0.0,
            "missed_ticks": self.pacer.missed_ticks,
            "tick_lateness_us_p50": p50,
            "tick_lateness_us_p99": p99,
            "tick_lateness_us_max": self.tick_lateness_us.max(),
            "obs_to_action_ms_p50": lat50,
            "obs_to_action_ms_p99": lat99,
            "inference_ms_p50": inf50,
            "inference_ms_p99": inf99,
            "inferences": self.worker.inferences,
            "inference_failures": self.worker.failures,
            "chunks_rejected": self.worker.non_finite,
            "actions_sent": self.loop.actions_sent,
            "holds_sent": self.loop.holds_sent,
            "messages": self.dispatcher.messages,
            "protocol_errors": dict(self.dispatcher.errors),
            "send_dropped": self.transport.send_dropped,
            "late_actions_dropped": self.loop.late_actions_dropped,
            "tick_failures": self.loop.internal_errors,
            "oversize_message_parts_dropped": self.transport.parts_discarded,
            "guard_interventions": dict(guard_totals),
            "robots": robots,
            "policy": policy_status() if callable(policy_status) else {},
            "telemetry": self.telemetry.snapshot(),
        }
