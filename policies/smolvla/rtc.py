"""SmolVLA served with real-time chunking: the guided sampler of policies.flow.guided_sampling
(the one implementation of the guidance math every flow family uses: modes exact, stop_grad and
inpaint, as pi0's) over SmolVLA's action expert, the prefix encoded once into its keys and
values. SmolVLA is never trained with training-time RTC, so mode trained is refused.

    forward(*frames, state, noise, prompt, prompt_mask, prefix, prefix_len, delay) -> actions
        SmolVLAPolicy's inputs (policies.smolvla.model), then
        prefix       float32 (B, chunk_size, action_size), robot units: the previous plan from
                     the observation's step on, zero-padded
        prefix_len   int64 (B,): its valid rows
        delay        int64 (B,): the robot's inference delay d in control steps

SmolVLA integrates from noise at time 1 to actions at time 0 with velocity v = noise - actions,
as pi0; the sampler's convention is the paper's (t = 1 - time, v' = -v), so `velocity`
converts. The prefix is normalized with the policy's action statistics and zero-padded to
max_action_dim, as LeRobot's RTC processor pads it. Defaults, LeRobot's RTCConfig: beta
(max_guidance_weight) 10, the overlap ending 10 rows into the previous plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from policies.base import RobotContext
from policies.flow.codec import RTCCodec, encode_rtc, rtc_inputs
from policies.flow.guided_sampling import GuidedChunkSampler, differentiation_disabled
from policies.flow.settings import RTCConfig
from policies.inputs import TensorInput
from policies.smolvla.codec import SmolVLACodec
from policies.smolvla.expert import PrefixCache
from policies.smolvla.model import SmolVLAPolicy
from policies.tensor_policy import TensorPolicy, with_state_bounds

BETA = 10.0  # LeRobot's RTCConfig.max_guidance_weight
OVERLAP_ROWS = 10  # LeRobot's RTCConfig.execution_horizon


class SmolVLARealTimeChunking(GuidedChunkSampler):
    """A SmolVLAPolicy served with RTC (see the module doc)."""

    precast_half_weights = True
    serves_rtc_itself = True
    serves_prompt_settings_itself = True

    times: Tensor

    def __init__(self, policy: SmolVLAPolicy, config: RTCConfig) -> None:
        if config.mode == "trained":
            raise ValueError(
                "mode trained needs a checkpoint trained with training-time RTC; SmolVLA's are "
                "not (use exact, stop_grad or inpaint)"
            )
        policy.requires_grad_(False)  # served, never trained: exact's VJP needs no weight grads
        n = policy.config.num_steps
        super().__init__(
            config,
            n,
            policy.config.chunk_size,
            default_beta=BETA,
            default_overlap_rows=OVERLAP_ROWS,
        )
        self.policy = policy
        dt = -1.0 / n  # SmolVLA's own times, 1 + k dt in float32 as its loop makes them
        times = torch.tensor([1.0 + k * dt for k in range(n)], dtype=torch.float32)
        self.register_buffer("times", times, persistent=False)

    def forward(self, *inputs: Tensor) -> Tensor:
        if self.rtc.mode == "exact" and differentiation_disabled():
            # Under torch.inference_mode torch.func.vjp records nothing: sample outside it.
            with torch.inference_mode(False), torch.no_grad():
                return self.forward(*(t.clone() for t in inputs))
        policy = self.policy
        groups = policy.group_count
        frames = inputs[:groups]
        state, noise, prompt, prompt_mask, prefix, prefix_len, delay = inputs[groups:]
        cache = policy.encode_prefix(tuple(frames), state, prompt, prompt_mask)
        target = self.guidance_target(prefix)
        mask = self.guidance_mask(prefix_len, delay).to(target.dtype)
        return policy.finish(self.sample(cache, noise, target, mask))

    def guidance_target(self, prefix: Tensor) -> Tensor:
        """The prefix (B, H, action_size) in robot units -> normalized, zero-padded to
        max_action_dim."""
        normalized = self.policy.action_norm.normalize(prefix.float())
        missing = self.policy.config.max_action_dim - normalized.shape[-1]
        return F.pad(normalized, (0, missing))

    def velocity(self, actions: Tensor, step: int | Tensor, context: PrefixCache) -> Tensor:
        time = self.times[step].expand(actions.shape[0])
        return -self.policy.velocity(context, actions, time)

    def context_tensors(self, context: PrefixCache) -> tuple[Tensor, ...]:
        return tuple(context)

    def context_from(self, tensors: Sequence[Tensor]) -> PrefixCache:
        return PrefixCache(*tensors)

    def state_bounds(self, limit: float) -> tuple[Tensor, Tensor]:
        return self.policy.state_bounds(limit)


class SmolVLARTCCodec(SmolVLACodec):
    """SmolVLACodec's state, noise and prompt, then RTC's prefix, prefix_len and delay."""

    @property
    def inputs(self) -> tuple[TensorInput, ...]:
        return (*super().inputs, *rtc_inputs(self.spec))

    def encode(self, context: RobotContext, out: Sequence[np.ndarray]) -> None:
        super().encode(context, out[:4])
        encode_rtc(context, out[4:])

    def example(self, seed: int) -> RobotContext:
        """A random prompt and state with a random previous plan and delay, so that start-up
        parity checks run the guidance."""
        planned = RTCCodec(self.spec).example(seed)
        return dataclasses.replace(
            super().example(seed),
            step=planned.step,
            episode_start=False,
            previous_plan=planned.previous_plan,
            inference_delay=planned.inference_delay,
        )


def serve_smolvla_with_rtc(policy: TensorPolicy, config: RTCConfig) -> TensorPolicy:
    """`policy` served with real-time chunking (mode off: unchanged); ValueError (one
    sentence) for mode trained."""
    if config.mode == "off":
        return policy
    module = policy.module
    if isinstance(module, SmolVLARealTimeChunking):
        module = module.policy
    if not isinstance(module, SmolVLAPolicy):
        raise TypeError(
            f"a SmolVLA policy's module is a SmolVLAPolicy, not {type(module).__name__}"
        )
    seed = policy.codec.seed if isinstance(policy.codec, SmolVLACodec) else None
    codec = SmolVLARTCCodec(policy.spec, module, *(() if seed is None else (seed,)))
    served = TensorPolicy(
        spec=policy.spec, module=SmolVLARealTimeChunking(module, config), codec=codec
    )
    return with_state_bounds(served)
