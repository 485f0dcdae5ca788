"""The paced loop of `tempo drive`: once per control tick, read the robot (and the leader arm),
send the observation, apply the newest command the daemon sent.

    tick:  obs = robot.get_observation()            # joints and camera frames, LeRobot's dict
           teleop = leader.get_action()             # with a leader arm: the operator's joints
           client.send_observation(frames, state, teleop=...)
           command = client.receive()               # the newest action still valid, else hold
           robot.send_action({joint: value, ...})   # only an action; a hold sends nothing, so
                                                    # the motors keep their last goal

The loop runs at the daemon's rate (its welcome's control_hz) on absolute deadlines (the
daemon's pacer: sleep, then spin the last 0.2 ms); a tick that is missed entirely is counted
and skipped, never made up. Which joints the operator owns is said to the daemon at the first
tick of every session (a reconnection starts a new one, whose mask is the daemon's config's
until told). Robot and leader arm are anything with LeRobot's methods, so the loop is tested
with fakes; no LeRobot and no torch are imported here.
"""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from controller.daemon.pacer import Pacer
from controller.drive.feature_map import FeatureMap
from controller.errors import DeviceError, ObservationError
from controller.observe.histogram import Histogram
from controller.wire.client import TempoClient

SPIN_NS = 200_000  # spun before each deadline (the rest is slept)
OBSERVATIONS_REMEMBERED = 64  # sent observations kept for timing the first action from each


class RobotLike(Protocol):
    """What the loop uses of a LeRobot `Robot`."""

    def get_observation(self) -> Mapping[str, Any]: ...

    def send_action(self, action: dict[str, float]) -> Any: ...


class LeaderLike(Protocol):
    """What the loop uses of a LeRobot `Teleoperator`."""

    def get_action(self) -> Mapping[str, Any]: ...


@dataclass
class DriveStats:
    """What one run did; `as_dict` is the summary `tempo drive --json` prints."""

    control_hz: float
    started_ns: int = field(default_factory=time.monotonic_ns)
    ticks: int = 0
    missed_ticks: int = 0
    observations: int = 0
    actions_applied: int = 0
    action_steps: int = 0  # distinct daemon steps applied
    holds: dict[str, int] = field(default_factory=dict)  # by reason
    teleop_masks_sent: int = 0
    last_step: int = -1
    work: Histogram = field(default_factory=Histogram)  # a tick's work: read, send, apply
    lateness: Histogram = field(default_factory=Histogram)  # tick start past its deadline
    latency: Histogram = field(default_factory=Histogram)  # obs sent -> first action from it

    def as_dict(self, client: TempoClient, features: FeatureMap) -> dict[str, Any]:
        elapsed = (time.monotonic_ns() - self.started_ns) / 1e9

        def ms(histogram: Histogram, q: float) -> float | None:
            value = histogram.percentile(q)
            return None if value is None else round(value * 1e3, 3)

        work_max = self.work.max
        return {
            "robot": features.robot,
            "elapsed_s": round(elapsed, 3),
            "control_hz": self.control_hz,
            "ticks": self.ticks,
            "missed_ticks": self.missed_ticks,
            "achieved_hz": round(self.ticks / elapsed, 3) if elapsed > 0 else 0.0,
            "observations": self.observations,
            "actions_applied": self.actions_applied,
            "action_steps": self.action_steps,
            "holds": sum(self.holds.values()),
            "hold_reasons": dict(sorted(self.holds.items())),
            "teleop_joints": list(features.teleop_joints),
            "teleop_masks_sent": self.teleop_masks_sent,
            "work_ms_p50": ms(self.work, 50),
            "work_ms_p99": ms(self.work, 99),
            "work_ms_max": None if work_max is None else round(work_max * 1e3, 3),
            "lateness_ms_p99": ms(self.lateness, 99),
            "obs_to_action_ms_p50": ms(self.latency, 50),
            "obs_to_action_ms_p99": ms(self.latency, 99),
            "expired": client.counters.expired,
            "lost": client.counters.lost,
            "reconnects": client.counters.reconnects,
            "errors": client.counters.errors,
            "last_error": client.counters.last_error,
        }


