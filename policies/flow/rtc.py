"""Real-time chunking (Black, Galliker, Levine, "Real-Time Execution of Action Chunking Flow
Policies", 2025) as a way of serving any `FlowMatchingPolicy`.

While a new chunk is computed the robot keeps executing the previous one. The new chunk's first d
actions (d = inference delay in control steps) will never be executed: by the time it lands the
old chunk has played them. RTC denoises the new chunk so that it agrees with the old one where
they overlap, so there is no jump when execution switches to it.

    prefix Y     the previous chunk's not-yet-executed actions, row 0 = the new observation's
                 step, normalized like the model's actions; `prefix_len` rows are valid
    soft mask W  1 for i < d; c_i (e^c_i - 1) / (e - 1) for d <= i < end, where
                 c_i = (end - i) / (end - d + 1); 0 from `end` = prefix_len (= H - s, s the
                 execution horizon) on. `linear` uses c_i, `ones` 1, `zeros` 0 over the overlap.
    guidance     at Euler time t, with A1 = A^t + (1 - t) v(A^t) the predicted final chunk,
                     v' = v + min(beta, (1 - t) / t * (t^2 + (1 - t)^2) / (1 - t)^2) * g
                 exact:     g = (W (Y - A1))^T dA1/dA^t, a vector-Jacobian product through the
                            action expert (the paper's equation)
                 stop_grad: g = W (Y - A1), the Jacobian taken as identity (what the widely used
                            open implementation computes, since its velocity is computed before
                            gradients are enabled)
                 inpaint:   no guidance; after each step the noisy actions are moved to the
                            prefix's point on its own straight path, t Y + (1 - t) noise, by W:
                            the first d actions end exactly on the prefix

Everything is built on the device from tensors: d and prefix_len are inputs, the positions and
per-step guidance weights are buffers. One captured CUDA graph therefore serves every d.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from policies.flow.codec import FlowCodec, RTCCodec
from policies.flow.model import Context, FlowMatchingPolicy
from policies.model_hooks import ServedModule
from policies.settings import MaskSchedule, RTCSettings
from policies.tensor_policy import TensorPolicy


def soft_mask(
    delay: torch.Tensor, prefix_len: torch.Tensor, positions: torch.Tensor, schedule: MaskSchedule
) -> torch.Tensor:
    """The mask W, (B, H): delay and prefix_len are (B,) integer tensors, positions (H,) floats
    0..H-1. d is clamped to [0, prefix_len]: only actions of the previous chunk can be frozen."""
    end = prefix_len.to(positions.dtype).unsqueeze(1)
    d = delay.to(positions.dtype).clamp(min=0).unsqueeze(1).minimum(end)
    i = positions.unsqueeze(0)
    c = ((end - i) / (end - d + 1)).clamp(0.0, 1.0)
    if schedule == "exp":
        overlap = c * torch.expm1(c) / (math.e - 1)
    elif schedule == "linear":
        overlap = c
    elif schedule == "ones":
        overlap = torch.ones_like(c)
    elif schedule == "zeros":
        overlap = torch.zeros_like(c)
    else:
        raise ValueError(f"unknown mask schedule {schedule!r}; use exp, linear, ones or zeros")
    ones = torch.ones_like(overlap)
    return torch.where(i < d, ones, torch.where(i < end, overlap, torch.zeros_like(overlap)))


def guidance_weights(n_steps: int, beta: float) -> torch.Tensor:
    """(n_steps,) weights min(beta, (1 - t)/t * (t^2 + (1 - t)^2)/(1 - t)^2) at t = k / n_steps;
    beta at t = 0, where the expression is infinite."""
    weights = []
    for k in range(n_steps):
        t = k / n_steps
        if t == 0.0:
            weights.append(beta)
            continue
        weights.append(min(beta, (1 - t) / t * (t * t + (1 - t) ** 2) / (1 - t) ** 2))
    return torch.tensor(weights, dtype=torch.float32)


def differentiation_disabled() -> bool:
    """True in eager code under torch.inference_mode, where the exact VJP cannot be taken.
    (A compiled region never runs in inference mode here: the runner's tiers use no_grad.)"""
    return not torch.compiler.is_compiling() and torch.is_inference_mode_enabled()


class RealTimeChunking(ServedModule):
    """A flow policy served with RTC.

    forward(images, state, noise, prefix float32 (B, H, action_dim) in robot units, prefix_len
    int64 (B,), delay int64 (B,)) -> actions float32 (B, H, action_dim) in robot units. With
    mode `off` the prefix is ignored and the result is the flow policy's own.
    """

    positions: torch.Tensor
    step_weights: torch.Tensor
    step_indices: torch.Tensor

    def __init__(self, flow: FlowMatchingPolicy, config: RTCSettings) -> None:
        super().__init__()
        if config.regional_compile and not hasattr(torch.compiler, "nested_compile_region"):
            raise ValueError(
                f"torch {torch.__version__} has no torch.compiler.nested_compile_region; set "
                "policy.rtc.regional_compile=false"
            )
        self.flow = flow
        self.rtc = config
        n = flow.config.n_steps
        self.register_buffer(
            "positions", torch.arange(flow.config.chunk_size, dtype=torch.float32), persistent=False
        )
        self.register_buffer("step_weights", guidance_weights(n, config.beta), persistent=False)
        self.register_buffer("step_indices", torch.arange(n), persistent=False)

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
        flow = self.flow
        context = flow.encode(images, state)
        target, mask = self.guidance_targets(prefix, prefix_len, delay)
        # exact's VJP inside a compiled region fails to compile on torch 2.11 ("Expected
        # FakeTensor", seen on an H100): exact always unrolls its steps.
        if not self.rtc.regional_compile or self.rtc.mode == "exact":
            actions = noise
            for step in range(flow.config.n_steps):
                actions = self.denoise(actions, step, context, target, mask, noise)
            return flow.action_norm.unnormalize(actions)
        # A compiled region's inputs must be distinct, non-aliasing tensors: keys and values
        # are views of one projection (contiguous copies, read n_steps times anyway), and the
        # first step's actions would be the noise itself.
        memory = [t.contiguous() for pair in context for t in pair]
        actions = noise.clone()
        for step in range(flow.config.n_steps):
            actions = denoise_region(
                self, actions, self.step_indices[step : step + 1], target, mask, noise, *memory
            )
        return flow.action_norm.unnormalize(actions)

    def guidance_targets(
        self, prefix: torch.Tensor, prefix_len: torch.Tensor, delay: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prefix in the normalized action space and the mask, (B, H, 1) for broadcasting."""
        target = self.flow.action_norm.normalize(prefix)
        mask = soft_mask(delay, prefix_len, self.positions, self.rtc.schedule)
        return target, mask.unsqueeze(-1).to(target.dtype)

    def denoise(
        self,
        actions: torch.Tensor,
        step: int | torch.Tensor,
        context: Context,
        target: torch.Tensor,
        mask: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """One Euler step of the guided sampler, A^t -> A^{t + 1/n}. `step` may be a (1,)
        tensor (the compiled region that serves every step)."""
        flow, mode = self.flow, self.rtc.mode
        n = flow.config.n_steps
        t = flow.step_times[step]
        if mode == "exact":
            velocity = self.guided_velocity_exact(actions, step, context, target, mask)
        elif mode == "stop_grad":
            velocity = flow.velocity(actions, step, context)
            predicted = actions + (1 - t) * velocity
            velocity = velocity + self.step_weights[step] * (mask * (target - predicted))
        else:
            velocity = flow.velocity(actions, step, context)
        actions = actions + velocity / n
        if mode == "inpaint":
            t_next = (step + 1) / n
            on_path = t_next * target + (1 - t_next) * noise
            actions = actions + mask * (on_path - actions)
        return actions

    def guided_velocity_exact(
        self,
        actions: torch.Tensor,
        step: int | torch.Tensor,
        context: Context,
        target: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """v + w_t * (W (Y - A1))^T dA1/dA^t, the VJP through the action expert (torch.func, so
        it works under no_grad and traces into a compiled graph)."""
        correction, velocity = self.correction_exact(actions, step, context, target, mask)
        return velocity + self.step_weights[step] * correction

    def correction_exact(
        self,
        actions: torch.Tensor,
        step: int | torch.Tensor,
        context: Context,
        target: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(g, v): the vector-Jacobian product and the expert's velocity at A^t."""
        t = self.flow.step_times[step]

        def predicted_end(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            v = self.flow.velocity(a, step, context)
            return a + (1 - t) * v, v

        predicted, pullback, velocity = torch.func.vjp(  # type: ignore[misc]
            predicted_end, actions, has_aux=True
        )
        (correction,) = pullback(mask * (target - predicted))
        return correction, velocity

    def state_bounds(self, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self.flow.state_bounds(limit)

    def extra_repr(self) -> str:
        # In the repr, so that the compile cache tells the modes apart (their tensors are equal).
        rtc = self.rtc
        return (
            f"mode={rtc.mode}, beta={rtc.beta}, schedule={rtc.schedule}, "
            f"regional_compile={rtc.regional_compile}"
        )

    def use_channels_last(self, enabled: bool = True) -> RealTimeChunking:
        self.flow.use_channels_last(enabled)
        return self


def _compile_region(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    region = getattr(torch.compiler, "nested_compile_region", None)
    return function if region is None else region(function)


@_compile_region
def denoise_region(
    rtc: RealTimeChunking,
    actions: torch.Tensor,
    step: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    noise: torch.Tensor,
    *memory: torch.Tensor,
) -> torch.Tensor:
    """`rtc.denoise` as one compiled region: torch.compile compiles it once and calls it for
    every Euler step (the step is a (1,) tensor input) instead of compiling n unrolled copies,
    each with exact guidance holding a VJP (measured on a CPU, exact's cold compile of a tiny
    policy: 88 s unrolled, 43 s as a region). Eagerly it is just the call. `memory` is the
    context's keys and values, flattened."""
    context = list(zip(memory[0::2], memory[1::2], strict=True))
    return rtc.denoise(actions, step, context, target, mask, noise)


def serve_with_rtc(policy: TensorPolicy, config: RTCSettings) -> TensorPolicy:
    """`policy` (a flow policy) served with real-time chunking: its module wrapped, its codec
    the RTC one. Mode `off` returns it unchanged. ValueError for a policy that is not a flow."""
    if config.mode == "off":
        return policy
    module = policy.module
    if isinstance(module, RealTimeChunking):
        module = module.flow
    if not isinstance(module, FlowMatchingPolicy):
        raise ValueError(
            f"real-time chunking needs a flow policy; this one is {type(module).__name__} "
            "(set policy.rtc.mode=off)"
        )
    seed = policy.codec.seed if isinstance(policy.codec, FlowCodec) else None
    codec = RTCCodec(policy.spec) if seed is None else RTCCodec(policy.spec, seed)
    return TensorPolicy(
        spec=policy.spec,
        module=RealTimeChunking(module, config),
        codec=codec,
    )
