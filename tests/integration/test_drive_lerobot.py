"""`tempo drive` with LeRobot's own classes: LeRobot's SO-101 follower and leader arm on a
simulated Feetech bus, a simulated camera (tests/lerobot_plugins, registered as LeRobot plugins
register), built from LeRobot's flags by LeRobot's draccus configs, against a real daemon in
this process (a tiny ACT or the scripted reach policy, CPU).

LeRobot wants Python 3.12 and brings torch, so the driver runs in LeRobot's own Python as a
subprocess: TEMPO_LEROBOT_PYTHON names that interpreter (it needs LeRobot, pyzmq and msgpack;
Tempo itself comes from this checkout through PYTHONPATH), else this interpreter when it has
LeRobot; without either the tests skip. Here:

    TEMPO_LEROBOT_PYTHON=/work/venvs/lerobot/bin/python python -m pytest -q \\
        tests/integration/test_drive_lerobot.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ipc_config, running_daemon

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "tests" / "lerobot_plugins"
MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
JOINTS = [f"{m}.pos" for m in MOTORS]
CAMERA = "{front: {type: tempo_sim, width: 128, height: 96, fps: 30}}"
TARGET = 0.5  # the reach policy's default target


def lerobot_python() -> str | None:
    given = os.environ.get("TEMPO_LEROBOT_PYTHON")
    if given:
        return given
    return sys.executable if importlib.util.find_spec("lerobot") is not None else None


PYTHON = lerobot_python()
pytestmark = pytest.mark.skipif(
    PYTHON is None,
    reason="LeRobot is not installed here; set TEMPO_LEROBOT_PYTHON to a Python with LeRobot",
)


def robot_flags(tmp_path: Path, *extra: str) -> list[str]:
    """LeRobot's flags for the simulated SO-101, as a user of lerobot-record writes them."""
    return [
        "--robot.discover_packages_path=lerobot_robot_tempo_sim",
        "--robot.type=sim_so101_follower",
        "--robot.port=/dev/null",
        "--robot.id=arm0",
        f"--robot.cameras={CAMERA}",
        f"--robot.goal_log={tmp_path / 'goals.json'}",
        *extra,
    ]


def installed_plugin(tmp_path: Path, name: str) -> Path:
    """A folder where importlib.metadata finds `name` as an installed distribution, as pip
    leaves a plugin: LeRobot's register_third_party_plugins imports it by its name."""
    site = tmp_path / "site"
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    return site


def tempo_drive(
    tmp_path: Path, endpoint: str, *args: str, path: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    assert PYTHON is not None
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in (REPO, PLUGINS, *path)),
        "HF_LEROBOT_HOME": str(tmp_path / "lerobot"),  # calibration files stay in the test
    }
    return subprocess.run(
        [PYTHON, "-m", "controller.cli", "drive", "--connect", endpoint, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def so101_config(tmp_path: Path, *overrides: str):  # type: ignore[no-untyped-def]
    return ipc_config(
        tmp_path,
        f"robot.joints={JOINTS}",
        "robot.cameras=[{name: front, height: 96, width: 128}]",
        "policy.reach.time_constant_steps=5",
        "teleop.blend_s=0",
        *overrides,
    )


def test_drives_lerobots_so101_from_its_flags_against_a_tiny_act(tmp_path):
    from policies.act.demo import make_demo_checkpoint

    checkpoint = make_demo_checkpoint(tmp_path / "act", joint_names=JOINTS, state_size=6)
    config = ipc_config(
        tmp_path,
        "policy.kind=checkpoint",
        f"policy.path={checkpoint}",
        "execution.query_period=10",
        "execution.ensemble=newest",
    )
    with running_daemon(config):
        result = tempo_drive(
            tmp_path, config.server.bind, *robot_flags(tmp_path), "--seconds", "2", "--json"
        )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["robot"] == "sim_so101_follower"
    assert summary["actions_applied"] > 0 and summary["errors"] == 0
    goals = json.loads((tmp_path / "goals.json").read_text())
    assert goals["goal_writes"] == summary["actions_applied"]  # each action reached the bus
    assert set(goals["goals"][-1]) == set(MOTORS)  # LeRobot's send_action: `.pos` stripped


def test_a_leader_arm_from_an_installed_plugin_owns_the_gripper(tmp_path):
    config = so101_config(tmp_path)
    site = installed_plugin(tmp_path, "lerobot_teleoperator_tempo_sim")
    leader = [
        "--teleop.type=sim_so101_leader",  # found by register_third_party_plugins
        "--teleop.port=/dev/null",
        "--teleop.id=leader0",
        "--teleop-joints=gripper.pos",
    ]
    with running_daemon(config):
        result = tempo_drive(
            tmp_path,
            config.server.bind,
            *robot_flags(tmp_path),
            *leader,
            "--seconds",
            "2",
            "--json",
            path=(site,),
        )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["teleop_joints"] == ["gripper.pos"] and summary["teleop_masks_sent"] == 1
    last = json.loads((tmp_path / "goals.json").read_text())["goals"][-1]
    # The operator swings the gripper in 30..70 (the leader's 50 +- 20); the policy holds the
    # other joints at its target, where the leader's own joints (+-20 degrees) are not followed.
    assert 29.0 <= last["gripper"] <= 71.0
    assert all(abs(last[m] - TARGET) < 0.1 for m in MOTORS if m != "gripper")


def test_a_policy_for_another_robot_is_refused_naming_the_feature(tmp_path):
    config = so101_config(
        tmp_path,
        "robot.cameras=[{name: front, height: 96, width: 128}, {name: wrist, height: 96, "
        "width: 128}]",
    )
    with running_daemon(config):
        result = tempo_drive(tmp_path, config.server.bind, *robot_flags(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "robot sim_so101_follower" in lines[0] and "missing ['wrist']" in lines[0]
    assert not (tmp_path / "goals.json").exists()  # refused before the robot connected


def test_flags_lerobot_refuses_are_one_sentence(tmp_path):
    config = so101_config(tmp_path)
    result = tempo_drive(
        tmp_path, config.server.bind, "--robot.type=no_such_robot", "--robot.port=/dev/null"
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tempo: LeRobot's flags: argument --robot.type: invalid choice")


def test_tempos_side_of_drive_imports_no_torch_in_lerobots_python():
    """LeRobot's robot modules import torch themselves; Tempo's driver modules do not."""
    assert PYTHON is not None
    code = (
        "import sys\n"
        "import controller.drive.drive_cli, controller.drive.drive_loop\n"
        "import controller.drive.feature_map, controller.drive.drive_client\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [PYTHON, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
