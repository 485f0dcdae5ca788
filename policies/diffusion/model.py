"""Diffusion Policy (Chi et al., "Diffusion Policy: Visuomotor Policy Learning via Action
Diffusion", 2023), as served by Tempo.

Read top to bottom, `forward` is the paper's inference path:

1. The frames of every one of the `n_obs_steps` observation steps, oldest first, are normalized
   and encoded into keypoint features (policies.diffusion.vision: one encoder shared by the
   cameras, or one each), as LeRobot encodes its whole observation queue at every chunk. The
   frames of past steps come from the robot's session (`RobotContext.past_frames`, one per
   control step the robot sent), or, at an episode start or outside a session, copies of the
   current ones (as LeRobot fills its queue with the first observation).
2. The conditioning vector: for each observation step, oldest first, the normalized robot
   state, every camera's features and the environment state, all flattened. The states of
   past steps come from the state history.
3. `horizon` actions start as Gaussian noise and are denoised in `steps` U-Net evaluations
   (policies.diffusion.scheduler: DDPM or DDIM, as the checkpoint says). Every draw is fresh
   (`torch.randn` on the module's device, inside a captured graph too: the device generator's
   offset advances on each replay), or, for a robot whose `fixed_noise` is 1, the module's
   fixed noise bank (seeded from NOISE_SEED): the chunk is then a deterministic function of
   the inputs, which the start-up parity check compares across tiers and the tests compare
   with LeRobot's. The loop is plain tensor code (no host reads, no branch on a value), so one
   CUDA graph holds all of it.
4. The actions from the current observation step on are unnormalized into robot units.

Contract (policies/inputs.py, codec policies.diffusion.codec): forward(frames, state[,
past_frames, has_past], fixed_noise) -> actions float32 (B, horizon - n_obs_steps + 1,
action_dim). frames: uint8 (B, n_cameras, H, W, 3); state: float32 (B, n_obs_steps,
state_size); fixed_noise: float32 (B, 1). With cameras and more than one observation step,
also past_frames: uint8 (B, n_obs_steps - 1, n_cameras, H, W, 3), the previous steps' frames
(oldest first), and has_past: float32 (B, 1), 0 where there are none (then the current
frames stand for them).

Names match LeRobot's `DiffusionModel` (without its `diffusion.` prefix) but the backbone's
(see policies.diffusion.vision), so LeRobot weights load with one renaming (policies.diffusion.
lerobot).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

from policies.act.preprocess import Normalizer, prepare_images
from policies.diffusion.config import DiffusionConfig
from policies.diffusion.scheduler import Sampler
from policies.diffusion.unet import ConditionalUnet1d
from policies.diffusion.vision import RgbEncoder
from policies.model_hooks import ServedModule

NOISE_SEED = 0xD1FF


class DiffusionPolicy(ServedModule):
    policy_type = "diffusion"
    precast_half_weights: ClassVar[bool] = False

    pixel_scale: torch.Tensor
    noise_bank: torch.Tensor  # (draws, horizon, action_dim): the fixed noise

    def __init__(self, config: DiffusionConfig) -> None:
        super().__init__()
        self.config = config
        eps = config.norm_eps
        self.image_norm = Normalizer(config.image_norm, (config.n_cameras, 3), eps)
        self.state_norm = Normalizer(config.state_norm, (config.state_dim,), eps)
        self.env_state_norm = Normalizer(config.env_state_norm, (config.env_state_dim,), eps)
        self.action_norm = Normalizer(config.action_norm, (config.action_dim,), eps)
        self.register_buffer("pixel_scale", torch.tensor(255.0), persistent=False)
        self.rgb_encoder: nn.Module | None = None
        if config.n_cameras and config.use_separate_rgb_encoder_per_camera:
            self.rgb_encoder = nn.ModuleList(RgbEncoder(config) for _ in range(config.n_cameras))
        elif config.n_cameras:
            self.rgb_encoder = RgbEncoder(config)
        self.unet = ConditionalUnet1d(
            action_dim=config.action_dim,
            global_cond_dim=config.step_cond_dim * config.n_obs_steps,
            down_dims=config.down_dims,
            kernel_size=config.kernel_size,
            n_groups=config.n_groups,
            step_embed_dim=config.diffusion_step_embed_dim,
            film_scale=config.use_film_scale_modulation,
        )
        self.sampler = Sampler(config)
        generator = torch.Generator().manual_seed(NOISE_SEED)
        bank = torch.randn(
            (self.sampler.draws, config.horizon, config.action_dim), generator=generator
        )
        self.register_buffer("noise_bank", bank, persistent=False)

    @property
    def reads_past_frames(self) -> bool:
        """Whether the previous steps' frames are inputs (cameras and n_obs_steps > 1)."""
        return self.config.n_cameras > 0 and self.config.n_obs_steps > 1

    def forward(
        self, frames: torch.Tensor, state: torch.Tensor, *rest: torch.Tensor
    ) -> torch.Tensor:
        """See the module doc: frames, state[, past_frames, has_past], fixed_noise -> actions."""
        *past, fixed_noise = rest
        steps = frames.unsqueeze(1)  # (B, 1, n_cameras, H, W, 3): this step
        if self.reads_past_frames:
            previous, has_past = past
            # Where none were kept (a tool's context), this step stands for them.
            there = has_past.reshape(-1, 1, 1, 1, 1, 1) > 0.5
            previous = torch.where(there, previous, steps.expand_as(previous))
            steps = torch.cat([previous, steps], dim=1)
        batch, n_steps = steps.shape[:2]
        history = self.image_features(steps.flatten(0, 1)).unflatten(0, (batch, n_steps))
        if n_steps == 1:  # one step, or no camera (zero features): the same for every step
            history = history.expand(-1, self.config.n_obs_steps, -1)
        cond = self.conditioning(state, history)
        fixed = fixed_noise.reshape(-1, 1, 1) > 0.5
        actions = self.denoise(cond, fixed)[:, self.config.n_obs_steps - 1 :]
        return self.action_norm.unnormalize(actions)

    def image_features(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 (B, n_cameras, H, W, 3) -> (B, n_cameras * D), cameras in order."""
        batch, n_cameras = frames.shape[:2]
        if self.rgb_encoder is None:
            return frames.new_zeros((batch, 0), dtype=self.pixel_scale.dtype)
        pixels = prepare_images(frames, self.pixel_scale, self.image_norm, None, False)
        if isinstance(self.rgb_encoder, nn.ModuleList):
            per_camera = pixels.unflatten(0, (batch, n_cameras))
            encoded = [enc(per_camera[:, i]) for i, enc in enumerate(self.rgb_encoder)]
            return torch.cat(encoded, dim=-1)
        return self.rgb_encoder(pixels).reshape(batch, -1)

    def conditioning(self, state: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """(B, n_obs_steps * step_cond_dim): per step, state, cameras, environment."""
        dim = self.config.state_dim
        parts = [self.state_norm.normalize(state[..., :dim]), history]
        if self.config.env_state_dim:
            parts.append(self.env_state_norm.normalize(state[..., dim:]))
        return torch.cat(parts, dim=-1).flatten(1)

    def denoise(self, cond: torch.Tensor, fixed: torch.Tensor) -> torch.Tensor:
        """Normalized actions (B, horizon, action_dim) from noise, conditioned on `cond`; rows
        where `fixed` (bool, (B, 1, 1)) take the noise bank's draws. Each step is one call of
        `denoise_step` (a compiled region: traced and compiled once for all steps)."""
        sampler = self.sampler
        draws = iter(range(sampler.draws))
        x = self._noise(next(draws), fixed, cond)
        for k in range(sampler.steps):
            noise = (
                self._noise(next(draws), fixed, cond)
                if sampler.needs_noise(k)
                else torch.zeros_like(x)
            )
            # x is a fresh tensor every step (a region's inputs must not alias each other).
            x = denoise_step(self.unet, sampler, sampler.step_indices[k : k + 1], x, cond, noise)
        return x

    def _noise(self, draw: int, fixed: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """Standard normal (B, horizon, action_dim): fresh from the device's generator, or the
        bank's draw `draw` where `fixed`."""
        shape = (like.shape[0], self.config.horizon, self.config.action_dim)
        fresh = torch.randn(shape, device=like.device, dtype=like.dtype)
        return torch.where(fixed, self.noise_bank[draw].to(like.dtype), fresh)

    def state_bounds(self, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) per state entry (robot state, then environment state): the raw values
        whose normalization stays within +-limit (policies.tensor_policy.with_state_bounds)."""
        robot = self.state_norm.input_bounds(limit)
        env = self.env_state_norm.input_bounds(limit)
        return torch.cat([robot[0], env[0]]), torch.cat([robot[1], env[1]])


def _compile_region(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    region = getattr(torch.compiler, "nested_compile_region", None)
    return function if region is None else region(function)


@_compile_region
def denoise_step(
    unet: ConditionalUnet1d,
    sampler: Sampler,
    index: torch.Tensor,
    x: torch.Tensor,
    cond: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """One reverse-diffusion step: the U-Net's prediction at step `index` ((1,) int64), then
    the scheduler's update. Under torch.compile a nested compile region, compiled once and
    called for every step (100 for DDPM) instead of 100 unrolled copies; eagerly just the
    call. Pure tensor code: the CUDA graph of the whole step holds every call."""
    out = unet(x, sampler.timestep(index, x.shape[0]), cond)
    return sampler.step(index, out, x, noise)
