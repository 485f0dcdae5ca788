"""What pi0's and pi0.5's step reads when served with real-time chunking: Pi0Codec's inputs,
then the previous plan aligned to the observation's step and the inference delay, exactly as
the flow family's RTCCodec makes them (policies.flow.codec.rtc_inputs and encode_rtc).

    prefix       float32 (chunk_size, action_size), robot units, zero-padded
    prefix_len   int64 (): its valid rows (0 without a previous plan)
    delay        int64 (): the robot's inference delay d in control steps
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from policies.base import RobotContext
from policies.flow.codec import RTCCodec, encode_rtc, rtc_inputs
from policies.inputs import TensorInput
from policies.pi0.codec import Pi0Codec


class Pi0RTCCodec(Pi0Codec):
    """Pi0Codec's state, noise and prompt, then RTC's prefix, prefix_len and delay."""

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (*super().inputs, *rtc_inputs(self.spec))

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:4])
        encode_rtc(context, out[4:])

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
