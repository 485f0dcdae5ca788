"""A LeRobot robot plugin for tests: LeRobot's SO-101 follower on a simulated bus, and a
simulated camera type (see tests/lerobot_plugins/README.md)."""

from lerobot_robot_tempo_sim.config_sim_camera import SimCameraConfig
from lerobot_robot_tempo_sim.config_sim_so101_follower import SimSO101FollowerConfig
from lerobot_robot_tempo_sim.sim_bus import SimulatedBus
from lerobot_robot_tempo_sim.sim_camera import SimCamera
from lerobot_robot_tempo_sim.sim_so101_follower import SimSO101Follower

__all__ = [
    "SimCamera",
    "SimCameraConfig",
    "SimSO101Follower",
    "SimSO101FollowerConfig",
    "SimulatedBus",
]
