"""Simulated robots for scripts/fleet/bench_fleet.py, each in its own Python process with its own
TempoClient, as drivers run on real robots. (As threads of the benchmark's process they shared
its interpreter lock with the daemon: on an H100 host, 16 ACT-ALOHA robots writing three
480x640 frames each at 50 Hz held it long enough that chunks reached them 2-4 s late and the
daemon missed ticks.)

    robot = RobotProcess(endpoint, "r0", spec, None, period_s=0.02, ticks_per_request=1,
                         drive="tick")
    robot.connect()          # False: refused (robot.run.refused holds the daemon's sentence)
    robot.start(); ...; robot.stop(); robot.join()   # robot.run: what it saw

How a robot times its observations (`drive`):
- "tick": it sends one each time an action or hold of a newer control tick reaches it, as a
  driver stepped by the daemon's stream publishes each cycle's reading; the daemon asks its
  policy every query period with the newest;
- "clock": it sends one every robot period (control period x query period) by its own clock.
  Its phase against the daemon's tick is then whatever it happens to be, and the daemon cannot
  choose it: a chunk computed in t ms misses the next tick whenever the observation lands
  within t ms before that tick, however fast the GPU;
- "eager": it sends the next one as soon as the chunk for the last one arrives (demand
  without a rate, for saturation).
Each records, per chunk, the observation-to-action time: from sending an observation to the
first action computed from it reaching the robot.

The deadline rule (printed with the results) counts the daemon's control steps, not
milliseconds, so the verdict does not swing with the machine's timing noise: a chunk is on time
when its first action is for one of the Q control steps after the newest step the robot had
seen when it sent the observation, Q being the robot's period in steps (its policy's query
period). A chunk later than that only arrives after the robot has asked for the next one. (A
robot process that polls late can still see a later action of the chunk first and count it
late.) Observations the daemon never asks about (it takes the newest once a query period) are
not chunks; a period that brought the robot no new chunk is counted apart (`unserved_periods`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from controller.errors import HandshakeRefused
from controller.wire.client import TempoClient
from scripts.measure import percentile

DEADLINE_RULE = (
    "a chunk is on time when its first action is for one of the Q control steps after the newest "
    "step the robot had seen when it sent the observation the chunk was computed from (Q: the "
    "robot's period in steps, its policy's query period)"
)
DRIVES = ("tick", "clock", "eager")
# An eager robot whose observation got no chunk (skipped for a newer one) sends again after this.
EAGER_RESEND_S = 1.0


@dataclass
class RobotRun:
    """What one simulated robot saw."""

    name: str
    policy: str
    period_s: float
    ticks_per_request: int = 1  # Q of DEADLINE_RULE
    drive: str = "tick"  # one of DRIVES
    latencies_ms: list[float] = field(default_factory=list)
    arrivals_s: list[float] = field(default_factory=list)  # monotonic, each chunk's arrival
    late: int = 0  # chunks past the deadline (DEADLINE_RULE)
    late_at_s: list[float] = field(default_factory=list)  # each one's arrival, s into the run
    unserved_periods: int = 0  # robot periods between two chunks' first actions with no chunk
    actions: int = 0
    lost: int = 0  # gaps in the daemon's action/hold sequence numbers
    expired: int = 0  # actions that reached the client past their own deadline
    reconnects: int = 0  # fresh handshakes after the daemon went silent (1 s) or forgot us
    refused: str | None = None  # the daemon's sentence, when it refused this robot's hello

    def summary(self) -> dict[str, Any]:
        times = self.latencies_ms
        return {
            "robot": self.name,
            "policy": self.policy,
            "rate_hz": 1.0 / self.period_s if self.period_s > 0 else None,
            "deadline_ms": self.period_s * 1e3 if self.period_s > 0 else None,
            "deadline_ticks": self.ticks_per_request if self.period_s > 0 else None,
            "drive": self.drive,
            "chunks": len(times),
            "p50_ms": percentile(times, 50),
            "p99_ms": percentile(times, 99),
            "late_chunks": self.late,
            "late_at_s": [round(t, 3) for t in self.late_at_s],
            "unserved_periods": self.unserved_periods,
            "actions": self.actions,
            "lost": self.lost,
            "expired": self.expired,
            "reconnects": self.reconnects,
            "refused": self.refused,
        }


class SimulatedRobot:
    """A robot of `spec` (the policy's PolicySpec) served by `policy` (None: the default),
    asking for a chunk every `ticks_per_request` control ticks (`period_s`: 0 when eager)."""

    def __init__(self, endpoint: str, name: str, spec: Any, policy: str | None,
                 period_s: float, ticks_per_request: int, drive: str) -> None:  # fmt: skip
        self.run = RobotRun(name, policy or "default", period_s, ticks_per_request, drive)
        rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same frames every run
        cameras = {c.name: (c.height, c.width) for c in spec.cameras}
        self._frames = {n: rng.integers(0, 256, (*hw, 3), np.uint8) for n, hw in cameras.items()}
        self._state_size = spec.state_size
        task = "pick up the cube" if getattr(spec, "prompt", None) is not None else None
        self.client = TempoClient(endpoint, name, list(spec.joint_names), cameras,
                                  spec.state_size, handshake_timeout_s=60, policy=policy,
                                  task=task)  # fmt: skip
        # Per observation in flight: when it was sent and the newest tick seen then.
        self._sent: dict[int, tuple[int, int]] = {}
        self._tick = 0
        self.last_step = -1  # the newest control tick (the daemon's step) an action or hold had
        self._last_chunk_step = -1  # the step of the last new chunk's first action

    def connect(self) -> bool:
        """Handshake; False (the refusal recorded) when the daemon refused this robot."""
        try:
            self.client.connect()
        except HandshakeRefused as exc:
            self.run.refused = str(exc)
            self.client.close()
            return False
        return True

    def send(self) -> int | None:
        state = np.full(self._state_size, 0.1 * np.sin(self._tick / 50), np.float32)
        self._tick += 1
        seq = self.client.send_observation(self._frames, state)
        if seq is not None:
            self._sent[seq] = (time.monotonic_ns(), self.last_step)
        return seq

    def receive(self, timeout_s: float) -> int | None:
        """Wait up to `timeout_s`; the observation whose chunk just arrived, if one did."""
        command = self.client.receive(timeout_s=timeout_s)
        self.last_step = max(self.last_step, command.step)
        if command.kind != "action" or command.obs_seq is None:
            return None
        sent = self._sent.pop(command.obs_seq, None)
        if sent is None:
            return None  # an action of a chunk seen already
        for older in [seq for seq in self._sent if seq < command.obs_seq]:
            del self._sent[older]  # skipped for a newer observation: never answered
        now = time.monotonic_ns()
        sent_ns, step_then = sent
        if self._last_chunk_step >= 0 and self.run.period_s > 0:
            gap = command.step - self._last_chunk_step
            self.run.unserved_periods += max(0, gap // self.run.ticks_per_request - 1)
        self._last_chunk_step = command.step
        self.run.latencies_ms.append((now - sent_ns) / 1e6)
        self.run.arrivals_s.append(now / 1e9)
        # Judged only once the robot has had a tick to count from (DEADLINE_RULE).
        if self.run.period_s > 0 and step_then >= 0:
            if command.step - step_then > self.run.ticks_per_request:
                self.run.late += 1
                self.run.late_at_s.append(now / 1e9 - self.run.arrivals_s[0])
        return command.obs_seq

    def close(self) -> None:
        counters = self.client.counters
        self.run.actions, self.run.lost = counters.actions, counters.lost
        self.run.expired, self.run.reconnects = counters.expired, counters.reconnects
        self.client.close()


def on_ticks(robot: SimulatedRobot, stop: threading.Event) -> None:
    """drive "tick": an observation at once, then one each time the daemon's stream brings a
    newer tick, until `stop`; the daemon asks its policy every query period with the newest."""
    sent_at: int | None = None  # the tick of the last observation; -1: before any tick
    try:
        while not stop.is_set():
            if sent_at is None or robot.last_step > sent_at:
                sent_at = robot.last_step
                robot.send()
            robot.receive(0.002)
    finally:
        robot.close()


def paced(robot: SimulatedRobot, stop: threading.Event) -> None:
    """drive "clock": an observation every robot period by its own clock until `stop`."""
    period = robot.run.period_s
    start = time.monotonic()
    ticks = 0
    try:
        while not stop.is_set():
            robot.send()
            ticks += 1
            next_at = start + ticks * period
            while (left := next_at - time.monotonic()) > 0:
                robot.receive(min(left, 0.002))
    finally:
        robot.close()


def eager(robot: SimulatedRobot, stop: threading.Event) -> None:
    """drive "eager": the next observation as soon as the chunk for the last one arrived."""
    try:
        while not stop.is_set():
            seq = robot.send()
            given_up = time.monotonic() + EAGER_RESEND_S
            while not stop.is_set() and time.monotonic() < given_up:
                if robot.receive(0.002) == seq:
                    break
    finally:
        robot.close()


DRIVEN_BY = {"tick": on_ticks, "clock": paced, "eager": eager}


class RobotProcess:
    """A SimulatedRobot in a child process (this file run with --child), driven as `drive`.
    The two talk in JSON lines: the plan, then `connect`, `go` and `stop` down the child's
    stdin; the refusal (or none) and at the end the RobotRun up its stdout."""

    def __init__(self, endpoint: str, name: str, spec: Any, policy: str | None,
                 period_s: float, ticks_per_request: int, drive: str) -> None:  # fmt: skip
        if drive not in DRIVES:
            raise ValueError(f"drive {drive!r} is not one of {DRIVES}")
        self.run = RobotRun(name, policy or "default", period_s, ticks_per_request, drive)
        plan = {
            "endpoint": endpoint, "name": name, "policy": policy, "period_s": period_s,
            "ticks_per_request": ticks_per_request, "drive": drive,
            "state_size": spec.state_size,
            "joint_names": list(spec.joint_names),
            "cameras": [[c.name, c.height, c.width] for c in spec.cameras],
            "prompt": getattr(spec, "prompt", None) is not None,
        }  # fmt: skip
        # A session of its own: a terminal's Ctrl-C is for the benchmark, which ends its robots
        # by closing their input (close()).
        self._child = subprocess.Popen(
            [sys.executable, "-m", __spec__.name, "--child"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        self._to, self._from = self._child.stdin, self._child.stdout  # both piped, never None
        self._say(json.dumps(plan))

    def _say(self, line: str) -> None:
        try:
            self._to.write(line + "\n")  # type: ignore[union-attr]
            self._to.flush()  # type: ignore[union-attr]
        except OSError:  # BrokenPipeError: the child ended; _hear says how
            pass

    def _hear(self) -> dict[str, Any]:
        line = self._from.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"robot {self.run.name}'s process ended (code {self._child.wait()})")
        return dict(json.loads(line))

    def connect(self) -> bool:
        """Handshake; False (the refusal recorded, the process ended) when refused."""
        self._say("connect")
        self.run.refused = self._hear()["refused"]
        if self.run.refused is not None:
            self._child.wait()
            return False
        return True

    def start(self) -> None:
        self._say("go")

    def stop(self) -> None:
        self._say("stop")

    def join(self) -> None:
        """Wait for the child's RobotRun and take it as this robot's."""
        self.run = RobotRun(**self._hear())
        self._child.wait()

    def close(self, timeout_s: float = 5.0) -> None:
        """End the child whatever state it is in: the end of its input stops it (it stops
        driving and exits), else it is killed."""
        try:
            self._to.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self._child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()


def _child() -> int:
    """The child's side of RobotProcess; the end of its input (the benchmark gone) ends it."""
    plan = json.loads(sys.stdin.readline())
    cameras = [SimpleNamespace(name=n, height=h, width=w) for n, h, w in plan["cameras"]]
    spec = SimpleNamespace(
        cameras=cameras,
        state_size=plan["state_size"],
        joint_names=plan["joint_names"],
        prompt=plan["prompt"] or None,
    )
    robot = SimulatedRobot(plan["endpoint"], plan["name"], spec, plan["policy"],
                           plan["period_s"], plan["ticks_per_request"],
                           plan["drive"])  # fmt: skip
    if not sys.stdin.readline():  # connect
        return 0
    connected = robot.connect()
    print(json.dumps({"refused": robot.run.refused}), flush=True)
    if not connected:
        return 0
    if not sys.stdin.readline():  # go
        robot.close()
        return 0
    stop = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    DRIVEN_BY[plan["drive"]](robot, stop)
    try:
        print(json.dumps(dataclasses.asdict(robot.run)), flush=True)
    except BrokenPipeError:  # the benchmark is gone: nobody to tell
        pass
    return 0


def run_robots(robots: list[RobotProcess], seconds: float,
               status: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """Connect every robot, drive them all for `seconds`, stop them; `status()` read just
    before they stop (while every robot is still served), returned."""
    with all_closed(robots):
        for robot in robots:
            if not robot.connect():
                raise RuntimeError(f"robot {robot.run.name} was refused: {robot.run.refused}")
        for robot in robots:
            robot.start()
        time.sleep(seconds)
        snapshot = status() if status is not None else {}
        stop_and_join(robots)
    return snapshot


@contextlib.contextmanager
def all_closed(robots: list[RobotProcess]) -> Iterator[None]:
    """Every robot's process ended on the way out, however the run ended."""
    try:
        yield
    finally:
        for robot in robots:
            robot.close()


def stop_and_join(robots: list[RobotProcess]) -> None:
    """Tell every robot to stop, then take each one's RobotRun (they stop together)."""
    for robot in robots:
        robot.stop()
    for robot in robots:
        robot.join()


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    sys.exit(_child())
