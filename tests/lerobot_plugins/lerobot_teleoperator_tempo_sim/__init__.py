"""A LeRobot teleoperator plugin for tests: LeRobot's SO-101 leader arm on a simulated bus
(see tests/lerobot_plugins/README.md)."""

from lerobot_teleoperator_tempo_sim.config_sim_so101_leader import SimSO101LeaderConfig
from lerobot_teleoperator_tempo_sim.sim_so101_leader import SimSO101Leader

__all__ = ["SimSO101Leader", "SimSO101LeaderConfig"]
