"""How a robot's context becomes Diffusion Policy's inputs, and the TensorPolicy built on it.

    inputs   state (n_obs_steps, state_size)        the state history, oldest first
             past (n_obs_steps - 1, n_cameras * D)  memory["image_features"]: the image
                                                    features of the previous observation steps
             has_past (1,)                          0.0 at an episode start or without them
             fixed_noise (1,)                       1.0 when memory holds "fixed_noise": sample
                                                    with the module's fixed noise bank
    outputs  ("image_features",)                    the latest n_obs_steps - 1 steps' features,
                                                    the robot's memory for next time

(past, has_past and the output only with cameras and n_obs_steps > 1.)

The history lives in the robot's session, never in the module, so robots share one model. The
state history holds one state per control step, as LeRobot's observation queue does. The image
features are those of the robot's previous inference requests: with `execution.query_period`
1 they are the previous control steps' frames, as in LeRobot; with a longer period they are
older frames (LeRobot keeps every step's frames, which a session does not carry).

`example` gives parity contexts with fixed noise, half of them mid-episode (random past
features), half at an episode start, so the start-up check compares every tier on the same
noise and covers both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.base import PolicySpec, RobotContext
from policies.diffusion.config import DiffusionConfig
from policies.diffusion.model import DiffusionPolicy
from policies.inputs import InputCodec, TensorInput
from policies.tensor_policy import TensorPolicy

IMAGE_FEATURES = "image_features"
FIXED_NOISE = "fixed_noise"


class DiffusionCodec(InputCodec):
    def __init__(self, spec: PolicySpec, config: DiffusionConfig) -> None:
        super().__init__(spec)
        self.remembers = config.n_cameras > 0 and config.n_obs_steps > 1
        self.outputs = (IMAGE_FEATURES,) if self.remembers else ()
        self._past_shape = (config.n_obs_steps - 1, config.n_cameras * config.image_feature_dim)

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        past = (TensorInput("past", self._past_shape), TensorInput("has_past", (1,)))
        return (
            *super().inputs,
            *(past if self.remembers else ()),
            TensorInput("fixed_noise", (1,)),
        )

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:1])
        out[-1][0] = 1.0 if FIXED_NOISE in context.memory else 0.0
        if self.remembers:
            self._encode_past(context, out[1], out[2])

    def _encode_past(self, context: RobotContext, past: np.ndarray, has_past: np.ndarray) -> None:
        features = context.memory.get(IMAGE_FEATURES)
        if features is None or context.episode_start:
            past.fill(0.0)
            has_past[0] = 0.0
            return
        if features.shape != self._past_shape:
            raise ValueError(
                f"memory['{IMAGE_FEATURES}']: expected {self._past_shape}, got {features.shape}"
            )
        np.copyto(past, features, casting="same_kind")
        has_past[0] = 1.0

    def example(self, seed: int) -> RobotContext:
        """Half the examples mid-episode (random past features), half at an episode start."""
        context = super().example(seed)
        rng = np.random.default_rng(seed + 1)
        features = rng.uniform(0, 1, self._past_shape).astype(np.float32)
        memory = {FIXED_NOISE: np.ones(1, dtype=np.float32)}
        if self.remembers:
            memory[IMAGE_FEATURES] = features
        return RobotContext(
            step=seed,
            episode_start=seed % 2 == 0,
            state_history=context.state_history,
            memory=memory,
        )


def diffusion_policy(module: DiffusionPolicy, spec: PolicySpec) -> TensorPolicy:
    """The TensorPolicy of a Diffusion Policy module, its codec attached."""
    return TensorPolicy(spec=spec, module=module, codec=DiffusionCodec(spec, module.config))
