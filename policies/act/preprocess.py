"""From raw inputs to what ACT's network reads, and from its output back to robot units.

All of it runs inside the model's `forward`, with its constants held as buffers, so compiling and
CUDA-graph capture cover it: no host tensors, no device moves, no data-dependent Python branches
(every branch below depends on the config only).

Formulas (LeRobot's, so imported checkpoints compute what they were trained with):

    mean_std:  x -> (x - mean) / (std + eps)         inverse: y -> y * std + mean
    min_max:   x -> 2 * (x - min) / range - 1        inverse: y -> (y + 1) / 2 * range + min
               where range = max - min, or eps where max == min
    identity:  x -> x
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from policies.act.config import NormMode

STAT_NAMES: dict[str, tuple[str, ...]] = {
    "identity": (),
    "mean_std": ("mean", "std"),
    "min_max": ("min", "max"),
}


class Normalizer(nn.Module):
    """Statistics of one input or output as buffers (saved in the checkpoint), and the map.

    The buffers' shape is the feature's own, e.g. (state_dim,), or (n_cameras, 3) for images;
    `view` reshapes them for broadcasting against a tensor whose last dimension is the feature.
    """

    # Present according to the mode: mean/std (mean_std), min/max (min_max), none (identity).
    mean: torch.Tensor
    std: torch.Tensor
    min: torch.Tensor
    max: torch.Tensor

    def __init__(self, mode: NormMode, shape: tuple[int, ...], eps: float) -> None:
        super().__init__()
        self.mode = mode
        self.eps = eps
        self.shape = shape
        if mode == "mean_std":
            self.register_buffer("mean", torch.zeros(shape))
            self.register_buffer("std", torch.ones(shape))
        elif mode == "min_max":
            self.register_buffer("min", -torch.ones(shape))
            self.register_buffer("max", torch.ones(shape))
        elif mode != "identity":
            raise ValueError(f"unknown normalization mode {mode!r}")

    def normalize(
        self,
        x: torch.Tensor,
        view: tuple[int, ...] | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`rows` (a long tensor) picks rows of the statistics first, e.g. some cameras'."""
        if self.mode == "mean_std":
            mean, std = self._stat("mean", view, rows), self._stat("std", view, rows)
            return (x - mean) / (std + self.eps)
        if self.mode == "min_max":
            low, high = self._stat("min", view, rows), self._stat("max", view, rows)
            return 2 * (x - low) / self._range(low, high) - 1
        return x

    def unnormalize(self, y: torch.Tensor) -> torch.Tensor:
        if self.mode == "mean_std":
            return y * self._stat("std", None) + self._stat("mean", None)
        if self.mode == "min_max":
            low, high = self._stat("min", None), self._stat("max", None)
            return (y + 1) / 2 * self._range(low, high) + low
        return y

    def input_bounds(self, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high): the raw values whose normalized value lies within +-limit (the inverse
        of `normalize` at -limit and +limit), float64 on the CPU (host-side checks use them,
        wherever the module lives), of the feature's shape."""
        edges = torch.full((2, *self.shape), limit, dtype=torch.float64)
        edges[0] = -limit
        if self.mode == "mean_std":
            mean, std = self.mean.double().cpu(), self.std.double().cpu()
            raw = edges * (std + self.eps) + mean
        elif self.mode == "min_max":
            low, high = self.min.double().cpu(), self.max.double().cpu()
            raw = (edges + 1) / 2 * self._range(low, high) + low
        else:
            raw = edges
        return raw.min(dim=0).values, raw.max(dim=0).values

    def _stat(
        self, name: str, view: tuple[int, ...] | None, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        stat: torch.Tensor = getattr(self, name)
        if rows is not None:
            stat = stat.index_select(0, rows)
        return stat if view is None else stat.view(view)

    def _range(self, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
        span = high - low
        return torch.where(span == 0, self.eps, span)

    def extra_repr(self) -> str:
        return f"mode={self.mode}, shape={self.shape}, eps={self.eps}"


def prepare_images(
    images: torch.Tensor,
    pixel_scale: torch.Tensor,
    norm: Normalizer,
    resize: tuple[int, int] | None,
    antialias: bool,
    cameras: torch.Tensor | None = None,
) -> torch.Tensor:
    """uint8 (B, n_cam, H, W, 3) -> normalized float (B * n_cam, 3, h, w), channels-last in memory.

    Pixels are divided by 255 (`pixel_scale`, a buffer, so the result takes the module's dtype),
    normalized per camera and channel while still in HWC layout, then viewed as NCHW: the
    permute moves no data, so the result is a channels-last tensor. `cameras` (long indices)
    says whose statistics apply when these are some of the model's cameras (one frame group);
    None: all of them, in order.
    """
    batch, n_cam, height, width, _ = images.shape
    pixels = images / pixel_scale
    pixels = norm.normalize(pixels, view=(n_cam, 1, 1, 3), rows=cameras)
    pixels = pixels.reshape(batch * n_cam, height, width, 3).permute(0, 3, 1, 2)
    if resize is not None:
        pixels = F.interpolate(
            pixels, size=resize, mode="bilinear", align_corners=False, antialias=antialias
        )
    return pixels


def prepare_state(
    state: torch.Tensor,
    state_norm: Normalizer,
    env_norm: Normalizer,
    mask: torch.Tensor | None,
    state_dim: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """float (B, K, state_dim + env_dim) -> normalized robot state (B, K * state_dim) (all K
    steps, oldest first) and environment state (B, env_dim) (newest step only).

    Entries hidden by the mask are zeroed after normalization, so the model sees the value a
    normalized input takes at its mean (mean_std) or mid-range (min_max).
    """
    robot = state_norm.normalize(state[..., :state_dim])
    env = env_norm.normalize(state[:, -1, state_dim:])
    if mask is not None:
        robot = robot * mask[:state_dim]
        env = env * mask[state_dim:]
    return robot.flatten(1), env
