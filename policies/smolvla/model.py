"""SmolVLA (Shukor et al., "SmolVLA: A Vision-Language-Action Model for Affordable and
Efficient Robotics", 2025), as served by Tempo: the whole step in one module, robot frames and
state in, robot actions out, so that compiling and CUDA-graph capture cover all of it.

Read top to bottom, `forward` is the paper's inference path:

1. Every camera frame to [0, 1], resized to the model's square without distortion and padded
   on the left and top with black (LeRobot's SmolVLA convention), to [-1, 1]; through SmolVLM2's
   vision encoder and connector (policies.smolvla.vision) into 64 tokens of the language width
   at the real size, scaled by sqrt(width).
2. The prefix: every camera's tokens, the prompt's (embedded on the host, policies.smolvla.codec),
   then one state token (the state normalized, zero-padded to max_state_dim, projected).
3. The prefix goes once through the language model cut to its first N layers; each layer's keys
   and values are kept for the action expert (policies.smolvla.expert.PrefixCache).
4. Flow matching: chunk_size action tokens start as the given noise (t = 1) and take num_steps
   Euler steps to t = 0, dt = -1/num_steps; each step embeds the noisy actions with the time
   (sine-cosine, fused by an MLP), runs the action expert against the cache, and projects its
   output to a velocity.
5. The chunk's first action_size entries are unnormalized into robot units.

Contract (policies/inputs.py, codec policies.smolvla.codec):
    forward(*frames, state, noise, prompt, prompt_mask) -> actions
        frames:      uint8 (B, n, H, W, 3) per camera shape (policies.inputs.frame_groups)
        state:       float32 (B, 1, state_size), robot units
        noise:       float32 (B, chunk_size, max_action_dim)
        prompt:      float32 (B, tokenizer_max_length, text width): embedded token ids
        prompt_mask: float32 (B, tokenizer_max_length), 1 for a real token
        actions:     float32 (B, chunk_size, action_size), robot units

Names match LeRobot's VLAFlowMatching with `model.vlm_with_expert.vlm.model.` shortened
(policies.smolvla.lerobot renames). LeRobot's empty camera slots are all -1 images whose tokens
are masked as keys and take no position: they change nothing, so they are left out here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.model_hooks import ServedModule
from policies.pi0.network import sincos_time_embedding
from policies.pi0.step import AffineNorm
from policies.smolvla.config import SmolVLAConfig
from policies.smolvla.expert import PrefixCache, VlmWithExpert
from policies.smolvla.vision import Connector, VisionModel


def resize_with_pad_top_left(images: Tensor, height: int, width: int) -> Tensor:
    """(N, 3, h, w) -> (N, 3, height, width): scaled to fit (bilinear), padded with 0 on the
    left and top, as LeRobot's SmolVLA resize_with_pad (a frame of the right size is kept)."""
    current_h, current_w = images.shape[-2:]
    if (current_h, current_w) == (height, width):
        return images
    ratio = max(current_w / width, current_h / height)
    new_h, new_w = int(current_h / ratio), int(current_w / ratio)
    resized = F.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False)
    return F.pad(resized, (max(0, width - new_w), 0, max(0, height - new_h), 0), value=0.0)


