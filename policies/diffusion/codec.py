"""How a robot's context becomes Diffusion Policy's inputs, and the TensorPolicy built on it.

    inputs   state (n_obs_steps, state_size)        the state history, oldest first
             past_frames (n_obs_steps - 1,           RobotContext.past_frames: the frames of
                          n_cameras, H, W, 3) uint8  the robot's previous observations
             has_past (1,)                          0.0 where the context has none
             fixed_noise (1,)                       1.0 to sample with the module's fixed
                                                    noise bank (memory holds "fixed_noise",
                                                    or the policy serves fixed noise)

(past_frames and has_past only with cameras and n_obs_steps > 1.)

The history lives in the robot's session, never in the module, so robots share one model: the
state history and the frames of every observation the robot sent (PolicySpec.frame_history,
controller.daemon.frame_history), whether or not it was asked about, as LeRobot's observation
queue holds every control step's observation whatever `n_action_steps` is.

`example` gives parity contexts with fixed noise, half of them mid-episode (random past
frames), half without past frames, so the start-up check compares every tier on the same noise
and covers both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from policies.base import PolicySpec, RobotContext
from policies.diffusion.config import DiffusionConfig
from policies.diffusion.model import DiffusionPolicy
from policies.inputs import InputCodec, TensorInput
from policies.tensor_policy import TensorPolicy

FIXED_NOISE = "fixed_noise"


class DiffusionCodec(InputCodec):
    """`fixed_noise`: every robot's chunks from the fixed noise bank (deterministic serving);
    else only a context whose memory holds FIXED_NOISE (the start-up checks)."""

    def __init__(
        self, spec: PolicySpec, config: DiffusionConfig, fixed_noise: bool = False
    ) -> None:
        super().__init__(spec)
        self.fixed_noise = fixed_noise
        self.reads_past = config.n_cameras > 0 and config.n_obs_steps > 1
        self._past_shape = (
            config.n_obs_steps - 1,
            config.n_cameras,
            config.image_height,
            config.image_width,
            3,
        )

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        past = (
            TensorInput("past_frames", self._past_shape, "uint8"),
            TensorInput("has_past", (1,)),
        )
        return (
            *super().inputs,
            *(past if self.reads_past else ()),
            TensorInput("fixed_noise", (1,)),
        )

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:1])
        fixed = self.fixed_noise or FIXED_NOISE in context.memory
        out[-1][0] = 1.0 if fixed else 0.0
        if self.reads_past:
            self._encode_past(context, out[1], out[2])

    def _encode_past(self, context: RobotContext, past: np.ndarray, has_past: np.ndarray) -> None:
        frames = context.past_frames
        if frames is None:
            has_past[0] = 0.0  # the buffer's old contents are not read (the model's where)
            return
        steps, _, height, width, _ = self._past_shape
        for index, camera in enumerate(self.spec.camera_names):
            frame = frames.get(camera)
            if frame is None:
                raise ValueError(f"the context's past frames lack camera {camera!r}")
            if frame.dtype != np.uint8 or frame.shape != (steps, height, width, 3):
                raise ValueError(
                    f"past frames of camera {camera!r}: expected uint8 "
                    f"{(steps, height, width, 3)}, got {frame.dtype} {frame.shape}"
                )
            past[:, index] = frame
        has_past[0] = 1.0

    def example(self, seed: int) -> RobotContext:
        """Fixed noise; odd seeds with random past frames, even ones without."""
        context = super().example(seed)
        past = None
        if self.reads_past and seed % 2:
            rng = np.random.default_rng(seed + 1)
            steps, _, height, width, _ = self._past_shape
            past = {
                camera: rng.integers(0, 256, (steps, height, width, 3), dtype=np.uint8)
                for camera in self.spec.camera_names
            }
        memory = {FIXED_NOISE: np.ones(1, dtype=np.float32)}
        return replace(
            context, step=seed, episode_start=past is None, memory=memory, past_frames=past
        )


def with_fixed_noise(policy: TensorPolicy) -> TensorPolicy:
    """The Diffusion Policy `policy`, every chunk from the fixed noise bank; ValueError for
    another policy."""
    if not isinstance(policy.module, DiffusionPolicy):
        raise ValueError("not a Diffusion Policy")
    return diffusion_policy(policy.module, policy.spec, fixed_noise=True)


def diffusion_policy(
    module: DiffusionPolicy, spec: PolicySpec, fixed_noise: bool = False
) -> TensorPolicy:
    """The TensorPolicy of a Diffusion Policy module, its codec attached."""
    codec = DiffusionCodec(spec, module.config, fixed_noise)
    return TensorPolicy(spec=spec, module=module, codec=codec)
