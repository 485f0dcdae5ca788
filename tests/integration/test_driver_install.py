"""The driver's install (numpy, pyzmq, msgpack; no `serve` extra).

Each test runs Python in a subprocess where the serve extra's packages cannot be imported: a
meta-path finder, first on `sys.meta_path`, raises ModuleNotFoundError for them, as Python does
when they are not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ipc_config, running_daemon

REPO = Path(__file__).resolve().parents[2]
SERVE_EXTRA = ("torch", "einops", "pydantic", "yaml", "safetensors")

WITHOUT_SERVE_EXTRA = f"""
import sys

BLOCKED = {SERVE_EXTRA!r}
assert not [name for name in sys.modules if name.partition(".")[0] in BLOCKED]


class NoServeExtra:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{top!r}}", name=top)
        return None


sys.meta_path.insert(0, NoServeExtra())
"""

# `python -m controller.cli ARGS`, after the finder is in place.
TEMPO_CLI = """
import runpy

runpy.run_module("controller.cli", run_name="__main__", alter_sys=True)
"""


def without_serve_extra(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SERVE_EXTRA + code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_finder_blocks_the_serve_extra():
    """The check below this one means nothing if the block lets torch through."""
    result = without_serve_extra("import torch")
    assert result.returncode != 0
    assert "ModuleNotFoundError: No module named 'torch'" in result.stderr


def test_client_and_sim_robot_import_without_the_serve_extra():
    result = without_serve_extra(
        "import controller.wire.client\n"
        "import controller.sim.sim_robot\n"
        "print(sorted(name for name in sys.modules if name.startswith('controller')))\n"
    )
    assert result.returncode == 0, result.stderr
    assert "'controller.wire.client'" in result.stdout
    assert "'controller.sim.sim_robot'" in result.stdout


def test_sim_robot_help_without_the_serve_extra():
    result = without_serve_extra(TEMPO_CLI, "sim-robot", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tempo sim-robot")
    assert "--joints" in result.stdout and "--camera" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize(
    "command",
    [
        ["serve"],
        ["config", "show"],
        ["demo", "--seconds", "1"],
        ["profile", "--steps", "1"],
        ["bench", "--act-aloha"],
        ["checkpoint", "inspect", "."],
        ["sim-robot", "--seconds", "1"],  # the robot comes from the configured policy
    ],
    ids=lambda command: command[0],
)
def test_commands_that_need_the_serve_extra_say_so_in_one_sentence(command):
    result = without_serve_extra(TEMPO_CLI, *command)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"tempo {command[0]} needs the daemon's dependencies")
    assert "pip install 'tempo-controller[serve]'" in lines[0]
    assert result.stdout == ""


def test_sim_robot_drives_a_daemon_without_the_serve_extra(tmp_path):
    """`tempo sim-robot --joints ... --camera ...` on a driver's install, against a daemon
    serving the default robot (6 joints, camera `front` 96x128)."""
    config = ipc_config(tmp_path)
    joints = ",".join(f"joint_{i}" for i in range(6))
    args = ["sim-robot", "--connect", config.server.bind, "--joints", joints]
    with running_daemon(config):
        result = without_serve_extra(
            TEMPO_CLI, *args, "--camera", "front=96x128", "--seconds", "1", timeout=30
        )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["actions_applied"] > 0
    assert summary["errors"] == 0
