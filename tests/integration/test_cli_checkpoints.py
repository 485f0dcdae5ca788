"""`tempo checkpoint inspect | import-lerobot` and `tempo serve --policy.path` on a LeRobot ACT
directory written the way LeRobot writes it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from controller.observe.status_server import request_status
from controller.wire.client import TempoClient
from tests.conftest import wait_for
from tests.unit.test_lerobot_import import (
    MEAN_STD,
    MEAN_STD_NAMES,
    tempo_model,
    write_processor_layout,
)


def tempo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_inspect_and_import_lerobot(tmp_path):
    source = write_processor_layout(tmp_path / "lerobot", tempo_model(), MEAN_STD, MEAN_STD_NAMES)
    inspected = tempo("checkpoint", "inspect", str(source))
    assert inspected.returncode == 0, inspected.stderr
    assert "front" in inspected.stdout and "wrist" in inspected.stdout

    imported = tempo(
        "checkpoint",
        "import-lerobot",
        str(source),
        str(tmp_path / "tempo"),
        "--joint-names",
        "a,b,c",
    )
    assert imported.returncode == 0, imported.stderr
    described = tempo("checkpoint", "inspect", str(tmp_path / "tempo"))
    assert described.returncode == 0 and "a" in described.stdout and "tempo" in described.stdout


def test_inspect_refuses_a_corrupt_checkpoint_with_a_sentence(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    result = tempo("checkpoint", "inspect", str(tmp_path / "broken"))
    assert result.returncode == 2
    assert "config.json" in result.stderr and "Traceback" not in result.stderr


def test_serve_a_lerobot_directory_directly(tmp_path):
    source = write_processor_layout(tmp_path / "lerobot", tempo_model(), MEAN_STD, MEAN_STD_NAMES)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "serve",
            "--policy.path",
            str(source),
            "--set",
            f"server.bind=ipc://{tmp_path}/tempo.sock",
            "--set",
            f"server.status_bind=ipc://{tmp_path}/status.sock",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: request_status(f"ipc://{tmp_path}/status.sock", 0.2), timeout=60)
        joints = ["joint_0", "joint_1", "joint_2"]
        cameras = {"front": (32, 32), "wrist": (32, 32)}
        with TempoClient(f"ipc://{tmp_path}/tempo.sock", "arm", joints, cameras, 3) as client:
            frames = {name: np.zeros((32, 32, 3), np.uint8) for name in cameras}
            command = wait_for(
                lambda: (
                    (
                        client.send_observation(frames, np.zeros(3, np.float32)),
                        client.receive(0.01),
                    )[1].kind
                    == "action"
                    and client.receive()
                ),
                # The first action waits for the policy's first steps; on a loaded 2-core
                # machine that took longer than wait_for's 5 s default.
                timeout=60,
            )
            assert command.action.shape == (3,) and np.isfinite(command.action).all()
    finally:
        process.terminate()
        assert process.wait(5) == 0


def test_inspect_exits_nonzero_when_the_weights_cannot_be_read(tmp_path):
    source = write_processor_layout(tmp_path / "lerobot", tempo_model(), MEAN_STD, MEAN_STD_NAMES)
    converted = tmp_path / "tempo"
    assert tempo("checkpoint", "import-lerobot", str(source), str(converted)).returncode == 0
    weights = converted / "model.safetensors"
    weights.write_bytes(b"\x00" * 16)  # a header that is not one
    result = tempo("checkpoint", "inspect", str(converted))
    assert result.returncode == 1
    assert "is unreadable" in result.stdout and "cannot be served" in result.stderr
    weights.unlink()
    result = tempo("checkpoint", "inspect", str(converted))
    assert result.returncode == 1 and "is missing" in result.stderr
