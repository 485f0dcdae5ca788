"""How a robot's context becomes the planner's inputs, and the TD-MPC2 TensorPolicy built on it.

    inputs   obs (obs_dim,)               the newest state vector
             prev_mean (horizon, action)  memory["mean"]: the robot's previous plan mean
             episode_start (1,)           1.0 at an episode start or without a previous mean
             fixed_noise (1,)             1.0 when memory holds "fixed_noise": plan with the
                                          module's fixed noise bank (reproducible plans)
    outputs  ("mean",)                    the new plan mean, the robot's memory for next time

The warm start is kept in the robot's session, never in the module, so robots share one model.
`example` gives parity contexts with fixed noise, half of them mid-episode (with a random
previous mean), half at an episode start: the start-up check then compares every tier's plan for
the same noise, and covers both the warm and the cold start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from policies.base import PolicySpec, RobotContext
from policies.inputs import InputCodec, TensorInput
from policies.tdmpc2.config import TDMPC2Config, tdmpc2_spec
from policies.tdmpc2.parity import ValueRegret
from policies.tdmpc2.planner import TDMPC2Policy
from policies.tensor_policy import TensorPolicy

MEAN = "mean"
FIXED_NOISE = "fixed_noise"


class TDMPC2Codec(InputCodec):
    outputs = (MEAN,)

    def __init__(self, spec: PolicySpec, config: TDMPC2Config) -> None:
        super().__init__(spec)
        self.config = config
        self._plan_shape = (config.horizon, config.action_dim)

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (
            TensorInput("obs", (self.config.obs_dim,)),
            TensorInput("prev_mean", self._plan_shape),
            TensorInput("episode_start", (1,)),
            TensorInput("fixed_noise", (1,)),
        )

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        obs, prev_mean, episode_start, fixed_noise = out
        state = context.state
        if state.dtype != np.float32 or state.shape != (self.config.obs_dim,):
            raise ValueError(
                f"state: expected float32 ({self.config.obs_dim},), got {state.dtype} {state.shape}"
            )
        np.copyto(obs, state)
        mean = context.memory.get(MEAN)
        if mean is None or context.episode_start:
            prev_mean.fill(0.0)
            episode_start[0] = 1.0
        else:
            if mean.shape != self._plan_shape:
                raise ValueError(
                    f"memory['{MEAN}']: expected a plan mean {self._plan_shape}, got {mean.shape}"
                )
            np.copyto(prev_mean, mean, casting="same_kind")
            episode_start[0] = 0.0
        fixed_noise[0] = 1.0 if FIXED_NOISE in context.memory else 0.0

    def example(self, seed: int) -> RobotContext:
        rng = np.random.default_rng(seed)
        state = rng.standard_normal((1, self.config.obs_dim)).astype(np.float32)
        mean = rng.uniform(-1, 1, self._plan_shape).astype(np.float32)
        return RobotContext(
            step=seed,
            episode_start=seed % 2 == 0,
            state_history=state,
            memory={MEAN: mean, FIXED_NOISE: np.ones(1, dtype=np.float32)},
        )


def tdmpc2_policy(module: TDMPC2Policy, spec: PolicySpec | None = None) -> TensorPolicy:
    """The TensorPolicy of a TD-MPC2 module (its codec attached; in reduced-precision compute,
    its value-regret parity measure); `spec` defaults to the one its config implies (joints
    joint_0, ...)."""
    spec = spec or tdmpc2_spec(module.config)
    c = module.config
    parity = ValueRegret(module, c.parity_regret) if c.compute != "fp32" else None
    codec = TDMPC2Codec(spec, c)
    return TensorPolicy(spec=spec, module=module, codec=codec, parity=parity)


def with_mode(policy: TensorPolicy, mode: Literal["plan", "prior"]) -> TensorPolicy:
    """The same agent planning (`plan`) or in fast mode (`prior`), sharing the world model's
    weights with `policy`."""
    return _with(policy, mode=mode)


def with_compute(policy: TensorPolicy, compute: Literal["fp32", "tf32", "bf16"]) -> TensorPolicy:
    """The same agent planning in another precision (TDMPC2Config.compute), sharing the world
    model's weights with `policy`."""
    return _with(policy, compute=compute)


def with_prior_steps(policy: TensorPolicy, steps: int) -> TensorPolicy:
    """The same agent with fast mode rolling the prior out `steps` steps
    (TDMPC2Config.prior_steps), sharing the world model's weights with `policy`."""
    return _with(policy, prior_steps=steps)


def _with(policy: TensorPolicy, **changes: object) -> TensorPolicy:
    module = policy.module
    if not isinstance(module, TDMPC2Policy):
        raise ValueError(f"a {type(module).__name__} policy has no planner settings")
    if all(getattr(module.config, key) == value for key, value in changes.items()):
        return policy
    # Validated again (model_copy would not): a change may contradict another setting.
    config = type(module.config).model_validate(module.config.model_dump() | changes)
    return tdmpc2_policy(TDMPC2Policy(config, model=module.model).eval(), policy.spec)


def random_tdmpc2_policy(
    config: TDMPC2Config, joint_names: tuple[str, ...] | None = None, seed: int = 0
) -> TensorPolicy:
    """A TD-MPC2 agent with random weights (PyTorch's default initialisation, seeded): for
    demos and benchmarks. It has learned nothing."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = TDMPC2Policy(config).eval()
    return tdmpc2_policy(module, tdmpc2_spec(config, joint_names))
