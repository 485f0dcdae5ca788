"""pi0 and pi0.5 served end to end on the CPU: `tempo serve` with policy.path a tiny demo
directory (LeRobot's layout), the policy in its own inference process, robots with their own
tasks getting finite actions, the robots it must refuse refused in one sentence, and
`tempo checkpoint inspect` on the same directory."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from controller.config import load_config
from controller.errors import HandshakeRefused
from controller.observe.status_server import request_status
from controller.wire.client import TempoClient
from policies.pi0.demo import write_demo_checkpoint
from tests.conftest import daemon_process

JOINTS = [f"joint_{i}" for i in range(6)]
CAMERAS = {"front": (96, 128)}
FRAME = {"front": np.full((96, 128, 3), 90, np.uint8)}
LONG_TASK = " ".join(["put the cube in the bin"] * 4)  # over the demo's 24 tokens


@pytest.fixture(scope="module")
def demo_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pi0demo")
    return {family: write_demo_checkpoint(root / family, family) for family in ("pi0", "pi05")}


def client(tmp_path: Path, robot: str, task: str | None = None, **kwargs) -> TempoClient:
    cameras = kwargs.pop("cameras", CAMERAS)
    return TempoClient(
        f"ipc://{tmp_path}/tempo.sock", robot, JOINTS, cameras, 6, task=task,
        handshake_timeout_s=20.0, **kwargs,
    )  # fmt: skip


def actions_of(clients: list[TempoClient], count: int = 3, timeout_s: float = 60.0) -> list[list]:
    """Each robot streams observations until it has received `count` actions; returns them."""
    got: list[list] = [[] for _ in clients]
    deadline = time.monotonic() + timeout_s
    state = np.zeros(6, np.float32)
    while min(len(g) for g in got) < count and time.monotonic() < deadline:
        for i, robot in enumerate(clients):
            robot.send_observation({"front": FRAME["front"].copy()}, state)
            command = robot.receive(timeout_s=0.02)
            if command.kind == "action" and (not got[i] or got[i][-1] is not command):
                got[i].append(command)
    assert min(len(g) for g in got) >= count, [len(g) for g in got]
    return got


def refusal(robot: TempoClient) -> str:
    with pytest.raises(HandshakeRefused) as caught:
        robot.connect()
    robot.close()
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def daemon_log(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in tmp_path.glob("daemon-*.log"))


def test_two_robots_with_their_own_tasks_get_pi0_actions(tmp_path, demo_dirs) -> None:
    config = load_config(None, [])
    assert config.supervision.inference_process  # the default: the policy in its own process
    with daemon_process(tmp_path, f"policy.path={demo_dirs['pi0']}"):
        status = request_status(f"ipc://{tmp_path}/status.sock", 5.0)
        assert status is not None and status["policy"]["process"]["pid"] is not None
        robots = [
            client(tmp_path, "left", "pick up the cube"),
            client(tmp_path, "right", LONG_TASK),
        ]
        try:
            for robot in robots:
                robot.connect()
            for received in actions_of(robots):
                for command in received:
                    assert command.action.shape == (6,) and np.isfinite(command.action).all()
            status = request_status(f"ipc://{tmp_path}/status.sock", 5.0)
            assert status is not None
            tasks = {r["robot"]: r["task"] for r in status["robots"]}
            assert tasks["left"] == "pick up the cube"
            assert tasks["right"].startswith(LONG_TASK[:60])  # status shortens a long one

            wrong_camera = client(tmp_path, "blind", "wave", cameras={"wrist": (96, 128)})
            assert "front" in refusal(wrong_camera)
            no_task = refusal(client(tmp_path, "quiet"))
            assert "names no default task" in no_task and "task=" in no_task
        finally:
            for robot in robots:
                robot.close()
    truncated = [line for line in daemon_log(tmp_path).splitlines() if "tokens, more than" in line]
    assert len(truncated) == 1 and "robot right" in truncated[0], truncated


def test_a_robot_without_a_task_gets_the_default_task_of_pi05(tmp_path, demo_dirs) -> None:
    overrides = (f"policy.path={demo_dirs['pi05']}", "policy.prompt.default_task=wave")
    with daemon_process(tmp_path, *overrides):
        robot = client(tmp_path, "quiet")
        try:
            robot.connect()
            (received,) = actions_of([robot])
            assert all(np.isfinite(c.action).all() and c.action.shape == (6,) for c in received)
            status = request_status(f"ipc://{tmp_path}/status.sock", 5.0)
            assert status is not None
            assert [(r["robot"], r["task"]) for r in status["robots"]] == [("quiet", "wave")]
        finally:
            robot.close()


def test_a_tokenizer_of_another_vocabulary_stops_the_daemon_at_start(tmp_path, demo_dirs) -> None:
    other = Path(__file__).resolve().parents[1] / "data" / "pi0_lerobot_tiny" / "tokenizer"
    result = subprocess.run(
        [
            sys.executable, "-m", "controller.cli", "serve",
            "--set", f"server.bind=ipc://{tmp_path}/tempo.sock",
            "--set", f"server.status_bind=ipc://{tmp_path}/status.sock",
            "--set", f"policy.path={demo_dirs['pi0']}",
            "--set", f"policy.prompt.tokenizer={other / 'tokenizer.model'}",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert "vocabulary of 512 tokens but the checkpoint's model has" in result.stderr
    assert "Traceback" not in result.stderr


def test_checkpoint_inspect_describes_the_demo_directory(demo_dirs) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller.cli", "checkpoint", "inspect", str(demo_dirs["pi0"])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for expected in (
        "family: pi0 (pi0)",
        "cameras: front 96x128 (each resized to 56x56)",
        "prompt: up to 24 tokens (tokenizer_max_length)",
        "chunk_size: 20, n_action_steps: 10, num_inference_steps: 3",
    ):
        assert expected in lines, (expected, lines)
    assert any(line.startswith("model: reduced widths from tempo_widths.json: ") for line in lines)
    (parameters,) = [line for line in lines if line.startswith("parameters: ")]
    count = int(parameters.split()[1].replace(",", ""))
    assert 100_000 < count < 1_000_000
