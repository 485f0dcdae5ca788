"""`--teleop.type=sim_so101_leader`: the SO-101 leader's own flags, and the operator's motion."""

from dataclasses import dataclass

from lerobot.teleoperators import TeleoperatorConfig
from lerobot.teleoperators.so_leader import SOLeaderTeleopConfig


@TeleoperatorConfig.register_subclass("sim_so101_leader")
@dataclass
class SimSO101LeaderConfig(SOLeaderTeleopConfig):
    """LeRobot's SO-101 leader config, plus the simulated operator: each joint swings
    `amplitude` (degrees; the gripper in 0..100 around 50) with `period_s`."""

    bus_transfer_ms: float = 0.0
    amplitude: float = 20.0
    period_s: float = 4.0
