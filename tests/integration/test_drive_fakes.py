"""tempo drive's loop against a real daemon (the scripted reach policy, CPU), with a robot and
a leader arm that have the attributes and methods of LeRobot's `Robot` and `Teleoperator`: no
LeRobot needed, so this runs in CI. tests/integration/test_drive_lerobot.py drives LeRobot's
own classes."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np
import pytest

from controller.drive.drive_client import connect_drive_client
from controller.drive.drive_loop import run_drive
from controller.drive.feature_map import FeatureMap
from controller.errors import SpecMismatchError
from tests.conftest import ipc_config, running_daemon, wait_for

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
JOINTS = [f"{m}.pos" for m in MOTORS]
TARGET = 0.5  # the reach policy's default target, every joint


def daemon_config(tmp_path, *overrides: str):  # type: ignore[no-untyped-def]
    return ipc_config(
        tmp_path,
        f"robot.joints={JOINTS}",
        "robot.cameras=[{name: front, height: 96, width: 128}]",
        "policy.reach.time_constant_steps=5",
        "teleop.blend_s=0",
        *overrides,
    )


class FakeFollower:
    """LeRobot's `Robot` surface: features, get_observation, send_action; its motors reach each
    goal at once (the daemon's actions are checked, not a motor model)."""

    def __init__(self) -> None:
        self.observation_features: dict[str, Any] = {
            **dict.fromkeys(JOINTS, float),
            "front": (96, 128, 3),
        }
        self.action_features = dict.fromkeys(JOINTS, float)
        self.present = dict.fromkeys(JOINTS, 0.0)
        self.goals: list[dict[str, float]] = []

    def get_observation(self) -> dict[str, Any]:
        return {**self.present, "front": np.zeros((96, 128, 3), np.uint8)}

    def send_action(self, action: dict[str, float]) -> dict[str, float]:
        self.goals.append(dict(action))
        self.present.update(action)
        return action


class FakeLeader:
    """LeRobot's `Teleoperator` surface: an operator swinging the gripper around 30."""

    def __init__(self) -> None:
        self.action_features = dict.fromkeys(JOINTS, float)
        self.sent: list[float] = []

    def get_action(self) -> dict[str, float]:
        gripper = 30.0 + 5.0 * math.sin(time.monotonic() * 3.0)
        self.sent.append(gripper)
        return {**dict.fromkeys(JOINTS, -7.0), "gripper.pos": gripper}


def features_of(robot: FakeFollower, leader: FakeLeader | None = None, owned=None) -> FeatureMap:  # type: ignore[no-untyped-def]
    return FeatureMap.from_features(
        "fake_so101",
        robot.observation_features,
        robot.action_features,
        teleop="fake_leader" if leader else None,
        teleop_features=leader.action_features if leader else None,
        teleop_joints=owned,
    )


def test_the_policy_drives_the_robot_through_send_action(tmp_path):
    config = daemon_config(tmp_path)
    robot = FakeFollower()
    features = features_of(robot)
    with running_daemon(config):
        client = connect_drive_client(config.server.bind, features, "arm0")
        try:
            summary = run_drive(client, robot, features, seconds=1.0)
        finally:
            client.close()
    assert summary["actions_applied"] > 0 and summary["errors"] == 0
    assert summary["ticks"] >= summary["actions_applied"]
    assert list(robot.goals[-1]) == JOINTS  # send_action's dict, in the robot's names
    # The reach policy pulls every joint toward its target.
    assert all(abs(robot.goals[-1][j] - TARGET) < 0.1 for j in JOINTS)


def test_a_leader_arm_owns_its_joints_through_the_teleop_mask(tmp_path):
    config = daemon_config(tmp_path)
    robot, leader = FakeFollower(), FakeLeader()
    features = features_of(robot, leader, owned=["gripper.pos"])
    with running_daemon(config) as daemon:
        client = connect_drive_client(config.server.bind, features, "arm0")
        try:
            summary = run_drive(client, robot, features, seconds=1.0, leader=leader)
            owned = daemon.status()["robots"]
        finally:
            client.close()
    assert summary["teleop_masks_sent"] == 1 and summary["teleop_joints"] == ["gripper.pos"]
    last = robot.goals[-1]
    # The gripper is one of the operator's values (float32 on the wire), the rest the policy's.
    assert 24.0 < last["gripper.pos"] < 36.0
    assert min(abs(last["gripper.pos"] - v) for v in leader.sent) < 1e-4
    assert all(abs(last[j] - TARGET) < 0.1 for j in JOINTS if j != "gripper.pos")
    assert "gripper.pos" in str(owned)


def test_the_mask_is_said_again_to_each_new_session(tmp_path):
    """The daemon restarts mid-run: the client reconnects by itself, and the new session's mask
    (the daemon's config's until told) is told again, so the operator keeps the gripper."""
    config = daemon_config(tmp_path)
    robot, leader = FakeFollower(), FakeLeader()
    features = features_of(robot, leader, owned=["gripper.pos"])
    summary: dict[str, Any] = {}
    with running_daemon(config):
        client = connect_drive_client(config.server.bind, features, "arm0")
        run = threading.Thread(
            target=lambda: summary.update(
                run_drive(client, robot, features, seconds=None, leader=leader, stop=stop)
            )
        )
        stop = threading.Event()
        run.start()
        wait_for(lambda: len(robot.goals) > 10)
    try:
        with running_daemon(config):
            wait_for(lambda: client.counters.reconnects >= 1, timeout=10)
            applied = len(robot.goals)
            wait_for(lambda: len(robot.goals) > applied + 10, timeout=10)
            stop.set()
            run.join(5)
    finally:
        stop.set()
        run.join(5)
        client.close()
    assert summary["teleop_masks_sent"] == 2
    assert min(abs(robot.goals[-1]["gripper.pos"] - v) for v in leader.sent) < 1e-4


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (
            "robot.cameras=[{name: front, height: 96, width: 128}, {name: wrist, height: 96, "
            "width: 128}]",
            "missing ['wrist']",
        ),
        ("robot.cameras=[{name: front, height: 480, width: 640}]", "camera 'front' sends 96x128"),
        (f"robot.joints={[*JOINTS[:5], 'gripper']}", "'gripper'"),
    ],
    ids=["missing-camera", "camera-size", "joint-name"],
)
def test_a_policy_for_another_robot_is_refused_in_one_sentence(tmp_path, override, named):
    config = daemon_config(tmp_path, override)
    robot = FakeFollower()
    with running_daemon(config), pytest.raises(SpecMismatchError) as refused:
        connect_drive_client(config.server.bind, features_of(robot), "arm0")
    sentence = str(refused.value)
    assert len(sentence.splitlines()) == 1
    assert "robot fake_so101, whose action features" in sentence
    assert named in sentence
    assert robot.goals == []  # nothing reached the robot


