"""LeRobot's SO-101 leader arm (`SOLeader`) on a simulated bus that an imagined operator moves."""

from __future__ import annotations

import math

from lerobot.teleoperators import Teleoperator
from lerobot.teleoperators.so_leader import SOLeader
from lerobot_robot_tempo_sim import SimulatedBus
from lerobot_robot_tempo_sim.sim_so101_follower import so101_motors

from lerobot_teleoperator_tempo_sim.config_sim_so101_leader import SimSO101LeaderConfig


class SimSO101Leader(SOLeader):
    config_class = SimSO101LeaderConfig
    name = "sim_so101_leader"

    def __init__(self, config: SimSO101LeaderConfig) -> None:
        Teleoperator.__init__(self, config)  # SOLeader's own would open a Feetech bus object
        self.config = config
        motors = so101_motors(config.use_degrees)

        def operator(t: float) -> dict[str, float]:
            swing = math.sin(2 * math.pi * t / config.period_s)
            where = {name: config.amplitude * swing for name in motors}
            where["gripper"] = 50.0 + min(config.amplitude, 50.0) * swing
            return where

        self.bus = SimulatedBus(motors, transfer_ms=config.bus_transfer_ms, operator=operator)
