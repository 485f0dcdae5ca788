"""A simulated robot driver (`tempo sim-robot`): joints, cameras and a driver loop, no hardware.

Each joint follows its commanded target with first-order dynamics; each camera frame is drawn
from the joint state (one bar per joint whose height is its angle), so a policy that looks at the
images sees the robot move. The driver loop is the one a real driver would run: observations at
camera rate through the client library, actions applied only within their deadline.
Imports no torch: it runs where a real driver would.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from controller.daemon.pacer import Pacer
from controller.observe.histogram import Histogram
from controller.wire.client import TempoClient


class SimulatedArm:
    def __init__(
        self,
        joints: Sequence[str],
        cameras: Mapping[str, tuple[int, int]],
        time_constant_s: float = 0.08,
        seed: int = 0,
        textured: bool = False,
    ) -> None:
        """`textured`: frames carry a fixed sensor-noise texture, so they compress as a
        camera's do (flat bars compress to almost nothing: a recorder's cost would be hidden)."""
        self.joints = tuple(joints)
        self.cameras = dict(cameras)
        self.time_constant_s = time_constant_s
        rng = np.random.default_rng(seed)
        self.position = rng.uniform(-0.3, 0.3, len(self.joints)).astype(np.float32)
        self.target = self.position.copy()
        # Each camera tints the scene differently, so cameras are distinguishable.
        self._tints = {name: rng.integers(60, 255, 3, dtype=np.uint8) for name in cameras}
        noise = np.random.default_rng(seed + 1)
        self._textures = {
            name: noise.integers(0, 32, (height, width, 3), dtype=np.uint8)
            for name, (height, width) in cameras.items()
        } if textured else {}  # fmt: skip

    def command(self, target: np.ndarray) -> None:
        self.target[:] = target

    def advance(self, dt: float) -> None:
        alpha = 1.0 - np.exp(-dt / self.time_constant_s)
        self.position += (self.target - self.position) * np.float32(alpha)

    def render(self) -> dict[str, np.ndarray]:
        """One fresh frame per camera (the client sends without copying, so a frame is never
        reused); bars grow with joint angle (angles clipped to +-pi)."""
        n = len(self.joints)
        fraction = (np.clip(self.position, -np.pi, np.pi) + np.pi) / (2 * np.pi)
        frames = {}
        for name, (height, width) in self.cameras.items():
            frame = np.full((height, width, 3), 16, dtype=np.uint8)
            tops = (height * (1.0 - fraction)).astype(int)
            bar = max(width // max(n, 1), 1)
            for i in range(n):
                frame[tops[i] :, i * bar : (i + 1) * bar - 1] = self._tints[name]
            texture = self._textures.get(name)
            if texture is not None:
                np.bitwise_xor(frame, texture, out=frame)
            frames[name] = frame
        return frames


@dataclass
class DriverStats:
    started_ns: int
    observations: int = 0
    actions_applied: int = 0
    holds: int = 0
    distinct_steps: int = 0
    last_step: int = -1
    travel_rad: float = 0.0  # how far the joints moved, summed over joints and ticks

    loop_hz: float = 200.0  # the driver loop's rate: actions_applied and holds count its turns

    def as_dict(self, latency: Histogram, client: TempoClient) -> dict[str, Any]:
        elapsed = (time.monotonic_ns() - self.started_ns) / 1e9
        p50, p99 = (float("nan") if s is None else s * 1e3 for s in latency.percentiles((50, 99)))
        return {
            "elapsed_s": elapsed,
            "loop_hz": self.loop_hz,
            "observations": self.observations,
            "actions_applied": self.actions_applied,
            "holds": self.holds,
            "travel_rad": self.travel_rad,
            "action_hz": self.distinct_steps / elapsed if elapsed > 0 else 0.0,
            "latency_ms_p50": p50,
            "latency_ms_p99": p99,
            "expired": client.counters.expired,
            "reconnects": client.counters.reconnects,
            "received": client.counters.actions + client.counters.holds,
            "lost": client.counters.lost,
            "duplicated": client.counters.duplicated,
            "errors": client.counters.errors,
            "last_error": client.counters.last_error,
            # Frames meant for the shared slots that went on the socket: every slot was held.
            "frames_on_socket": client.counters.frames_on_socket,
        }


def run_driver(
    client: TempoClient,
    arm: SimulatedArm,
    seconds: float,
    camera_hz: float = 30.0,
    physics_hz: float = 200.0,
    report: TextIO | None = None,
    report_every_s: float = 0.5,
    first_action_wait_s: float = 60.0,
) -> dict[str, Any]:
    """Drive `arm` against the daemon for `seconds` from its first action; returns a summary
    (and streams JSON lines to `report` if given). A first policy step on a loaded CPU can take
    seconds, so the run waits up to `first_action_wait_s` more for it rather than end without
    having moved (`seconds` 0: no wait)."""
    pacer = Pacer(int(1e9 / physics_hz), spin_ns=200_000)
    camera_every = max(1, round(physics_hz / camera_hz))
    report_every = max(1, round(physics_hz * report_every_s))
    latency = Histogram()  # observation sent -> first action from it, whole run
    sent_at: dict[int, int] = {}  # observation seq -> our send time, to time the round trip
    stats = DriverStats(started_ns=time.monotonic_ns(), loop_hz=physics_hz)
    run_ns = int(seconds * 1e9)
    end_ns = stats.started_ns + run_ns + (int(first_action_wait_s * 1e9) if run_ns else 0)
    moved = False
    pacer.start()
    dt = 1.0 / physics_hz
    while time.monotonic_ns() < end_ns:
        tick = pacer.wait()
        command = client.receive()
        if command.kind == "action" and command.action is not None:
            if not moved:  # the run's `seconds` count from here
                moved, end_ns = True, min(end_ns, time.monotonic_ns() + run_ns)
            arm.command(command.action)
            stats.actions_applied += 1
            if command.step != stats.last_step:
                stats.distinct_steps += 1
                stats.last_step = command.step
            sent = sent_at.pop(command.obs_seq, None)
            if sent is not None:
                latency.record_ns(time.monotonic_ns() - sent)
        else:
            stats.holds += 1
        before = arm.position.copy()
        arm.advance(dt)
        stats.travel_rad += float(np.abs(arm.position - before).sum())
        if tick % camera_every == 0:
            seq = client.send_observation(arm.render(), arm.position)
            if seq is not None:
                stats.observations += 1
                sent_at[seq] = time.monotonic_ns()
                # Forget observations no action ever named (they were superseded).
                for old in [s for s in sent_at if s < seq - 64]:
                    del sent_at[old]
        if report is not None and tick % report_every == 0:
            report.write(json.dumps(stats.as_dict(latency, client)) + "\n")
            report.flush()
    summary = stats.as_dict(latency, client)
    if report is not None:
        report.write(json.dumps({"final": True, **summary}) + "\n")
        report.flush()
    return summary


def main_sim_robot(
    endpoint: str,
    joints: Sequence[str],
    cameras: Mapping[str, tuple[int, int]],
    state_size: int,
    seconds: float,
    camera_hz: float,
    json_lines: bool,
    robot: str = "sim-arm",
    frames_in_place: bool | None = None,
    textured: bool = False,
) -> int:
    arm = SimulatedArm(joints, cameras, textured=textured)
    if state_size != len(joints):
        print(
            f"tempo sim-robot: the policy expects a state of {state_size} values but the simulated "
            f"arm reports its {len(joints)} joint positions; use a policy whose state is the "
            "joint positions",
            file=sys.stderr,
        )
        return 2
    client = TempoClient(
        endpoint, robot, joints, cameras, state_size, frames_in_place=frames_in_place
    )
    client.connect()
    try:
        summary = run_driver(
            client, arm, seconds, camera_hz=camera_hz, report=sys.stdout if json_lines else None
        )
    finally:
        client.close()
    if not json_lines:
        print(json.dumps(summary, indent=2))
    return 0
