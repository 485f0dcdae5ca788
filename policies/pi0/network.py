"""The pi0 network: prefix (images + prompt) encoded once into per-layer keys and values, then
`num_inference_steps` Euler steps of the action expert from noise (t=1) to actions (t=0), with
dt = -1/steps, as LeRobot's PI0Pytorch.sample_actions / denoise_step do.

Inputs (B robots): images (B, cameras, 3, H, W) in [-1, 1], image_masks (B, cameras) bool,
prompt_embeddings (B, tokenizer_max_length, language width) from PromptEmbedder (already scaled
by sqrt(width)), prompt_mask (B, L) bool, state (B, max_state_dim), noise (B, chunk_size,
max_action_dim). The step has no data-dependent Python control flow and fixed shapes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from policies.pi0.backbone import PaliGemmaWithExpert, PrefixCache
from policies.pi0.config import PaliGemmaFlowConfig, Pi0Config
from policies.pi0.gemma import RotaryEmbedding
from policies.pi0.weights import apply_precision, load_weights


def sincos_time_embedding(time: Tensor, dim: int, min_period: float, max_period: float) -> Tensor:
    """time (B,) -> (B, dim) [sin | cos], periods geometric from min to max, computed in
    float64 and returned in time's dtype (as LeRobot's create_sinusoidal_pos_embedding). A time
    per token, (B, S), gives (B, S, dim) (pi0.5's trained RTC)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=time.device)
    period = min_period * (max_period / min_period) ** fraction
    angles = time[..., None] * (1.0 / period * 2 * math.pi)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).to(time.dtype)


