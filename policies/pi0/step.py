"""pi0's and pi0.5's whole served step as one module: robot frames and state in, robot actions
out, so that compiling and CUDA-graph capture cover all of it (policies.tensor_policy).

    forward(*frames, state, noise, prompt, prompt_mask) -> actions
        frames:      uint8 (B, n, H, W, 3) per camera shape (policies.inputs.frame_groups)
        state:       float32 (B, state_history, state_size), robot units, newest last
        noise:       float32 (B, chunk_size, max_action_dim), the chunk's starting point
        prompt:      float32 (B, tokenizer_max_length, language width): embedded token ids
        prompt_mask: float32 (B, tokenizer_max_length), 1 for a real token
        actions:     float32 (B, chunk_size, action_size), robot units

Inside, as LeRobot's PI0Policy and openpi prepare an observation: each frame to [0, 1], resized
to the model's resolution without distortion and padded (centred, black), to [-1, 1]; the
checkpoint's empty camera slots as all -1 images the model is told to ignore; the state
normalized and zero-padded to max_state_dim; the network's chunk cut to the robot's actions and
unnormalized. The codec (policies.pi0.codec) makes the noise and the prompt's embeddings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F  # noqa: N812
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from policies.model_hooks import ServedModule
from policies.pi0.config import Pi0Config
from policies.pi0.gemma import GemmaAttention, GemmaMLP
from policies.pi0.joint_attention import joint_layer
from policies.pi0.pi05_config import Pi05Config
from policies.pi0.siglip import SiglipAttention, run_encoder_layer

NormMode = Literal["IDENTITY", "MEAN_STD", "MIN_MAX", "QUANTILES"]


class Pi0StepConfig(BaseModel):
    """What the served step needs besides the network: the robot's sizes, its cameras' frame
    sizes (spec order) and the normalization modes (their statistics are buffers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    network: Pi0Config | Pi05Config
    state_size: int = Field(ge=1, le=1024)
    action_size: int = Field(ge=1, le=1024)
    camera_sizes: tuple[tuple[int, int], ...] = Field(min_length=1, max_length=16)
    state_norm: NormMode = "MEAN_STD"
    action_norm: NormMode = "MEAN_STD"


class AffineNorm(nn.Module):
    """normalized = (x - center) / scale, per entry: every LeRobot and openpi mode is one of
    these (MEAN_STD: center mean, scale std + eps; MIN_MAX and QUANTILES: the middle of the
    range and half of it), so the step holds two vectors whatever the mode."""

    center: Tensor
    scale: Tensor

    def __init__(self, size: int) -> None:
        super().__init__()
        self.register_buffer("center", torch.zeros(size))
        self.register_buffer("scale", torch.ones(size))

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.center) / self.scale

    def unnormalize(self, x: Tensor) -> Tensor:
        return x * self.scale + self.center


def resize_with_pad(images: Tensor, height: int, width: int) -> Tensor:
    """(N, 3, h, w) in [0, 1] -> (N, 3, height, width): scaled to fit, bilinear, centred on
    black, as openpi's resize_with_pad_torch (a frame of the model's size is left as it is)."""
    current_h, current_w = images.shape[-2:]
    if (current_h, current_w) == (height, width):
        return images
    ratio = max(current_w / width, current_h / height)
    new_h, new_w = int(current_h / ratio), int(current_w / ratio)
    resized = F.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False)
    resized = resized.clamp(0.0, 1.0)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    return F.pad(resized, (left, width - new_w - left, top, height - new_h - top), value=0.0)


