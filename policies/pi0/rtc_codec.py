"""What pi0's and pi0.5's step reads when served with real-time chunking: Pi0Codec's inputs,
then the previous plan aligned to the observation's step and the inference delay, exactly as
the flow family's RTCCodec makes them (policies.flow.codec.fill_prefix).

    prefix       float32 (chunk_size, action_size), robot units, zero-padded
    prefix_len   int64 (): its valid rows (0 without a previous plan)
    delay        int64 (): the robot's inference delay d in control steps
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from policies.base import RobotContext
from policies.flow.codec import RTCCodec, fill_prefix
from policies.inputs import TensorInput
from policies.pi0.codec import Pi0Codec


class Pi0RTCCodec(Pi0Codec):
    """Pi0Codec's state, noise and prompt, then RTC's prefix, prefix_len and delay."""

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        prefix = TensorInput("prefix", (self.spec.chunk_size, self.spec.action_dim))
        scalars = (TensorInput("prefix_len", (), "int64"), TensorInput("delay", (), "int64"))
        return (*super().inputs, prefix, *scalars)

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:4])
        out[5][...] = fill_prefix(context, out[4])
        out[6][...] = max(int(context.inference_delay), 0)

    def example(self, seed: int) -> RobotContext:
        """Pi0Codec's random state and prompt with RTCCodec's random previous plan and delay,
        so that start-up parity checks run the guidance."""
        planned = RTCCodec(self.spec).example(seed)
        return dataclasses.replace(
            super().example(seed),
            step=planned.step,
            episode_start=False,
            previous_plan=planned.previous_plan,
            inference_delay=planned.inference_delay,
        )