class PaliGemmaFlowNetwork(nn.Module):
    """What pi0 and pi0.5 share; subclasses embed the suffix (embed_suffix)."""

    suffix_blocks: Tensor

    def __init__(self, config: PaliGemmaFlowConfig) -> None:
        super().__init__()
        self.config = config
        self.paligemma_with_expert = PaliGemmaWithExpert(config)
        width = config.expert.width
        self.action_in_proj = nn.Linear(config.max_action_dim, width)
        self.action_out_proj = nn.Linear(width, config.max_action_dim)
        # Block starts of the suffix: [state token,] then the action tokens as one block.
        self.register_buffer("suffix_blocks", self._suffix_blocks(), persistent=False)
        if config.dtype == "bfloat16":
            apply_precision(self, "bfloat16")

    def _suffix_blocks(self, device: torch.device | str | None = None) -> Tensor:
        config = self.config
        starts = [1] * (1 if config.state_token else 0) + [1] + [0] * (config.chunk_size - 1)
        return torch.tensor(starts, device=device)

    def reset_buffers(self) -> None:
        """Recompute the buffers no checkpoint holds (the suffix's blocks, the rotary
        frequencies, in the network's precision): for a network built on the meta device and
        materialized with `to_empty`, whose weights then all come from the checkpoint."""
        device = self.action_in_proj.weight.device
        self.suffix_blocks = self._suffix_blocks(device)
        rotary_dtype = torch.bfloat16 if self.config.dtype == "bfloat16" else torch.float32
        for module in self.modules():
            if isinstance(module, RotaryEmbedding):
                module.inv_freq = module.frequencies(device).to(rotary_dtype)

    def embed_prefix(
        self, images: Tensor, image_masks: Tensor, prompt_embeddings: Tensor, prompt_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Image tokens of every camera, then the prompt -> (embeddings (B, P, W), pad (B, P))."""
        batch, cameras = images.shape[:2]
        size = self.config.vision.image_size
        if tuple(images.shape[2:]) != (3, size, size):
            raise ValueError(
                f"images have shape {tuple(images.shape)}, expected (robots, cameras, 3, {size}, "
                f"{size})"
            )
        if image_masks.shape != (batch, cameras):
            raise ValueError(
                f"image_masks has shape {tuple(image_masks.shape)}, expected {(batch, cameras)}"
            )
        if prompt_embeddings.shape[:2] != prompt_mask.shape:
            raise ValueError(
                f"prompt_mask has shape {tuple(prompt_mask.shape)}, expected "
                f"{tuple(prompt_embeddings.shape[:2])}"
            )
        features = self.paligemma_with_expert.embed_images(images.flatten(0, 1))
        tokens = features.shape[1]
        features = features.reshape(batch, cameras * tokens, features.shape[-1])
        image_pad = image_masks.bool()[:, :, None].expand(batch, cameras, tokens)
        dtype = torch.promote_types(features.dtype, prompt_embeddings.dtype)
        embeddings = torch.cat([features.to(dtype), prompt_embeddings.to(dtype)], dim=1)
        pad = torch.cat([image_pad.reshape(batch, cameras * tokens), prompt_mask.bool()], dim=1)
        return embeddings, pad

    def encode_prefix(self, embeddings: Tensor, pad: Tensor) -> PrefixCache:
        """The language model over the prefix, once: every layer's keys and values, and the
        suffix's rotary and mask that every denoising step shares."""
        tower = self.paligemma_with_expert
        cache = tower.encode_prefix(embeddings, pad)
        return cache._replace(suffix=tower.suffix_attention(cache.pad, self.suffix_blocks))

    def embed_suffix(
        self, x_t: Tensor, time: Tensor, state: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """-> (suffix tokens (B, suffix_length, W), adaRMS conditioning or None)."""
        raise NotImplementedError

    def _actions_out(self, hidden: Tensor) -> Tensor:
        out = hidden[:, -self.config.chunk_size :].to(torch.float32)
        return self.action_out_proj(out.to(self.action_out_proj.weight.dtype)).float()

    def expert_velocity(
        self, cache: PrefixCache, x_t: Tensor, time: Tensor, state: Tensor | None
    ) -> Tensor:
        """The action expert's velocity at x_t against the cached prefix, in pi0's time (1:
        noise, 0: actions; (B,), or (B, chunk_size) per token for pi0.5); `state` pi0's padded
        normalized state, None for pi0.5. What both networks' `velocity` call."""
        return self._velocity(cache, x_t, time, state)

    def _velocity(
        self, cache: PrefixCache, x_t: Tensor, time: Tensor, state: Tensor | None
    ) -> Tensor:
        suffix, cond = self.embed_suffix(x_t, time, state)
        hidden = self.paligemma_with_expert.run_suffix(cache, suffix, self.suffix_blocks, cond)
        return self._actions_out(hidden)

    def _velocity_without_cache(
        self,
        prefix: Tensor,
        prefix_pad: Tensor,
        x_t: Tensor,
        time: Tensor,
        state: Tensor | None,
    ) -> Tensor:
        suffix, cond = self.embed_suffix(x_t, time, state)
        tower = self.paligemma_with_expert
        return self._actions_out(
            tower.run_joint(prefix, prefix_pad, suffix, self.suffix_blocks, cond)
        )

    def _denoise(self, cache: PrefixCache, noise: Tensor, state: Tensor | None) -> Tensor:
        steps = self.config.num_inference_steps
        dt = -1.0 / steps
        x_t = noise
        for step in range(steps):
            time = torch.full(
                (noise.shape[0],), 1.0 + step * dt, dtype=torch.float32, device=noise.device
            )
            x_t = x_t + dt * self._velocity(cache, x_t, time, state)
        return x_t

    def load_weights(self, tensors: Mapping[str, Tensor]) -> None:
        """Copy LeRobot-named tensors in (cast to each parameter's dtype and device); the
        vocabulary tables are kept as given, on the host. ValueError naming missing,
        unexpected and misshapen keys."""
        load_weights(self, tensors)


class Pi0Network(PaliGemmaFlowNetwork):
    """pi0: a state token, then action tokens carrying the time through an MLP."""

    def __init__(self, config: Pi0Config) -> None:
        super().__init__(config)
        width = config.expert.width
        self.state_proj = nn.Linear(config.max_state_dim, width)
        self.action_time_mlp_in = nn.Linear(2 * width, width)
        self.action_time_mlp_out = nn.Linear(width, width)

    def embed_suffix(
        self, x_t: Tensor, time: Tensor, state: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        if state is None:
            raise ValueError("pi0 needs the robot state for its state token")
        state_token = self.state_proj(state.to(self.state_proj.weight.dtype))[:, None]
        time_emb = sincos_time_embedding(
            time, self.action_in_proj.out_features, self.config.min_period, self.config.max_period
        )
        actions = self.action_in_proj(x_t.to(self.action_in_proj.weight.dtype))
        time_emb = time_emb[:, None, :].expand_as(actions).to(actions.dtype)
        fused = self.action_time_mlp_in(torch.cat([actions, time_emb], dim=2))
        fused = self.action_time_mlp_out(F.silu(fused))
        return torch.cat([state_token.to(fused.dtype), fused], dim=1), None

    def velocity(self, cache: PrefixCache, state: Tensor, x_t: Tensor, time: Tensor) -> Tensor:
        """One denoising step: the flow's velocity (B, chunk_size, max_action_dim) at x_t."""
        return self._velocity(cache, x_t, time, state)

    def velocity_without_cache(
        self, prefix: Tensor, prefix_pad: Tensor, state: Tensor, x_t: Tensor, time: Tensor
    ) -> Tensor:
        """velocity recomputing the prefix jointly with the suffix (LeRobot's training pass)."""
        return self._velocity_without_cache(prefix, prefix_pad, x_t, time, state)

    def denoise(self, cache: PrefixCache, state: Tensor, noise: Tensor) -> Tensor:
        """All Euler steps from noise (t=1) to actions (t=0) against the cached prefix."""
        return self._denoise(cache, noise, state)

    def sample_actions(
        self,
        images: Tensor,
        image_masks: Tensor,
        prompt_embeddings: Tensor,
        prompt_mask: Tensor,
        state: Tensor,
        noise: Tensor,
    ) -> Tensor:
        """Actions (B, chunk_size, max_action_dim), float32."""
        cache = self.encode_prefix(
            *self.embed_prefix(images, image_masks, prompt_embeddings, prompt_mask)
        )
        return self._denoise(cache, noise, state)
