"""The reverse diffusion of Diffusion Policy: from Gaussian noise to an action sequence, in a
fixed number of steps, as DDPM (Ho et al., 2020) or DDIM (Song et al., 2021) with eta = 0.

The noise schedule: betas over `num_train_timesteps` steps (linear, scaled linear, or the
cosine schedule of Nichol and Dhariwal capped at 0.999, `squaredcos_cap_v2`), alpha_bar their
cumulative product of (1 - beta). Inference visits `steps` of the training timesteps, evenly
spaced from 0 ("leading" spacing): t_k = (steps - 1 - k) * (T // steps). At each step, with
a = alpha_bar[t], a' = alpha_bar[t_prev] (1 past the first step; DDIM: 1, "set_alpha_to_one"):

    x0   = (x - sqrt(1 - a) * out) / sqrt(a)    (epsilon prediction; `sample`: x0 = out)
    x0   = clamp(x0, -r, r)                     (clip_sample)
    DDPM x = sqrt(a') (1 - a/a') / (1 - a) * x0 + sqrt(a/a') (1 - a') / (1 - a) * x
             + sqrt((1 - a') / (1 - a) * (1 - a/a')) * z,  z ~ N(0, I), no z at t = 0
    DDIM x = sqrt(a') * x0 + sqrt(1 - a') * eps  (eps: the prediction, or from the unclipped x0)

The numbers are those of Hugging Face diffusers' DDPMScheduler and DDIMScheduler with the
options LeRobot passes (its defaults otherwise), computed here in the same float32 order once,
at build time: each step's coefficients are a row of one buffer (`table`), read with the step's
index as a tensor, so one step is a pure tensor function of (step index, U-Net output, x,
noise): no host work, no branch on a value, one traced body for every step, and a CUDA graph
can hold the whole loop. The caller draws the noise (policies.diffusion.model: on the device,
like diffusers, in the same order: the start, then one draw per DDPM step with t > 0).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from policies.diffusion.config import DiffusionConfig


def betas(config: DiffusionConfig) -> torch.Tensor:
    """float32 (num_train_timesteps,): the noise schedule."""
    n = config.num_train_timesteps
    if config.beta_schedule == "linear":
        return torch.linspace(config.beta_start, config.beta_end, n, dtype=torch.float32)
    if config.beta_schedule == "scaled_linear":
        root = torch.linspace(config.beta_start**0.5, config.beta_end**0.5, n, dtype=torch.float32)
        return root**2

    def alpha_bar(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    values = [min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), 0.999) for i in range(n)]
    return torch.tensor(values, dtype=torch.float32)


def timesteps(config: DiffusionConfig) -> list[int]:
    """The training timesteps inference visits, the noisiest first ("leading" spacing)."""
    ratio = config.num_train_timesteps // config.steps
    return [k * ratio for k in reversed(range(config.steps))]


# The columns of Sampler.table, one row per step (8 float32: rows stay 32-byte aligned).
T, X0_NOISE, X0_SCALE, KEEP_X0, KEEP_X, SIGMA = range(6)
COLUMNS = 8


class Sampler(nn.Module):
    """The per-step coefficients of the reverse diffusion (see the module doc), as buffers
    rebuilt from the config (not saved: the config is what a checkpoint records)."""

    step_t: torch.Tensor  # (steps,) int64: the timestep the U-Net is told
    step_indices: torch.Tensor  # (steps,) int64: 0 .. steps - 1, sliced as each step's index
    # (steps, COLUMNS) float32: t; sqrt(1 - a); sqrt(a); DDPM: the coefficients of x0 and x,
    # DDIM: sqrt(a') and sqrt(1 - a'); DDPM: the noise's standard deviation (0 at t = 0).
    table: torch.Tensor

    def __init__(self, config: DiffusionConfig) -> None:
        super().__init__()
        self.kind = config.noise_scheduler_type
        self.prediction = config.prediction_type
        self.clip = config.clip_sample_range if config.clip_sample else None
        alpha_bar = torch.cumprod(1.0 - betas(config), dim=0)
        one = torch.tensor(1.0)
        ratio = config.num_train_timesteps // config.steps
        self.noisy_steps = tuple(t > 0 for t in timesteps(config))  # DDPM draws noise there
        rows: list[list[torch.Tensor]] = []
        for t in timesteps(config):
            a = alpha_bar[t]
            a_prev = alpha_bar[t - ratio] if t - ratio >= 0 else one
            beta_prod, beta_prod_prev = 1 - a, 1 - a_prev
            if self.kind == "DDPM":
                alpha_t = a / a_prev
                beta_t = 1 - alpha_t
                keep_x0 = a_prev**0.5 * beta_t / beta_prod
                keep_x = alpha_t**0.5 * beta_prod_prev / beta_prod
                variance = torch.clamp(beta_prod_prev / beta_prod * beta_t, min=1e-20)
                sigma = variance**0.5 if t > 0 else torch.tensor(0.0)
            else:
                keep_x0, keep_x, sigma = a_prev**0.5, beta_prod_prev**0.5, torch.tensor(0.0)
            t_value = torch.tensor(float(t))
            rows.append([t_value, beta_prod**0.5, a**0.5, keep_x0, keep_x, sigma])
        table = torch.zeros(len(rows), COLUMNS)
        table[:, : SIGMA + 1] = torch.stack([torch.stack(row) for row in rows]).to(torch.float32)
        self.register_buffer("step_t", torch.tensor(timesteps(config)), persistent=False)
        self.register_buffer("step_indices", torch.arange(len(rows)), persistent=False)
        self.register_buffer("table", table, persistent=False)

    @property
    def steps(self) -> int:
        return len(self.noisy_steps)

    @property
    def draws(self) -> int:
        """Noise draws one sampling takes: the start, then DDPM's steps with t > 0."""
        return 1 + (sum(self.noisy_steps) if self.kind == "DDPM" else 0)

    def step(
        self, index: torch.Tensor, out: torch.Tensor, x: torch.Tensor, noise: torch.Tensor
    ) -> torch.Tensor:
        """x at step `index` ((1,) int64, a slice of step_indices) and the U-Net's output there
        -> x at the next step; `noise` standard normal of x's shape where the step draws
        (needs_noise), else zeros (DDPM's last step: sigma is 0 there too; the same shape keeps
        one traced region for every step)."""
        row = self.table[index].reshape(COLUMNS, 1, 1, 1)  # a gather: no host read
        if self.prediction == "epsilon":
            x0 = (x - row[X0_NOISE] * out) / row[X0_SCALE]
            eps = out
        else:
            x0 = out
            eps = (x - row[X0_SCALE] * x0) / row[X0_NOISE]
        if self.clip is not None:
            x0 = x0.clamp(-self.clip, self.clip)
        if self.kind == "DDIM":
            return row[KEEP_X0] * x0 + row[KEEP_X] * eps
        return row[KEEP_X0] * x0 + row[KEEP_X] * x + row[SIGMA] * noise

    def timestep(self, index: torch.Tensor, batch: int) -> torch.Tensor:
        """The U-Net's timestep at step `index`, (batch,) float32 (an integer value)."""
        return self.table[index, T].expand(batch)

    def needs_noise(self, k: int) -> bool:
        return self.kind == "DDPM" and self.noisy_steps[k]
