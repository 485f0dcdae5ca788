"""Four robots on the tiny policy through a real daemon, batch sizes [1, 2, 4]: every robot is
served, none refused, and the runner's status shows steps of more than one robot (in the
daemon's own process, fed by its thread, and in an inference process, fed by the loop)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.inference.build import build_policy
from controller.link.remote_policy import RemotePolicy
from controller.runner_config import RunnerConfig
from controller.wire.client import TempoClient
from policies.tiny.policy import build_tiny_policy
from tests.conftest import ipc_config, running_daemon, wait_for
from tests.integration.tiny_batch_inference import BATCH_SIZES

JOINTS = [f"joint_{i}" for i in range(6)]
CAMERAS = {"cam0": (48, 64), "cam1": (48, 64)}
CHILD = Path(__file__).with_name("tiny_batch_inference.py")
ROBOTS = 4


def frames(value: int) -> dict[str, np.ndarray]:
    return {name: np.full((*hw, 3), value, np.uint8) for name, hw in CAMERAS.items()}


def batched_steps(status: dict[str, Any]) -> int:
    """Steps of more than one robot, as the runner reports them (an inference process's
    report rides on a chunk at most every half second)."""
    by_bucket = status["policy"].get("steps_by_bucket", {})
    return sum(v for k, v in by_bucket.items() if int(k) > 1)


def serve_four_robots(daemon: Any) -> dict[str, Any]:
    """Four robots streaming until each has had 10 actions and the runner reports steps of
    more than one robot; returns the daemon's status."""
    with ExitStack() as stack:
        clients = [
            stack.enter_context(
                TempoClient(daemon.endpoint, f"arm{k}", JOINTS, CAMERAS, 6, handshake_timeout_s=10)
            )
            for k in range(ROBOTS)
        ]
        actions = [0] * ROBOTS

        def all_served() -> bool:
            for k, client in enumerate(clients):
                client.send_observation(frames(10 * k), np.full(6, 0.1 * k, np.float32))
            for k, client in enumerate(clients):
                command = client.receive(timeout_s=0.01)
                actions[k] += command is not None and command.kind == "action"
            return min(actions) >= 10 and batched_steps(daemon.status()) > 0

        wait_for(all_served, timeout=90, interval=0.0)
        return daemon.status()  # type: ignore[no-any-return]


def check(status: dict[str, Any]) -> None:
    assert len(status["robots"]) == ROBOTS
    assert status["input_faults"] == 0 and status["inference_failures"] == 0
    assert batched_steps(status) > 0
    assert status["policy"]["batch_sizes"] == [1, 2, 4]


def test_four_robots_batched_in_the_daemons_process(tmp_path: Path) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=50", "execution.batch_sizes=[1, 2, 4]")
    runner = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=2)
    policy = build_policy(config.policy, config.robot, runner, model=build_tiny_policy(),
                          batch_sizes=config.execution.batch_sizes)  # fmt: skip
    with running_daemon(config, policy) as daemon:
        check(serve_four_robots(daemon))


@pytest.fixture
def remote() -> Iterator[RemotePolicy]:
    policy = RemotePolicy([sys.executable, str(CHILD)], standby=False, batching=(BATCH_SIZES, 0))
    policy.start()
    yield policy
    policy.stop()


def test_four_robots_batched_in_an_inference_process(tmp_path: Path, remote: RemotePolicy) -> None:
    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, remote) as daemon:
        check(serve_four_robots(daemon))
