"""Real-time chunking (Black, Galliker, Levine, "Real-Time Execution of Action Chunking Flow
Policies", 2025): the guided Euler sampler, for any flow-matching action denoiser.

While a new chunk is computed the robot keeps executing the previous one. The new chunk's first d
actions (d = inference delay in control steps) will never be executed: by the time it lands the
old chunk has played them. RTC denoises the new chunk so that it agrees with the old one where
they overlap, so there is no jump when execution switches to it.

Time runs as in the paper (and the flow family): t = k / n at Euler step k, from noise (t = 0) to
actions (t = 1), A^{t + 1/n} = A^t + v(A^t) / n. A denoiser with the opposite convention (pi0:
time 1 is noise) converts in its `velocity`.

    prefix Y     the previous chunk's not-yet-executed actions, row 0 = the new observation's
                 step, normalized like the model's actions; `prefix_len` rows are valid
    soft mask W  1 for i < d; c_i (e^c_i - 1) / (e - 1) for d <= i < end, where
                 c_i = (end - i) / (end - d + 1); 0 from `end` = min(prefix_len, overlap_rows)
                 on. `linear` uses c_i, `ones` 1, `zeros` 0 over the overlap.
    guidance     at Euler time t, with A1 = A^t + (1 - t) v(A^t) the predicted final chunk,
                     v' = v + min(beta, (1 - t) / t * (t^2 + (1 - t)^2) / (1 - t)^2) * g
                 exact:     g = (W (Y - A1))^T dA1/dA^t, a vector-Jacobian product through the
                            action expert (the paper's equation)
                 stop_grad: g = W (Y - A1), the Jacobian taken as identity (LeRobot's "guided"
                            mode computes this: its velocity is computed before gradients are
                            enabled)
                 inpaint:   no guidance; after each step the noisy actions are moved to the
                            prefix's point on its own straight path, t Y + (1 - t) noise, by W:
                            the first d actions end exactly on the prefix
                 trained:   for a model trained with clean prefixes (LeRobot's training-time
                            RTC): the first d rows are the prefix before and after every step
                            and the denoiser is told they are clean (flow time 1 per token);
                            no guidance, d capped at the training's maximum delay

Everything is built on the device from tensors: d and prefix_len are inputs, the positions and
per-step guidance weights are buffers. One captured CUDA graph therefore serves every d.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from policies.flow.settings import MaskSchedule, RTCConfig
from policies.model_hooks import ServedModule


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


class GuidedChunkSampler(ServedModule):
    """RTC's sampler: the guidance math of every mode, over a denoiser the subclass supplies.

    The subclass's part (what a family must give RTC: encode once, then velocities):
        velocity(actions, step, context)         v at t = step / n_steps (a (1,) tensor step
                                                 inside the compiled region), normalized space
        clean_velocity(actions, step, context, clean)
                                                 v with the (B, H) `clean` rows at t = 1 (mode
                                                 trained only)
        context_tensors(context), context_from(tensors)
                                                 the context as a flat tuple of tensors and back
                                                 (the compiled region's inputs)
    Its forward encodes the observation, builds the targets (normalized prefix) and calls
    `sample`.
    """

    positions: torch.Tensor
    step_weights: torch.Tensor
    step_indices: torch.Tensor
    step_times: torch.Tensor

    def __init__(
        self,
        config: RTCConfig,
        n_steps: int,
        chunk_size: int,
        *,
        default_beta: float,
        default_overlap_rows: int | None,
        trained_max_delay: int = 0,
    ) -> None:
        super().__init__()
        if config.regional_compile and not hasattr(torch.compiler, "nested_compile_region"):
            raise ValueError(
                f"torch {torch.__version__} has no torch.compiler.nested_compile_region; set "
                "policy.rtc.regional_compile=false"
            )
        self.rtc = config
        self.n_steps = n_steps
        self.beta = default_beta if config.beta is None else config.beta
        rows = default_overlap_rows if config.overlap_rows is None else config.overlap_rows
        self.overlap_rows = chunk_size if rows is None else min(rows, chunk_size)
        self.trained_max_delay = trained_max_delay
        self.register_buffer(
            "positions", torch.arange(chunk_size, dtype=torch.float32), persistent=False
        )
        self.register_buffer("step_weights", guidance_weights(n_steps, self.beta), persistent=False)
        self.register_buffer("step_indices", torch.arange(n_steps), persistent=False)
        self.register_buffer(
            "step_times",
            torch.tensor([k / n_steps for k in range(n_steps)], dtype=torch.float32),
            persistent=False,
        )

    # ---- the denoiser: the subclass's part ---------------------------------------------------

    def velocity(
        self, actions: torch.Tensor, step: int | torch.Tensor, context: Any
    ) -> torch.Tensor:
        raise NotImplementedError

    def clean_velocity(
        self, actions: torch.Tensor, step: int | torch.Tensor, context: Any, clean: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no per-token flow time")

    def context_tensors(self, context: Any) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def context_from(self, tensors: Sequence[torch.Tensor]) -> Any:
        raise NotImplementedError

    # ---- the guided sampler ------------------------------------------------------------------

    def guidance_mask(self, prefix_len: torch.Tensor, delay: torch.Tensor) -> torch.Tensor:
        """(B, H, 1) float: the soft mask W; for mode trained the hard one, 1 for the first
        min(d, prefix_len, trained_max_delay) rows."""
        if self.rtc.mode == "trained":
            rows = delay.clamp(min=0).minimum(prefix_len).clamp(max=self.trained_max_delay)
            mask = self.positions.unsqueeze(0) < rows.to(self.positions.dtype).unsqueeze(1)
            return mask.to(self.positions.dtype).unsqueeze(-1)
        end = prefix_len.clamp(max=self.overlap_rows)
        return soft_mask(delay, end, self.positions, self.rtc.schedule).unsqueeze(-1)

    def sample(
        self, context: Any, noise: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """All Euler steps from `noise`, guided toward `target` (normalized, the noise's shape)
        by `mask` ((B, H, 1), guidance_mask's): the chunk in the normalized action space."""
        # exact's VJP inside a compiled region fails to compile on torch 2.11 ("Expected
        # FakeTensor", seen on an H100): exact always unrolls its steps.
        if not self.rtc.regional_compile or self.rtc.mode == "exact":
            actions = noise
            for step in range(self.n_steps):
                actions = self.denoise(actions, step, context, target, mask, noise)
            return actions
        # A compiled region's inputs must be distinct, non-aliasing tensors: keys and values
        # are views of one projection (contiguous copies, read n_steps times anyway), and the
        # first step's actions would be the noise itself.
        memory = [t.contiguous() for t in self.context_tensors(context)]
        actions = noise.clone()
        for step in range(self.n_steps):
            actions = denoise_region(
                self, actions, self.step_indices[step : step + 1], target, mask, noise, *memory
            )
        return actions

    def denoise(
        self,
        actions: torch.Tensor,
        step: int | torch.Tensor,
        context: Any,
        target: torch.Tensor,
        mask: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """One Euler step of the guided sampler, A^t -> A^{t + 1/n}. `step` may be a (1,)
        tensor (the compiled region that serves every step)."""
        mode, n = self.rtc.mode, self.n_steps
        t = self.step_times[step]
        if mode == "trained":
            clean = mask > 0.5
            actions = torch.where(clean, target, actions)
            velocity = self.clean_velocity(actions, step, context, clean[..., 0])
            return torch.where(clean, target, actions + velocity / n)
        if mode == "exact":
            velocity = self.guided_velocity_exact(actions, step, context, target, mask)
        elif mode == "stop_grad":
            velocity = self.velocity(actions, step, context)
            predicted = actions + (1 - t) * velocity
            velocity = velocity + self.step_weights[step] * (mask * (target - predicted))
        else:
            velocity = self.velocity(actions, step, context)
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
        context: Any,
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
        context: Any,
        target: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(g, v): the vector-Jacobian product and the expert's velocity at A^t. Only the
        actions are differentiated: the context is a constant of the VJP."""
        t = self.step_times[step]

        def predicted_end(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            v = self.velocity(a, step, context)
            return a + (1 - t) * v, v

        predicted, pullback, velocity = torch.func.vjp(  # type: ignore[misc]
            predicted_end, actions, has_aux=True
        )
        (correction,) = pullback(mask * (target - predicted))
        return correction, velocity

    def extra_repr(self) -> str:
        # In the repr, so that the compile cache tells the modes apart (their tensors are equal).
        rtc = self.rtc
        return (
            f"mode={rtc.mode}, beta={self.beta}, schedule={rtc.schedule}, "
            f"overlap_rows={self.overlap_rows}, regional_compile={rtc.regional_compile}"
        )


def _compile_region(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    region = getattr(torch.compiler, "nested_compile_region", None)
    return function if region is None else region(function)


@_compile_region
def denoise_region(
    sampler: GuidedChunkSampler,
    actions: torch.Tensor,
    step: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    noise: torch.Tensor,
    *memory: torch.Tensor,
) -> torch.Tensor:
    """`sampler.denoise` as one compiled region: torch.compile compiles it once and calls it
    for every Euler step (the step is a (1,) tensor input) instead of compiling n unrolled
    copies, each with exact guidance holding a VJP (measured on a CPU, exact's cold compile of
    a tiny flow policy: 88 s unrolled, 43 s as a region). Eagerly it is just the call. `memory`
    is the context's tensors (sampler.context_tensors)."""
    context = sampler.context_from(memory)
    return sampler.denoise(actions, step, context, target, mask, noise)