class Pi0Step(ServedModule):
    """The served pi0 / pi0.5 step (see the module doc)."""

    # Its matmuls are nn.Linear and nn.Conv2d under the runner's autocast: the half tiers may
    # hold their weights in the half type (cast once, not on every step).
    precast_half_weights = True
    # policy.rtc is served by the pi0 family (policies.pi0.rtc), not the flow family's hook.
    serves_rtc_itself: ClassVar[bool] = True

    def __init__(self, config: Pi0StepConfig) -> None:
        super().__init__()
        self.config = config
        network_config = config.network
        if isinstance(network_config, Pi05Config):
            from policies.pi0.pi05_network import Pi05Network

            self.network: Any = Pi05Network(network_config)  # sample_actions differs by family
        else:
            from policies.pi0.network import Pi0Network

            self.network = Pi0Network(network_config)
        self.state_norm = AffineNorm(config.state_size)
        self.action_norm = AffineNorm(config.action_size)
        self.uses_state = not isinstance(network_config, Pi05Config)  # pi0.5: in the prompt
        # Frame groups (one tensor per distinct camera size) back to camera order.
        order: list[tuple[int, int]] = []
        for size in config.camera_sizes:
            if size not in order:
                order.append(size)
        self.group_sizes = tuple(order)
        grouped = [i for size in order for i, s in enumerate(config.camera_sizes) if s == size]
        self.camera_order = tuple(grouped.index(i) for i in range(len(config.camera_sizes)))

    def compile_regions(self, compile_fn: Callable[[Callable[..., Any]], Any]) -> bool:
        """One compiled joint layer (prefix, expert and joint passes) and one compiled vision
        layer, over side-by-side projections fused (q/k/v, gate/up): on an H100 the graph tier
        built in 17.7 s where compiling the whole step took 277 s, and stepped faster."""
        for module in self.modules():
            if isinstance(module, GemmaAttention | GemmaMLP | SiglipAttention):
                module.fuse_projections()
        tower = self.network.paligemma_with_expert
        tower.layer_call = compile_fn(joint_layer)
        encoder = tower.paligemma.model.vision_tower.vision_model.encoder
        encoder.layer_call = compile_fn(run_encoder_layer)
        return True

    def state_bounds(self, limit: float) -> tuple[Tensor, Tensor]:
        """Raw state values whose normalized value stays within +-limit (tensor_policy)."""
        norm = self.state_norm
        return norm.center - limit * norm.scale.abs(), norm.center + limit * norm.scale.abs()

    def images(self, frames: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """uint8 frame groups -> (images (B, cameras + empty, 3, S, S) in [-1, 1], masks)."""
        size = self.config.network.vision.image_size
        prepared = []
        for group in frames:
            batch, count = group.shape[:2]
            pixels = group.flatten(0, 1).permute(0, 3, 1, 2).float() / 255.0
            pixels = resize_with_pad(pixels, size, size) * 2.0 - 1.0
            prepared.append(pixels.reshape(batch, count, 3, size, size))
        joined = torch.cat(prepared, dim=1)
        # Slices, not an index list: a list index is a host-to-device copy on every eager step,
        # which CUDA-graph capture of the eager step refuses.
        images = torch.cat([joined[:, i : i + 1] for i in self.camera_order], dim=1)
        batch, cameras = images.shape[:2]
        masks = torch.ones(batch, cameras, dtype=torch.bool, device=images.device)
        empty = self.config.network.empty_cameras
        if empty:
            blank = torch.full((batch, empty, 3, size, size), -1.0, device=images.device)
            images = torch.cat([images, blank], dim=1)
            masks = torch.cat([masks, masks.new_zeros(batch, empty)], dim=1)
        return images, masks

    def forward(self, *inputs: Tensor) -> Tensor:
        groups = len(self.group_sizes)
        frames, (state, noise, prompt, prompt_mask) = inputs[:groups], inputs[groups:]
        network = self.network
        images, image_masks, token_mask, network_state = self.prepare(frames, state, prompt_mask)
        if self.uses_state:
            actions = network.sample_actions(
                images, image_masks, prompt, token_mask, network_state, noise
            )
        else:
            actions = network.sample_actions(images, image_masks, prompt, token_mask, noise)
        return self.finish(actions)

    def prepare(
        self, frames: tuple[Tensor, ...], state: Tensor, prompt_mask: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The step's inputs as the network reads them: (images, image masks, the prompt's
        token mask, pi0's normalized state padded to max_state_dim or None for pi0.5)."""
        images, image_masks = self.images(tuple(frames))
        token_mask = prompt_mask > 0.5
        if not self.uses_state:
            return images, image_masks, token_mask, None
        normalized = self.state_norm.normalize(state[:, -1])
        missing = self.config.network.max_state_dim - normalized.shape[-1]
        return images, image_masks, token_mask, F.pad(normalized, (0, missing))

    def finish(self, actions: Tensor) -> Tensor:
        """The network's chunk (B, chunk_size, max_action_dim), normalized -> robot units."""
        return self.action_norm.unnormalize(actions[..., : self.config.action_size].float())
