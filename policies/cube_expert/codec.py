"""How a robot's context becomes the expert's inputs: the state, the episode's memory (its
first step and the cube's position then, set at the episode's start) and the steps elapsed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.base import PolicySpec, RobotContext
from policies.cube_expert.config import CubeExpertConfig
from policies.inputs import InputCodec, TensorInput

EPISODE = "episode"
_LOW = 65536  # the first step is kept as two float32 halves, each exact


class CubeExpertCodec(InputCodec):
    outputs = (EPISODE,)

    def __init__(self, spec: PolicySpec, config: CubeExpertConfig) -> None:
        super().__init__(spec)
        self.config = config

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (
            TensorInput("state", (1, self.config.state_size)),
            TensorInput(EPISODE, (4,)),
            TensorInput("elapsed", (1,)),
        )

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        state, episode, elapsed = out
        history = context.state_history
        if history.dtype != np.float32 or history.shape != (1, self.config.state_size):
            raise ValueError(
                f"state: expected float32 (1, {self.config.state_size}), got {history.dtype} "
                f"{history.shape}"
            )
        np.copyto(state, history)
        memory = context.memory.get(EPISODE)
        if context.episode_start or memory is None:
            k = self.config.joint_state
            episode[:] = (context.step // _LOW, context.step % _LOW, *history[-1, k : k + 2])
        else:
            if memory.shape != (4,):
                raise ValueError(f"memory['{EPISODE}']: expected 4 values, got {memory.shape}")
            np.copyto(episode, memory, casting="same_kind")
        first = int(episode[0]) * _LOW + int(episode[1])
        elapsed[0] = max(0, context.step - first)

    def example(self, seed: int) -> RobotContext:
        rng = np.random.default_rng(seed)
        state = rng.uniform(-1, 1, (1, self.config.state_size)).astype(np.float32)
        first = np.array([0, seed, 0.1, 0.5], dtype=np.float32)
        return RobotContext(
            step=seed + 40,
            episode_start=seed % 2 == 0,
            state_history=state,
            memory={EPISODE: first},
        )
