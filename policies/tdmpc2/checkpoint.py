"""How TD-MPC2 agents are stored in Tempo's checkpoint format (policies.checkpoints.tempo_format)
and read back: the tdmpc2 family's checkpoint part (`CHECKPOINT`, see policies.registry).
Official .pt files are converted by policies.tdmpc2.official.
"""

from __future__ import annotations

from typing import cast

from torch import nn

from policies.base import PolicySpec
from policies.registry import CheckpointFamily
from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.planner import TDMPC2Policy
from policies.tdmpc2.serving import tdmpc2_policy
from policies.tensor_policy import TensorPolicy


def tdmpc2_spec_problems(spec: PolicySpec, config: TDMPC2Config) -> list[str]:
    """Where the spec and the agent's config disagree (the state is its observation, no
    cameras, one step of history, a chunk per planning horizon)."""
    pairs = [
        ("cameras", len(spec.cameras), 0),
        ("state_size (obs_dim)", spec.state_size, config.obs_dim),
        ("state_history", spec.state_history, 1),
        ("chunk_size (horizon)", spec.chunk_size, config.horizon),
        ("action size (joint_names)", spec.action_dim, config.action_dim),
    ]
    return [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]


def _to_policy(module: nn.Module, spec: PolicySpec) -> TensorPolicy:
    return tdmpc2_policy(cast(TDMPC2Policy, module), spec)


def describe_tdmpc2(spec: PolicySpec, config: TDMPC2Config) -> list[str]:
    """Lines describing a TD-MPC2 agent: sizes and planner settings."""
    c = config
    lines = [
        f"state: {spec.state_size} entries; joints ({spec.action_dim}): "
        + ", ".join(spec.joint_names),
        f"world model: size {c.model_size}M (latent {c.latent_dim}, mlp {c.mlp_dim}, encoder "
        f"{c.enc_dim} x {c.num_enc_layers} layers, {c.num_q} Q heads"
        + (", termination head)" if c.episodic else ")"),
        f"mode: {c.mode}; planner: {c.num_samples} samples ({c.num_pi_trajs} from the prior), "
        f"{c.num_elites} elites, {c.planning_iterations} iterations, horizon {c.horizon} "
        f"(chunk of {spec.chunk_size}), discount {c.discount}, explore {c.explore}, compute "
        f"{c.compute}",
    ]
    return lines


CHECKPOINT = CheckpointFamily(
    config_model=TDMPC2Config,
    module_type=TDMPC2Policy,
    spec_problems=tdmpc2_spec_problems,
    describe=describe_tdmpc2,
    to_policy=_to_policy,
)
