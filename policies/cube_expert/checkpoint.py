"""How the transfer-cube expert is stored in Tempo's checkpoint format: the cube_expert family's
checkpoint part (`CHECKPOINT`, see policies.registry). scripts/sim/make_cube_expert.py writes
one."""

from __future__ import annotations

from typing import cast

import numpy as np
from torch import nn

from policies.base import Execution, PolicySpec
from policies.cube_expert.codec import CubeExpertCodec
from policies.cube_expert.config import CubeExpertConfig
from policies.cube_expert.model import CubeExpert
from policies.registry import CheckpointFamily
from policies.tensor_policy import TensorPolicy


def expert_spec_problems(spec: PolicySpec, config: CubeExpertConfig) -> list[str]:
    pairs = [
        ("cameras", len(spec.cameras), 0),
        ("state_size", spec.state_size, config.state_size),
        ("state_history", spec.state_history, 1),
        ("chunk_size", spec.chunk_size, config.chunk_size),
        ("action size (joint_names)", spec.action_dim, config.action_dim),
    ]
    return [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]


def expert_policy(module: CubeExpert, spec: PolicySpec) -> TensorPolicy:
    return TensorPolicy(spec=spec, module=module, codec=CubeExpertCodec(spec, module.config))


def _to_policy(module: nn.Module, spec: PolicySpec) -> TensorPolicy:
    return expert_policy(cast(CubeExpert, module), spec)


def describe_expert(spec: PolicySpec, config: CubeExpertConfig) -> list[str]:
    c = config
    return [
        f"transfer-cube expert: {c.steps} steps of {c.action_dim} joint targets per trajectory, "
        f"{c.nx}x{c.ny} cube positions (x {c.x_range[0]:g}..{c.x_range[1]:g}, y "
        f"{c.y_range[0]:g}..{c.y_range[1]:g}), chunks of {c.chunk_size}",
        f"reads the cube's x, y at state[{c.joint_state}:{c.joint_state + 2}] when an episode "
        "starts, then follows the trajectory by control step",
    ]


def build_expert(
    table: np.ndarray,
    config: CubeExpertConfig,
    joint_names: tuple[str, ...],
    execution: Execution | None = None,
) -> TensorPolicy:
    """The expert over `table` ((nx, ny, steps, action_dim) floats) for robots with these
    joints."""
    import torch

    module = CubeExpert(config)
    module.table.copy_(torch.as_tensor(table, dtype=torch.float32))
    spec = PolicySpec(
        cameras=(),
        state_size=config.state_size,
        joint_names=joint_names,
        chunk_size=config.chunk_size,
        execution=execution,
    )
    return expert_policy(module.eval(), spec)


CHECKPOINT = CheckpointFamily(
    config_model=CubeExpertConfig,
    module_type=CubeExpert,
    spec_problems=expert_spec_problems,
    describe=describe_expert,
    to_policy=_to_policy,
)
