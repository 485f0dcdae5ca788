"""pi0 and pi0.5 served with real-time chunking: the guided sampler of
policies.flow.guided_sampling (one implementation of the guidance math for every family) over
pi0's action expert, with the prefix encoded once into its keys and values.

    forward(*frames, state, noise, prompt, prompt_mask, prefix, prefix_len, delay) -> actions
        the Pi0Step's inputs (policies.pi0.step), then
        prefix       float32 (B, chunk_size, action_size), robot units: the previous plan from
                     the observation's step on, zero-padded (policies.pi0.rtc_codec)
        prefix_len   int64 (B,): its valid rows
        delay        int64 (B,): the robot's inference delay d in control steps

pi0 integrates from noise at time 1 to actions at time 0 with velocity v = noise - actions; the
sampler's convention is the paper's (t = 1 - time, v' = -v), so `velocity` converts. The context
is the prefix's PrefixCache (and pi0's normalized state): constants of exact's VJP, which
differentiates the suffix pass alone. The prefix is normalized with the step's own action
statistics and zero-padded to max_action_dim, as LeRobot pads it (the padded action entries
are trained toward 0).

Mode trained (pi0.5 with rtc_training_max_delay > 0): the first d rows of x_t are the prefix,
each with flow time 0 in pi0's convention (clean), fed per token into the expert's adaRMS
conditioning, as LeRobot's trained mode does; d is capped at rtc_training_max_delay (LeRobot
refuses a larger one; a captured step cannot raise, so it keeps the rows it was trained for).

Defaults of this family, LeRobot's: beta (max_guidance_weight) 10, the overlap ending 10 rows
into the previous plan (its execution_horizon).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor

from policies.flow.guided_sampling import GuidedChunkSampler, differentiation_disabled
from policies.flow.settings import RTCConfig
from policies.pi0.backbone import PrefixCache, SuffixAttention
from policies.pi0.step import Pi0Step
from policies.tensor_policy import TensorPolicy

PI0_BETA = 10.0  # LeRobot's RTCConfig.max_guidance_weight
PI0_OVERLAP_ROWS = 10  # LeRobot's RTCConfig.execution_horizon

# pi0's context: the prefix's keys and values, and pi0's state (None for pi0.5).
Pi0Context = tuple[PrefixCache, Tensor | None]


def trained_max_delay(step: Pi0Step) -> int:
    """The checkpoint's rtc_training_max_delay (0: pi0, or pi0.5 trained without it)."""
    return int(getattr(step.config.network, "rtc_training_max_delay", 0))


def refuse_trained(step: Pi0Step) -> None:
    """ValueError (one sentence) when mode trained cannot serve this checkpoint."""
    if trained_max_delay(step) > 0:
        return
    which = "this is a pi0 checkpoint" if step.uses_state else "this one has 0"
    raise ValueError(
        "mode trained needs a pi0.5 checkpoint trained with training-time RTC "
        f"(rtc_training_max_delay > 0 in its config.json); {which}"
    )


