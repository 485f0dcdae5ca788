"""`--robot.type=sim_so101_follower`: the SO-101 follower's own flags, and the bus's timing."""

from dataclasses import dataclass

from lerobot.robots import RobotConfig
from lerobot.robots.so_follower import SOFollowerRobotConfig


@RobotConfig.register_subclass("sim_so101_follower")
@dataclass
class SimSO101FollowerConfig(SOFollowerRobotConfig):
    """LeRobot's SO-101 follower config (port, cameras, max_relative_target, ...), plus how
    long a simulated bus transfer takes (a sleep: a serial bus waits, it does not compute)."""

    bus_transfer_ms: float = 0.0
    # How fast the simulated motors follow their goal (first-order lag).
    time_constant_s: float = 0.05
    # Where to write the goals the bus received (JSON, at disconnect), for a test to read.
    goal_log: str | None = None
