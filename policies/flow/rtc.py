"""A `FlowMatchingPolicy` served with real-time chunking: the guided sampler of
policies.flow.guided_sampling (its module doc has the math) over the flow policy's action
expert.

    forward(images, state, noise, prefix float32 (B, H, action_dim) in robot units, prefix_len
    int64 (B,), delay int64 (B,)) -> actions float32 (B, H, action_dim) in robot units

Defaults of the flow family: beta 5, the overlap reaching all of the plan still ahead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from policies.flow.codec import FlowCodec, RTCCodec
from policies.flow.guided_sampling import (
    GuidedChunkSampler,
    differentiation_disabled,
    guidance_weights,
    soft_mask,
)
from policies.flow.model import Context, FlowMatchingPolicy
from policies.flow.settings import RTCConfig
from policies.tensor_policy import TensorPolicy

__all__ = ["RealTimeChunking", "guidance_weights", "serve_with_rtc", "soft_mask"]

FLOW_BETA = 5.0


class RealTimeChunking(GuidedChunkSampler):
    """A flow policy served with RTC. With mode `off` the prefix is ignored and the result is
    the flow policy's own. Mode `trained` is refused: no flow policy is trained for it."""

    def __init__(self, flow: FlowMatchingPolicy, config: RTCConfig) -> None:
        if config.mode == "trained":
            raise ValueError(
                "mode trained needs a pi0.5 checkpoint trained with training-time RTC "
                "(rtc_training_max_delay > 0), and this is a flow policy"
            )
        super().__init__(
            config,
            flow.config.n_steps,
            flow.config.chunk_size,
            default_beta=FLOW_BETA,
            default_overlap_rows=None,
        )
        self.flow = flow

    def forward(
        self,
        images: torch.Tensor,
        state: torch.Tensor,
        noise: torch.Tensor,
        prefix: torch.Tensor,
        prefix_len: torch.Tensor,
        delay: torch.Tensor,
    ) -> torch.Tensor:
        if self.rtc.mode == "exact" and differentiation_disabled():
            # Called under torch.inference_mode (an eager caller's choice): there torch.func.vjp
            # returns zeros in torch builds older than the fix of pytorch#177318 (2026-03), and
            # the guidance vanished silently. Sample outside it, on ordinary copies of the
            # inputs; grad mode stays off, the VJP enables its own.
            with torch.inference_mode(False), torch.no_grad():
                inputs = (images, state, noise, prefix, prefix_len, delay)
                return self.forward(*(t.clone() for t in inputs))
        context = self.flow.encode(images, state)
        target, mask = self.guidance_targets(prefix, prefix_len, delay)
        return self.flow.action_norm.unnormalize(self.sample(context, noise, target, mask))

    def guidance_targets(
        self, prefix: torch.Tensor, prefix_len: torch.Tensor, delay: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prefix in the normalized action space and the mask, (B, H, 1) for broadcasting."""
        target = self.flow.action_norm.normalize(prefix)
        return target, self.guidance_mask(prefix_len, delay).to(target.dtype)

    def velocity(
        self, actions: torch.Tensor, step: int | torch.Tensor, context: Context
    ) -> torch.Tensor:
        return self.flow.velocity(actions, step, context)

    def context_tensors(self, context: Context) -> tuple[torch.Tensor, ...]:
        return tuple(t for pair in context for t in pair)

    def context_from(self, tensors: Sequence[torch.Tensor]) -> Context:
        return list(zip(tensors[0::2], tensors[1::2], strict=True))

    def state_bounds(self, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self.flow.state_bounds(limit)

    def use_channels_last(self, enabled: bool = True) -> RealTimeChunking:
        self.flow.use_channels_last(enabled)
        return self


def serve_with_rtc(policy: TensorPolicy, config: RTCConfig) -> TensorPolicy:
    """`policy` (a flow policy) served with real-time chunking: its module wrapped, its codec
    the RTC one. Mode `off` returns it unchanged. ValueError for a policy that is not a flow."""
    if config.mode == "off":
        return policy
    module = policy.module
    if isinstance(module, RealTimeChunking):
        module = module.flow
    if not isinstance(module, FlowMatchingPolicy):
        raise ValueError(
            f"real-time chunking needs a flow policy (flow, pi0 or pi0.5); this one is "
            f"{type(module).__name__} (set policy.rtc.mode=off)"
        )
    seed = policy.codec.seed if isinstance(policy.codec, FlowCodec) else None
    codec = RTCCodec(policy.spec) if seed is None else RTCCodec(policy.spec, seed)
    return TensorPolicy(
        spec=policy.spec,
        module=RealTimeChunking(module, config),
        codec=codec,
    )