class Pi0RealTimeChunking(GuidedChunkSampler):
    """A Pi0Step served with RTC (see the module doc). Mode `off` samples as the step does."""

    precast_half_weights = True
    serves_rtc_itself = True

    pi0_times: Tensor

    def __init__(self, step: Pi0Step, config: RTCConfig) -> None:
        if config.mode == "trained":
            refuse_trained(step)
        # Served, never trained: exact's backward through compiled layers would otherwise also
        # compute (and drop) every weight's gradient.
        step.requires_grad_(False)
        network = step.config.network
        n = network.num_inference_steps
        super().__init__(
            config,
            n,
            network.chunk_size,
            default_beta=PI0_BETA,
            default_overlap_rows=PI0_OVERLAP_ROWS,
            trained_max_delay=trained_max_delay(step),
        )
        self.step = step
        # pi0's own times, 1 + k dt in float32 as its loop makes them (policies.pi0.network).
        dt = -1.0 / n
        times = torch.tensor([1.0 + k * dt for k in range(n)], dtype=torch.float32)
        self.register_buffer("pi0_times", times, persistent=False)

    def forward(self, *inputs: Tensor) -> Tensor:
        if self.rtc.mode == "exact" and differentiation_disabled():
            # Under torch.inference_mode torch.func.vjp gave zeros in older torch builds
            # (pytorch#177318) and autograd records nothing: sample outside it, as the flow
            # family's RealTimeChunking does.
            with torch.inference_mode(False), torch.no_grad():
                return self.forward(*(t.clone() for t in inputs))
        step = self.step
        groups = len(step.group_sizes)
        frames = inputs[:groups]
        state, noise, prompt, prompt_mask, prefix, prefix_len, delay = inputs[groups:]
        context = self.encode(frames, state, prompt, prompt_mask)
        target = self.guidance_target(prefix)
        mask = self.guidance_mask(prefix_len, delay).to(target.dtype)
        return step.finish(self.sample(context, noise, target, mask))

    def encode(
        self, frames: Sequence[Tensor], state: Tensor, prompt: Tensor, prompt_mask: Tensor
    ) -> Pi0Context:
        """Vision and the language model over the prefix, once: the sampler's context."""
        network = self.step.network
        images, image_masks, token_mask, network_state = self.step.prepare(
            tuple(frames), state, prompt_mask
        )
        embedded = network.embed_prefix(images, image_masks, prompt, token_mask)
        return network.encode_prefix(*embedded), network_state

    def guidance_target(self, prefix: Tensor) -> Tensor:
        """The prefix (B, H, action_size) in robot units -> normalized, zero-padded to
        max_action_dim (B, H, max_action_dim)."""
        normalized = self.step.action_norm.normalize(prefix.float())
        missing = self.step.config.network.max_action_dim - normalized.shape[-1]
        return F.pad(normalized, (0, missing))

    def velocity(self, actions: Tensor, step: int | Tensor, context: Pi0Context) -> Tensor:
        cache, state = context
        time = self.pi0_times[step].expand(actions.shape[0])
        return -self.step.network.expert_velocity(cache, actions, time, state)

    def clean_velocity(
        self, actions: Tensor, step: int | Tensor, context: Pi0Context, clean: Tensor
    ) -> Tensor:
        """The velocity with the `clean` (B, H) rows at pi0's time 0, per token (pi0.5)."""
        cache, state = context
        time = self.pi0_times[step].reshape(-1, 1).expand(clean.shape)
        time = torch.where(clean, torch.zeros_like(time), time)
        return -self.step.network.expert_velocity(cache, actions, time, state)

    def context_tensors(self, context: Pi0Context) -> tuple[Tensor, ...]:
        cache, state = context
        network = self.step.network
        suffix = cache.suffix or network.paligemma_with_expert.suffix_attention(
            cache.pad, network.suffix_blocks
        )
        tensors = (cache.keys, cache.values, cache.pad, *suffix)
        return (*tensors, state) if state is not None else tensors

    def context_from(self, tensors: Sequence[Tensor]) -> Pi0Context:
        state = tensors[6] if len(tensors) > 6 else None
        suffix = SuffixAttention(tensors[3], tensors[4], tensors[5])
        return PrefixCache(tensors[0], tensors[1], tensors[2], suffix), state

    def state_bounds(self, limit: float) -> tuple[Tensor, Tensor]:
        return self.step.state_bounds(limit)

    def correction_exact(
        self,
        actions: Tensor,
        step: int | Tensor,
        context: Pi0Context,
        target: Tensor,
        mask: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The sampler's (g, v), by torch.autograd.grad where the step runs eagerly around
        compiled layers (compile_regions): dynamo refuses a compiled function under
        torch.func.vjp (a graph break, an error with fullgraph), while autograd runs the
        layers' compiled forward and backward. Inside a whole-step compile the sampler's
        torch.func.vjp is traced as before. The same numbers in FP32 (tests/unit/test_pi0_rtc)."""
        if torch.compiler.is_compiling():
            return super().correction_exact(actions, step, context, target, mask)
        t = self.step_times[step]
        with torch.enable_grad():
            leaf = actions.detach().requires_grad_(True)
            velocity = self.velocity(leaf, step, context)
            predicted = leaf + (1 - t) * velocity
            guidance = mask * (target - predicted.detach())
            (correction,) = torch.autograd.grad(predicted, leaf, guidance)
        return correction, velocity.detach()

    def compile_regions(self, compile_fn: Callable[[Callable[..., Any]], Any]) -> bool:
        """The step's layers compiled one of each kind, as without RTC, in every mode: the
        sampler's loop and guidance run around them, captured in the same graph (exact's VJP
        runs the compiled layers' backward, see correction_exact)."""
        return self.step.compile_regions(compile_fn)


def serve_pi0_with_rtc(policy: TensorPolicy, config: RTCConfig) -> TensorPolicy:
    """`policy` (pi0 or pi0.5) served with real-time chunking: its step wrapped, its codec the
    RTC one (same noise seed). Mode `off` returns it unchanged; ValueError (one sentence) for
    mode trained on a checkpoint not trained for it."""
    if config.mode == "off":
        return policy
    from policies.pi0.codec import Pi0Codec
    from policies.pi0.rtc_codec import Pi0RTCCodec

    module = policy.module
    if isinstance(module, Pi0RealTimeChunking):
        module = module.step
    if not isinstance(module, Pi0Step):
        raise TypeError(f"a pi0 policy's module is a Pi0Step, not {type(module).__name__}")
    seed = policy.codec.seed if isinstance(policy.codec, Pi0Codec) else None
    codec = (
        Pi0RTCCodec(policy.spec, module) if seed is None else Pi0RTCCodec(policy.spec, module, seed)
    )
    return TensorPolicy(spec=policy.spec, module=Pi0RealTimeChunking(module, config), codec=codec)
