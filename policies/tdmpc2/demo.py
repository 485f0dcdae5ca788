"""A TD-MPC2 agent with random weights for the simulated arm (policies.demo_arm), as a Tempo
checkpoint: what `tempo demo --policy tdmpc2` serves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo_arm import ACTION_REACH, DEFAULT_JOINTS
from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.serving import random_tdmpc2_policy


def make_demo_tdmpc2_checkpoint(
    directory: str | Path,
    *,
    joint_names: Sequence[str] = DEFAULT_JOINTS,
    model_size: int = 1,
    seed: int = 0,
) -> Path:
    """A TD-MPC2 agent with random weights for the simulated arm, as a Tempo checkpoint: its
    joint positions are the observation, and actions map to joint targets within
    `ACTION_REACH` of zero. The official planner settings; it has learned nothing."""
    n = len(joint_names)
    config = TDMPC2Config(
        obs_dim=n,
        action_dim=n,
        model_size=model_size,  # type: ignore[arg-type]
        action_low=(-ACTION_REACH,) * n,
        action_high=(ACTION_REACH,) * n,
    )
    return save_checkpoint(directory, random_tdmpc2_policy(config, tuple(joint_names), seed))
