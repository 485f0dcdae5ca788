"""What a flow policy's module reads, from one robot's observation and context (its
`InputCodec`s; the frames come first, as for every policy, see `policies.inputs`).

    FlowCodec   state, noise                               -> FlowMatchingPolicy
    RTCCodec    state, noise, prefix, prefix_len, delay    -> RealTimeChunking

    state        float32 (state_history, state_size), as the default codec
    noise        float32 (H, action_dim): the starting point of sampling, drawn on the host from a
                 generator seeded by (seed, context.step), so a chunk is a pure function of the
                 observation and its context, and every tier can be checked against the reference
    prefix       float32 (H, action_dim), robot units: the previous plan's not-yet-executed
                 actions, row 0 = the new observation's step (context.step), zero-padded
    prefix_len   int64 (): how many rows of `prefix` are real (0 without a previous plan)
    delay        int64 (): the robot's inference delay d in control steps

The RTC mask and weights are built from these on the device (`policies.flow.rtc`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from policies.base import Plan, PolicySpec, RobotContext
from policies.inputs import InputCodec, TensorInput

NOISE_SEED = 0x5EED


class FlowCodec(InputCodec):
    """The state history, then the chunk's starting noise."""

    def __init__(self, spec: PolicySpec, seed: int = NOISE_SEED) -> None:
        super().__init__(spec)
        self.seed = seed

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        noise = TensorInput("noise", (self.spec.chunk_size, self.spec.action_dim))
        return (*super().inputs, noise)

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:1])
        fill_noise(self.seed, context.step, out[1])


class RTCCodec(FlowCodec):
    """FlowCodec's inputs, then the previous plan as the RTC prefix and the inference delay."""

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (*super().inputs, *rtc_inputs(self.spec))

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:2])
        encode_rtc(context, out[2:])

    def example(self, seed: int) -> RobotContext:
        """A random context with a previous plan and a delay, so that start-up parity checks
        run the guidance (without a plan the mask is zero and nothing is guided)."""
        base = super().example(seed)
        rng = np.random.default_rng(seed + 1)
        size = self.spec.chunk_size
        executed = int(rng.integers(1, max(size // 2, 1) + 1))  # steps since the plan began
        actions = rng.standard_normal((size, self.spec.action_dim)).astype(np.float32)
        return RobotContext(
            step=100 + executed,
            episode_start=False,
            state_history=base.state_history,
            previous_plan=Plan(start_step=100 + executed, actions=actions[executed:]),
            inference_delay=int(rng.integers(0, executed + 1)),
        )


def rtc_inputs(spec: PolicySpec) -> tuple[TensorInput, ...]:
    """What real-time chunking adds to a step's inputs: the previous plan as the prefix, its
    valid rows and the robot's inference delay (flow's and pi0's codecs both end with these)."""
    prefix = TensorInput("prefix", (spec.chunk_size, spec.action_dim))
    return (prefix, TensorInput("prefix_len", (), "int64"), TensorInput("delay", (), "int64"))


def encode_rtc(context: RobotContext, out: Sequence[np.ndarray]) -> None:
    """Fill `rtc_inputs`' three arrays (prefix, prefix_len, delay) for `context`."""
    out[1][...] = fill_prefix(context, out[0])
    out[2][...] = max(int(context.inference_delay), 0)


def fill_noise(seed: int, step: int, out: np.ndarray) -> None:
    """Standard normal noise for the chunk of control step `step` into `out` (float32)."""
    rng = np.random.default_rng((seed, max(step, 0)))
    out[...] = rng.standard_normal(out.shape, dtype=np.float32)


def fill_prefix(context: RobotContext, out: np.ndarray) -> int:
    """The previous plan from `context.step` on into `out` (H, action_dim), zero-padded; returns
    the number of valid rows. A plan that starts after the observation's step (a chunk of a
    later observation already landed) or none at all gives 0 rows: nothing to agree with."""
    out.fill(0.0)
    plan = context.previous_plan
    if plan is None:
        return 0
    offset = context.step - plan.start_step
    if offset < 0:
        return 0
    rows = plan.actions[offset : offset + out.shape[0]]
    if rows.ndim != 2 or rows.shape[1] != out.shape[1]:
        raise ValueError(
            f"previous plan has actions of shape {plan.actions.shape}; expected rows of "
            f"{out.shape[1]} actions"
        )
    out[: len(rows)] = rows
    return len(rows)