def test_drive_runs_on_the_drivers_install_without_the_serve_extra():
    """`tempo drive` is a driver: its help, and its sentence without LeRobot, need neither
    torch nor pydantic."""
    from tests.integration.test_driver_install import TEMPO_CLI, without_serve_extra

    helped = without_serve_extra(TEMPO_CLI, "drive", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: tempo drive") and "--teleop-joints" in helped.stdout
    block = "sys.modules['lerobot'] = None\n"  # as on a Python without LeRobot
    refused = without_serve_extra(block + TEMPO_CLI, "drive", "--robot.type=so101_follower")
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[0].startswith("tempo drive needs LeRobot")


def test_a_device_that_fails_mid_run_is_one_sentence_naming_the_call(tmp_path):
    """A serial port unplugged while the loop runs: the device's error, not a traceback."""
    from controller.errors import DeviceError

    class UnpluggedFollower(FakeFollower):
        def send_action(self, action: dict[str, float]) -> dict[str, float]:
            raise OSError("[Errno 5] Input/output error: '/dev/ttyACM0'")

    config = daemon_config(tmp_path)
    robot = UnpluggedFollower()
    features = features_of(robot)
    with running_daemon(config):
        client = connect_drive_client(config.server.bind, features, "arm0")
        try:
            with pytest.raises(DeviceError) as failed:
                run_drive(client, robot, features, seconds=1.0)
        finally:
            client.close()
    assert str(failed.value) == (
        "robot fake_so101's send_action failed: OSError: [Errno 5] Input/output error: "
        "'/dev/ttyACM0'"
    )
