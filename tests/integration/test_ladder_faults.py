"""The tier ladder through a real daemon and client: injected faults demote without a missed tick.

The compiled tier uses torch.compile's `eager` debug backend here (it traces like inductor but
needs no C++ compile), so the CPU suite stays fast; the demotion logic is the same.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from controller.inference.faults import FaultPlan
from controller.inference.runner import Runner
from controller.wire.client import TempoClient
from policies.catalog import build_tensor_policy
from tests.conftest import ipc_config, running_daemon

JOINTS = [f"joint_{i}" for i in range(6)]
FROM_10 = range(10, sys.maxsize)


def ladder_daemon(tmp_path, plan: FaultPlan, *extra: str):
    config = ipc_config(
        tmp_path,
        "control.rate_hz=50",
        "runner.top_tier=compiled",
        "runner.compile_backend=eager",
        "runner.step_budget_ms=15",
        *extra,
    )
    policy = build_tensor_policy(config.policy, config.robot)
    runner = Runner(policy, config.runner, device="cpu", faults={"compiled": plan})
    runner.start()
    assert runner.tier == "compiled"
    return config, runner


def drive(config, seconds: float) -> list:
    """A driver streaming observations at 100 Hz; returns every distinct command received."""
    commands = []
    with TempoClient(config.server.bind, "arm0", JOINTS, {"front": (96, 128)}, 6) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            client.send_observation(
                {"front": np.zeros((96, 128, 3), np.uint8)}, np.zeros(6, np.float32)
            )
            command = client.receive(timeout_s=0.01)
            if command.step >= 0 and (not commands or command.step != commands[-1].step):
                commands.append(command)
    return commands


def assert_every_tick_acted(commands: list) -> None:
    acting = commands[[c.kind for c in commands].index("action") :]
    steps = [c.step for c in acting]
    assert all(c.kind == "action" for c in acting), [c.reason for c in acting if c.kind != "action"]
    assert steps == list(range(steps[0], steps[0] + len(steps))), "a tick was missed"
    assert all(np.isfinite(c.action).all() for c in acting)


@pytest.mark.parametrize(
    "plan, cause",
    [
        (FaultPlan(raise_on=FROM_10), "exception"),
        (FaultPlan(nan_on=FROM_10), "non_finite"),
        (FaultPlan(slow_on=FROM_10, slow_s=0.03), "overrun"),
    ],
)
def test_fault_demotes_to_eager_without_a_missed_tick(tmp_path, plan, cause):
    config, runner = ladder_daemon(tmp_path, plan)
    with running_daemon(config, runner) as daemon:
        commands = drive(config, 2.0)
        assert runner.tier == "eager_fp32"
        assert [d["cause"] for d in runner.status()["demotions"]] == [cause]
        assert daemon.status()["policy"]["tier"] == "eager_fp32"
    assert_every_tick_acted(commands)


def test_no_fault_keeps_the_top_tier(tmp_path):
    config, runner = ladder_daemon(tmp_path, FaultPlan())
    with running_daemon(config, runner):
        commands = drive(config, 1.0)
    assert runner.tier == "compiled" and runner.demotions == []
    assert_every_tick_acted(commands)