def run_drive(
    client: TempoClient,
    robot: RobotLike,
    features: FeatureMap,
    seconds: float | None,
    leader: LeaderLike | None = None,
    report: TextIO | None = None,
    report_every_s: float = 1.0,
    first_action_wait_s: float = 60.0,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Drive `robot` from the connected `client` for `seconds` from the first action (None:
    until `stop` is set or Ctrl-C, either ending the run with its summary); a first policy
    step on a loaded CPU can take seconds, so up to `first_action_wait_s` more are waited for
    it. Streams a JSON line to `report` every `report_every_s`; returns the summary."""
    if client.welcome is None:
        raise ValueError("run_drive needs a connected client; call client.connect() first")
    hz = client.welcome.control_hz
    stats = DriveStats(control_hz=hz)
    pacer = Pacer(round(1e9 / hz), spin_ns=SPIN_NS)
    report_every = max(1, round(hz * report_every_s))
    sent_at: dict[int, int] = {}
    run_ns = None if seconds is None else round(seconds * 1e9)
    wait_ns = round(first_action_wait_s * 1e9)
    end_ns = None if run_ns is None else stats.started_ns + run_ns + wait_ns
    session = None
    # LeRobot's imports (torch among them) leave millions of long-lived objects: a full
    # collection scanning them stalls a tick for tens of ms. Keep them out of every collection.
    gc.freeze()
    pacer.start()
    try:
        while (end_ns is None or time.monotonic_ns() < end_ns) and not (stop and stop.is_set()):
            step = pacer.wait()
            begun = time.monotonic_ns()
            stats.lateness.record_ns(pacer.last_lateness_ns)
            try:
                obs = robot.get_observation()
            except Exception as exc:  # noqa: BLE001 - the device's own error, in one sentence
                raise _device_failed(f"robot {features.robot}", "get_observation", exc) from None
            images, state = features.observation(obs)
            teleop = None
            if leader is not None:
                try:
                    teleop = features.teleop_values(leader.get_action())
                except ObservationError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    raise _device_failed("the leader arm", "get_action", exc) from None
            welcome = client.welcome
            if features.teleop_joints and welcome is not None and welcome.session != session:
                client.set_teleop(features.teleop_joints)  # each session starts with the config's
                session = welcome.session
                stats.teleop_masks_sent += 1
            seq = client.send_observation(images, state, teleop=teleop)
            if seq is not None:
                stats.observations += 1
                sent_at[seq] = time.monotonic_ns()
                if len(sent_at) > OBSERVATIONS_REMEMBERED:
                    del sent_at[min(sent_at)]  # superseded: no action will name it
            command = client.receive()
            if command.kind == "action" and command.action is not None:
                try:
                    robot.send_action(features.action(command.action))
                except Exception as exc:  # noqa: BLE001
                    raise _device_failed(f"robot {features.robot}", "send_action", exc) from None
                if not stats.actions_applied and run_ns is not None:
                    end_ns = time.monotonic_ns() + run_ns  # `seconds` count from here
                stats.actions_applied += 1
                if command.step != stats.last_step:
                    stats.action_steps += 1
                    stats.last_step = command.step
                sent = sent_at.pop(command.obs_seq, None)
                if sent is not None:
                    stats.latency.record_ns(time.monotonic_ns() - sent)
            else:
                stats.holds[command.reason] = stats.holds.get(command.reason, 0) + 1
            stats.ticks += 1
            stats.missed_ticks = pacer.missed_ticks
            stats.work.record_ns(time.monotonic_ns() - begun)
            if report is not None and step % report_every == 0:
                report.write(json.dumps(stats.as_dict(client, features)) + "\n")
                report.flush()
    except KeyboardInterrupt:
        pass  # the operator ends the run: its summary follows
    stats.missed_ticks = pacer.missed_ticks
    return stats.as_dict(client, features)


def _device_failed(device: str, call: str, exc: Exception) -> DeviceError:
    said = (str(exc).strip().splitlines() or [""])[0]
    return DeviceError(
        f"{device}'s {call} failed: {type(exc).__name__}" + (f": {said}" if said else "")
    )