class SmolVLAPolicy(ServedModule):
    """The served SmolVLA step (see the module doc)."""

    precast_half_weights: ClassVar[bool] = True
    image_scale: Tensor
    # policy.rtc and policy.prompt are served by the smolvla family (policies.smolvla.serving).
    serves_rtc_itself: ClassVar[bool] = True
    serves_prompt_settings_itself: ClassVar[bool] = True

    def __init__(self, config: SmolVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.vision = VisionModel(config.vision, config.image_side, config.layer_norm_eps)
        self.connector = Connector(config.vision.width, config.text.width, config.scale_factor)
        self.vlm_with_expert = VlmWithExpert(config)
        text_width, expert_width = config.text.width, config.expert_width
        self.state_proj = nn.Linear(config.max_state_dim, text_width)
        self.action_in_proj = nn.Linear(config.max_action_dim, expert_width)
        self.action_out_proj = nn.Linear(expert_width, config.max_action_dim)
        self.action_time_mlp_in = nn.Linear(2 * expert_width, expert_width)
        self.action_time_mlp_out = nn.Linear(expert_width, expert_width)
        # sqrt(width), a buffer: a tensor made in forward would be a host-to-device copy, which
        # CUDA-graph capture refuses.
        self.register_buffer("image_scale", torch.tensor(text_width**0.5), persistent=False)
        self.state_norm = AffineNorm(config.state_size)
        self.action_norm = AffineNorm(config.action_size)
        # Frame groups (one tensor per distinct camera size) back to camera order.
        order: list[tuple[int, int]] = []
        for size in config.camera_sizes:
            if size not in order:
                order.append(size)
        grouped = [i for size in order for i, s in enumerate(config.camera_sizes) if s == size]
        self.group_count = len(order)
        self.camera_order = tuple(grouped.index(i) for i in range(len(config.camera_sizes)))

    def compile_regions(self, compile_fn: Callable[[Callable[..., Any]], Any]) -> bool:
        return False  # the whole step: ten expert steps over a small model compile in one piece

    def state_bounds(self, limit: float) -> tuple[Tensor, Tensor]:
        """Raw state values whose normalized value stays within +-limit (tensor_policy)."""
        norm = self.state_norm
        return norm.center - limit * norm.scale.abs(), norm.center + limit * norm.scale.abs()

    # ---- 1. images -------------------------------------------------------------------------
    def image_tokens(self, frames: tuple[Tensor, ...]) -> Tensor:
        """uint8 frame groups -> (B, cameras * image_tokens, text width), cameras in order."""
        side = self.config.image_side
        width = self.config.resize_imgs_with_padding[0]
        per_group = []
        for group in frames:
            batch, count = group.shape[:2]
            pixels = group.flatten(0, 1).permute(0, 3, 1, 2).float() / 255.0
            pixels = resize_with_pad_top_left(pixels, side, width) * 2.0 - 1.0
            tokens = self.connector(self.vision(pixels.to(self.state_proj.weight.dtype)))
            per_group.append(tokens.unflatten(0, (batch, count)))
        joined = torch.cat(per_group, dim=1)
        # Slices, not an index list: a list index is a host-to-device copy on every step.
        cameras = torch.cat([joined[:, i : i + 1] for i in self.camera_order], dim=1)
        return (cameras * self.image_scale.to(cameras.dtype)).flatten(1, 2)

    # ---- 2. and 3. the prefix, once --------------------------------------------------------
    def encode_prefix(
        self, frames: tuple[Tensor, ...], state: Tensor, prompt: Tensor, prompt_mask: Tensor
    ) -> PrefixCache:
        images = self.image_tokens(frames)
        normalized = self.state_norm.normalize(state[:, -1])
        padded = F.pad(normalized, (0, self.config.max_state_dim - normalized.shape[-1]))
        state_token = self.state_proj(padded.to(self.state_proj.weight.dtype))[:, None]
        dtype = images.dtype
        embeddings = torch.cat([images, prompt.to(dtype), state_token.to(dtype)], dim=1)
        batch = images.shape[0]
        valid = torch.ones(batch, images.shape[1], dtype=torch.bool, device=images.device)
        pad = torch.cat([valid, prompt_mask > 0.5, valid[:, :1]], dim=1)
        return self.vlm_with_expert.encode_prefix(embeddings, pad)

    # ---- 4. the flow --------------------------------------------------------------------------
    def embed_actions(self, x_t: Tensor, time: Tensor) -> Tensor:
        """Noisy actions (B, S, max_action_dim) at time (B,) -> action tokens (B, S, W)."""
        config = self.config
        actions = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype))
        time_emb = sincos_time_embedding(
            time, config.expert_width, config.min_period, config.max_period
        )
        time_emb = time_emb[:, None, :].expand_as(actions).to(actions.dtype)
        fused = self.action_time_mlp_in(torch.cat([actions, time_emb], dim=2))
        return self.action_time_mlp_out(F.silu(fused))

    def velocity(self, cache: PrefixCache, x_t: Tensor, time: Tensor) -> Tensor:
        """The flow's velocity (B, chunk_size, max_action_dim) at x_t, time (B,) (1: noise)."""
        hidden = self.vlm_with_expert.run_expert(cache, self.embed_actions(x_t, time))
        return self.action_out_proj(hidden[:, -self.config.chunk_size :]).float()

    def denoise(self, cache: PrefixCache, noise: Tensor) -> Tensor:
        """All Euler steps from noise (t=1) to normalized actions (t=0)."""
        steps = self.config.num_steps
        dt = -1.0 / steps
        x_t = noise
        for step in range(steps):
            time = torch.full(
                (noise.shape[0],), 1.0 + step * dt, dtype=torch.float32, device=noise.device
            )
            x_t = x_t + dt * self.velocity(cache, x_t, time)
        return x_t

    # ---- 5. robot units -----------------------------------------------------------------------
    def finish(self, actions: Tensor) -> Tensor:
        return self.action_norm.unnormalize(actions[..., : self.config.action_size].float())

    def forward(self, *inputs: Tensor) -> Tensor:
        frames, (state, noise, prompt, prompt_mask) = (
            inputs[: self.group_count],
            inputs[self.group_count :],
        )
        cache = self.encode_prefix(tuple(frames), state, prompt, prompt_mask)
        return self.finish(self.denoise(cache, noise))
