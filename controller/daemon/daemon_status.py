"""The daemon's status snapshot (`Daemon.status`): the loop's figures, every policy's counters
added up, every robot (with the policy serving it), and a `policies` map with each policy's
robots, rate, load (controller.daemon.admission) and own counters. Read from another thread
than the loop's: plain reads of counters, each list copied before it is walked.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Protocol

from controller.config import TempoConfig
from controller.daemon.lanes import Lane, Lanes
from controller.daemon.openpi_endpoint import OpenpiEndpoint
from controller.daemon.pacer import Pacer
from controller.daemon.session import Session
from controller.daemon.transport import RouterTransport
from controller.observe.late_ticks import LateTicks
from controller.observe.log_safety import shown
from controller.observe.status import guard_totals, recorded_figures
from controller.observe.telemetry import Telemetry
from controller.record.writer import Recorder

# Each policy's counters, kept per policy and added up at the top level.
LANE_COUNTERS = (
    "inferences",
    "inference_failures",
    "chunks_rejected",
    "input_faults",
    "frames_overwritten",
    "actions_sent",
    "holds_sent",
    "messages",
    "late_actions_dropped",
    "tick_failures",
    "muted_messages_dropped",
    "over_rate_messages_dropped",
    "greetings_dropped",
    "hellos_dropped",
)


def lane_counters(lane: Lane) -> dict[str, int]:
    control, feed = lane.control, lane.feed
    return {
        "inferences": feed.inferences,
        "inference_failures": feed.failures,
        "chunks_rejected": feed.non_finite,
        "input_faults": feed.input_faults,  # refused: the reference fails on them too
        # Frames in place that the driver rewrote while the policy read them: refused.
        "frames_overwritten": feed.frames_overwritten,
        "actions_sent": control.sender.actions_sent,
        "holds_sent": control.sender.holds_sent,
        "messages": control.dispatcher.messages,
        "late_actions_dropped": control.loop.late_actions_dropped,
        "tick_failures": control.loop.internal_errors,
        # From connections over their budget (controller/daemon/connection_budget.py).
        "muted_messages_dropped": control.dispatcher.budget.dropped,
        "over_rate_messages_dropped": control.dispatcher.budget.over_rate,
        "greetings_dropped": control.dispatcher.budget.greetings_dropped,
        "hellos_dropped": control.dispatcher.budget.hellos_dropped,
    }


def robot_status(lane: Lane, session: Session, now: int) -> dict[str, Any]:
    pipeline = session.pipeline
    seen = pipeline.last_observation_ns
    return {
        "robot": session.robot,
        "policy": lane.name,
        "session": session.id,
        "last_observation_age_ms": (now - seen) / 1e6 if seen else None,
        "guard_state": pipeline.guards.state,
        "guards": dict(pipeline.guards.counters),
        "teleop_joints": list(pipeline.teleop.owned),
        "episode": session.episode,
        "task": shown(session.prompt.task, 80) if session.prompt is not None else None,
        "inference_delay_steps": session.inference_delay,
        "counters": dict(session.counters),
        "sent": session.send_seq,
    }


def policy_status(lane: Lane, counters: dict[str, int]) -> dict[str, Any]:
    """One policy's line of `tempo status`: its robots, their rate, the load they make."""
    return {
        **lane.capacity.summary(lane.robots),
        "rate_hz": lane.config.control.rate_hz,
        "serving": lane.policy.serving,
        "execution": lane.execution,
        **counters,
        "policy": lane.policy.status(),
    }


class Daemon(Protocol):
    """What the snapshot reads of the daemon (controller.daemon.service.Daemon)."""

    config: TempoConfig
    telemetry: Telemetry
    pacer: Pacer
    lanes: Lanes
    transport: RouterTransport
    recorder: Recorder | None
    late_ticks: LateTicks
    started_ns: int
    openpi: OpenpiEndpoint | None


def daemon_status(daemon: Daemon) -> dict[str, Any]:
    """Durations come from the telemetry histograms (controller.observe.status)."""
    now = time.monotonic_ns()
    pacer = daemon.pacer
    uptime = (now - daemon.started_ns) / 1e9 if daemon.started_ns else 0.0
    ticks = pacer.step - pacer.missed_ticks  # ticks run, not skipped ones
    lanes = daemon.lanes.all
    sessions = list(daemon.lanes.sessions())
    counters = {lane.name: lane_counters(lane) for lane in lanes}
    totals = {key: sum(c[key] for c in counters.values()) for key in LANE_COUNTERS}
    errors: collections.Counter[str] = collections.Counter()
    closed: collections.Counter[str] = collections.Counter()
    for lane in lanes:
        errors.update(lane.control.dispatcher.errors)
        closed.update(lane.control.registry.closed_guard_counts)
    telemetry = daemon.telemetry.snapshot()
    policies = {lane.name: policy_status(lane, counters[lane.name]) for lane in lanes}
    return {
        "uptime_s": uptime,
        "control_hz": daemon.config.control.rate_hz,
        "execution": daemon.lanes.default.execution,
        "ticks": ticks,
        "achieved_hz": ticks / uptime if uptime > 0 else 0.0,
        "missed_ticks": pacer.missed_ticks,
        "late_ticks": daemon.late_ticks.as_dict()
        if daemon.telemetry.enabled
        else None,  # telemetry's
        **recorded_figures(telemetry),
        **totals,
        "protocol_errors": dict(errors),
        "send_dropped": daemon.transport.send_dropped,
        "oversize_message_parts_dropped": daemon.transport.parts_discarded,
        "guard_interventions": guard_totals(
            closed, (s.pipeline.guards.counters for _, s in sessions)
        ),
        # openpi clients are listed with the robots ("client": "openpi"): /metrics too.
        "robots": [robot_status(lane, session, now) for lane, session in sessions]
        + (daemon.openpi.robots(now) if daemon.openpi is not None else []),
        "openpi": daemon.openpi.status() if daemon.openpi is not None else None,
        # The flight recorder: records written and dropped (by kind), files, incidents.
        "recording": daemon.recorder.status() if daemon.recorder is not None else None,
        # The default policy's, as its line has it: its status reads each process's /proc.
        "policy": policies[daemon.lanes.default.name]["policy"],
        "policies": policies,
        "telemetry": telemetry,
    }
