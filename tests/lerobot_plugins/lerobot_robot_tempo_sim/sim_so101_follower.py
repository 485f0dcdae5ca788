"""LeRobot's SO-101 follower (`SOFollower`: features, observation, action, safety cap) with its
Feetech bus replaced by a simulated one; everything else is LeRobot's code."""

from __future__ import annotations

import json
from pathlib import Path

from lerobot.cameras.utils import make_cameras_from_configs
from lerobot.motors import Motor, MotorNormMode
from lerobot.robots import Robot
from lerobot.robots.so_follower import SOFollower

from lerobot_robot_tempo_sim.config_sim_so101_follower import SimSO101FollowerConfig
from lerobot_robot_tempo_sim.sim_bus import SimulatedBus

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")


def so101_motors(use_degrees: bool) -> dict[str, Motor]:
    """The SO-101's six motors as LeRobot numbers them (the gripper in 0..100)."""
    mode = MotorNormMode.DEGREES if use_degrees else MotorNormMode.RANGE_M100_100
    motors = {name: Motor(i + 1, "sts3215", mode) for i, name in enumerate(JOINTS)}
    motors["gripper"] = Motor(6, "sts3215", MotorNormMode.RANGE_0_100)
    return motors


class SimSO101Follower(SOFollower):
    config_class = SimSO101FollowerConfig
    name = "sim_so101_follower"

    def __init__(self, config: SimSO101FollowerConfig) -> None:
        Robot.__init__(self, config)  # SOFollower's own would open a Feetech bus object
        self.config = config
        self.bus = SimulatedBus(
            so101_motors(config.use_degrees),
            transfer_ms=config.bus_transfer_ms,
            time_constant_s=config.time_constant_s,
        )
        self.cameras = make_cameras_from_configs(config.cameras)

    def disconnect(self) -> None:
        if self.config.goal_log:
            log = {
                "goal_writes": self.bus.goal_writes,
                "goals": self.bus.goal_history,
                "goal_times": self.bus.goal_times,
            }
            Path(self.config.goal_log).write_text(json.dumps(log))
        super().disconnect()
