"""Simulated environments as robots (`tempo sim-robot --env`, `tempo eval`): one module per
environment, each describing how its observations map to a policy's cameras and state the way
LeRobot's env configs map them, so a checkpoint trained there is served unchanged.

    env = make_env("pusht")          # SimEnv; one sentence for an unknown name or a missing extra
    observation = env.reset(seed=0)  # EnvObservation: images by camera name, state
    step = env.step(action)          # EnvStep: observation, reward, done, success

Only numpy here; the environment packages (the `sim` extra) are imported by make_env.
"""

from __future__ import annotations

from controller.sim.envs.adapter import EnvObservation, EnvStep, SimEnv
from controller.sim.envs.catalog import ENV_NAMES, make_env

__all__ = ["ENV_NAMES", "EnvObservation", "EnvStep", "SimEnv", "make_env"]
