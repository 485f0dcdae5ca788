"""The fleet benchmark's deadline rule counts the daemon's control steps, not milliseconds; a
period that brought no new chunk is counted; a robot driven by ticks sends an observation per
tick it receives."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from controller.wire.commands import ClientCounters, Command
from scripts.fleet import fleet_robots


class _ScriptedClient:
    """Stands in for TempoClient: receive() hands out the scripted commands in order, then
    holds; send_observation numbers observations 1, 2, ..."""

    def __init__(self, commands: list[Command], on_empty: Any = None) -> None:
        self.commands = list(commands)
        self.sent = 0
        self.counters = ClientCounters()
        self.on_empty = on_empty

    def send_observation(self, frames: dict, state: np.ndarray) -> int:
        self.sent += 1
        return self.sent

    def receive(self, timeout_s: float = 0.0) -> Command:
        if self.commands:
            return self.commands.pop(0)
        if self.on_empty is not None:
            self.on_empty()
        return Command("hold", reason="no_action")

    def close(self) -> None:
        pass


def _robot(ticks_per_request: int, drive: str = "tick") -> Any:
    spec = SimpleNamespace(cameras=[], state_size=2, joint_names=["a", "b"], prompt=None)
    robot = fleet_robots.SimulatedRobot(
        "tcp://127.0.0.1:1", "r0", spec, None, 0.02 * ticks_per_request, ticks_per_request, drive
    )
    robot.client.close()
    return robot


def _tick(step: int, obs_seq: int | None = None) -> Command:
    if obs_seq is None:
        return Command("hold", step=step, reason="no_action")
    return Command("action", action=np.zeros(2, np.float32), step=step, obs_seq=obs_seq)


def test_a_chunk_is_late_only_past_its_query_period_in_ticks() -> None:
    robot = _robot(ticks_per_request=2)
    robot.client = _ScriptedClient([_tick(10), _tick(12, 1), _tick(13), _tick(16, 2)])
    robot.receive(0)  # tick 10
    robot.send()  # observation 1, sent at tick 10
    assert robot.receive(0) == 1  # first action at tick 12: two ticks, on time
    robot.receive(0)  # tick 13
    robot.send()  # observation 2, sent at tick 13
    assert robot.receive(0) == 2  # first action at tick 16: three ticks, late
    assert robot.run.late == 1
    assert len(robot.run.latencies_ms) == 2


def test_a_period_that_brought_no_new_chunk_is_counted() -> None:
    robot = _robot(ticks_per_request=5)
    # Chunks whose first actions are for steps 10, 15 and 25, each sent for just before it
    # (on time): the period 15..25 had one chunk where two were due.
    script = []
    for seq, first_step in ((1, 10), (2, 15), (3, 25)):
        script += [_tick(first_step - 1), _tick(first_step, seq)]
    robot.client = _ScriptedClient(script)
    for _ in range(3):
        robot.receive(0)
        robot.send()
        robot.receive(0)
    assert robot.run.late == 0
    assert robot.run.unserved_periods == 1


def test_an_observation_sent_before_any_tick_is_not_judged() -> None:
    robot = _robot(ticks_per_request=1)
    robot.client = _ScriptedClient([_tick(500, 1)])
    robot.send()  # no tick seen yet: nothing to count from
    assert robot.receive(0) == 1
    assert robot.run.late == 0 and len(robot.run.latencies_ms) == 1


def test_a_robot_driven_by_ticks_sends_once_per_newer_tick() -> None:
    robot = _robot(ticks_per_request=3)
    stop = threading.Event()
    # Ticks 1..6, each seen twice (the robot polls faster than the daemon ticks), then none.
    ticks = [_tick(step) for step in range(1, 7) for _ in range(2)]
    robot.client = _ScriptedClient(ticks, on_empty=stop.set)
    fleet_robots.on_ticks(robot, stop)
    # Sent at once (before any tick), then once at each of ticks 1..6.
    assert robot.client.sent == 7
