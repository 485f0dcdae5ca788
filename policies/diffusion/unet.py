"""The denoiser of Diffusion Policy (Chi et al., 2023): a 1-D convolutional U-Net over the
action sequence, conditioned by FiLM on the diffusion step and the observations.

    x (B, horizon, action_dim), step (B,), cond (B, cond_dim) -> (B, horizon, action_dim)

The step is embedded (sinusoidal, then Linear-Mish-Linear) and joined with the observation
conditioning; every residual block maps that vector to a per-channel scale and bias (or a bias
only) applied between its two convolutions. The encoder halves the sequence after every stage
but the last, keeps each stage's output for the decoder, two middle blocks follow, and the
decoder doubles it back after every stage, reading the matching encoder output beside its
input. Module names follow LeRobot's `DiffusionConditionalUnet1d`, so its weights load as they
are; as there, every decoder stage ends in a transposed convolution.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn


class StepEmbedding(nn.Module):
    """Sinusoidal embedding of the diffusion step (half sines, half cosines)."""

    frequencies: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        half = dim // 2
        scale = math.log(10000) / (half - 1)
        self.register_buffer(
            "frequencies", torch.exp(torch.arange(half) * -scale), persistent=False
        )

    def forward(self, step: torch.Tensor) -> torch.Tensor:
        angles = step.unsqueeze(-1) * self.frequencies.unsqueeze(0)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)


class ConvBlock(nn.Module):
    """Conv1d, GroupNorm, Mish (as `block.0`, `block.1`, `block.2`)."""

    def __init__(self, inp: int, out: int, kernel_size: int, n_groups: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv1d(inp, out, kernel_size, padding=kernel_size // 2),
            nn.GroupNorm(n_groups, out),
            nn.Mish(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class ResidualBlock(nn.Module):
    """Two conv blocks with FiLM between them, and a residual (1x1 conv where widths differ)."""

    def __init__(
        self, inp: int, out: int, cond_dim: int, kernel_size: int, n_groups: int, film_scale: bool
    ) -> None:
        super().__init__()
        self.film_scale = film_scale
        self.out_channels = out
        self.conv1 = ConvBlock(inp, out, kernel_size, n_groups)
        self.cond_encoder = nn.Sequential(
            nn.Mish(), nn.Linear(cond_dim, out * (2 if film_scale else 1))
        )
        self.conv2 = ConvBlock(out, out, kernel_size, n_groups)
        self.residual_conv: nn.Module = nn.Conv1d(inp, out, 1) if inp != out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x)
        film = self.cond_encoder(cond).unsqueeze(-1)
        if self.film_scale:
            h = film[:, : self.out_channels] * h + film[:, self.out_channels :]
        else:
            h = h + film
        return self.conv2(h) + self.residual_conv(x)


class ConditionalUnet1d(nn.Module):
    """The U-Net (see the module doc)."""

    def __init__(
        self,
        action_dim: int,
        global_cond_dim: int,
        down_dims: tuple[int, ...],
        kernel_size: int,
        n_groups: int,
        step_embed_dim: int,
        film_scale: bool,
    ) -> None:
        super().__init__()
        self.diffusion_step_encoder = nn.Sequential(
            StepEmbedding(step_embed_dim),
            nn.Linear(step_embed_dim, step_embed_dim * 4),
            nn.Mish(),
            nn.Linear(step_embed_dim * 4, step_embed_dim),
        )
        cond = step_embed_dim + global_cond_dim

        def block(inp: int, out: int) -> ResidualBlock:
            return ResidualBlock(inp, out, cond, kernel_size, n_groups, film_scale)

        widths = [(action_dim, down_dims[0]), *zip(down_dims[:-1], down_dims[1:], strict=True)]
        self.down_modules = nn.ModuleList()
        for i, (inp, out) in enumerate(widths):
            last = i == len(widths) - 1
            down: nn.Module = nn.Identity() if last else nn.Conv1d(out, out, 3, 2, 1)
            self.down_modules.append(nn.ModuleList([block(inp, out), block(out, out), down]))
        self.mid_modules = nn.ModuleList(
            [block(down_dims[-1], down_dims[-1]), block(down_dims[-1], down_dims[-1])]
        )
        self.up_modules = nn.ModuleList()
        for out, inp in reversed(widths[1:]):
            # The input is the previous stage's output beside the encoder's: twice the width.
            up = nn.ConvTranspose1d(out, out, 4, 2, 1)
            self.up_modules.append(nn.ModuleList([block(inp * 2, out), block(out, out), up]))
        self.final_conv = nn.Sequential(
            # 8 groups whatever n_groups says: LeRobot builds this block with its default.
            ConvBlock(down_dims[0], down_dims[0], kernel_size, 8),
            nn.Conv1d(down_dims[0], action_dim, 1),
        )

    def forward(
        self, x: torch.Tensor, step: torch.Tensor, global_cond: torch.Tensor
    ) -> torch.Tensor:
        cond = torch.cat([self.diffusion_step_encoder(step), global_cond], dim=-1)
        h = x.transpose(1, 2)  # (B, action_dim, horizon): channels first for the convolutions
        skips = []
        for stage in self.down_modules:
            first, second, down = cast(nn.ModuleList, stage)
            h = second(first(h, cond), cond)
            skips.append(h)
            h = down(h)
        for middle in self.mid_modules:
            h = middle(h, cond)
        for stage in self.up_modules:
            first, second, up = cast(nn.ModuleList, stage)
            h = torch.cat((h, skips.pop()), dim=1)
            h = up(second(first(h, cond), cond))
        return self.final_conv(h).transpose(1, 2)
