"""SmolVLA served end to end on the CPU: `tempo serve` with policy.path the demo's checkpoint,
the policy in its own inference process, the control process tokenizing each robot's task with
the checkpoint's Hugging Face tokenizer; two robots, one with its own task and one on the
default task, get finite actions; `tempo checkpoint inspect` describes the checkpoint."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from controller.observe.status_server import request_status
from controller.wire.client import TempoClient
from tests.conftest import daemon_process

pytest.importorskip("tokenizers", reason="SmolVLA's tokenizer needs the tokenizers package")

JOINTS = [f"joint_{i}" for i in range(6)]
FRAME = np.full((96, 128, 3), 90, np.uint8)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from policies.smolvla.demo import demo_settings

    settings = demo_settings(tmp_path_factory.mktemp("smolvlademo"))
    return Path(settings[1].split("=", 1)[1])


def client(tmp_path: Path, robot: str, task: str | None = None) -> TempoClient:
    return TempoClient(
        f"ipc://{tmp_path}/tempo.sock", robot, JOINTS, {"front": (96, 128)}, 6, task=task,
        handshake_timeout_s=20.0,
    )  # fmt: skip


def test_two_robots_with_their_tasks_get_smolvla_actions(tmp_path: Path, demo_dir: Path) -> None:
    with daemon_process(tmp_path, f"policy.path={demo_dir}"):
        robots = [client(tmp_path, "left", "wave"), client(tmp_path, "right")]
        try:
            for robot in robots:
                robot.connect()
            got: list[list] = [[], []]
            deadline = time.monotonic() + 90.0
            state = np.zeros(6, np.float32)
            while min(len(g) for g in got) < 3 and time.monotonic() < deadline:
                for i, robot in enumerate(robots):
                    robot.send_observation({"front": FRAME.copy()}, state)
                    command = robot.receive(timeout_s=0.02)
                    if command.kind == "action":
                        got[i].append(command)
            assert min(len(g) for g in got) >= 3, [len(g) for g in got]
            for received in got:
                assert all(c.action.shape == (6,) and np.isfinite(c.action).all() for c in received)
            status = request_status(f"ipc://{tmp_path}/status.sock", 5.0)
            assert status is not None
            tasks = {r["robot"]: r["task"] for r in status["robots"]}
            assert tasks == {"left": "wave", "right": "pick up the cube"}  # the demo's default
        finally:
            for robot in robots:
                robot.close()


def test_checkpoint_inspect_describes_the_demo(demo_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "checkpoint", "inspect", str(demo_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "action expert: 48 wide (0.75 x), 4 layers: 2 self-attention" in result.stdout
    assert "tokenizer/tokenizer.json" in result.stdout
