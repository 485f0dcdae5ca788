"""A flow-matching action-chunk policy, shaped like the action expert of pi0-class models.

Read top to bottom, `forward` is the inference path:

1. Context, once per inference. Every camera frame goes through a ResNet; its layer4 feature map,
   projected to `dim_model` by a 1x1 convolution, gives one token per cell (fixed 2D sinusoidal
   position embedding plus a learned embedding per camera). The normalized state history becomes
   one more token. A transformer mixes them, and every action-expert layer projects the result
   into its cross-attention keys and values.
2. Sampling. The chunk starts as Gaussian noise A^0 (an input, so that the module is a pure
   function and every tier of the runner can be checked against the reference) and follows the
   learned velocity field from t = 0 to t = 1 in `n_steps` Euler steps:
       A^{t + 1/n} = A^t + v(A^t, o, t) / n
   Flow matching trains v on straight paths A^t = t A + (1 - t) noise, so v = A - noise.
3. The action expert computes v: each of the H noisy actions becomes a token (its projection,
   mixed with the embedding of t by an MLP, as pi0 does, plus a learned position), the tokens
   attend to each other and to the context, and a linear head gives one velocity per action.
4. The sampled chunk is in the normalized action space; it is unnormalized into robot units.

Contract: forward(images uint8 (B, n_cam, H, W, 3), state float32 (B, state_history, state_size),
noise float32 (B, chunk_size, action_dim)) -> actions float32 (B, chunk_size, action_dim), robot
units. Real-time chunking wraps this module (`policies.flow.rtc`) and reuses its parts.
"""

from __future__ import annotations

from typing import ClassVar, cast

import einops
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from policies.act.backbone import ResNet, backbone_channels, feature_map_size
from policies.act.preprocess import Normalizer, prepare_images
from policies.act.transformer import sinusoidal_position_embedding_2d
from policies.flow.config import FlowConfig
from policies.flow.layers import ContextLayer, ExpertLayer, sinusoidal_time_embedding
from policies.model_hooks import ServedModule

# Per expert layer, the context's cross-attention keys and values (B, heads, tokens, head_dim).
Context = list[tuple[torch.Tensor, torch.Tensor]]


class FlowMatchingPolicy(ServedModule):
    policy_type = "flow"
    # Its linear and convolution weights are used by those layers alone: the runner's
    # half-precision tiers may hold them in half precision (no cast kernels per step).
    precast_half_weights: ClassVar[bool] = True

    pixel_scale: torch.Tensor
    image_pos_embed: torch.Tensor
    step_time_embed: torch.Tensor
    step_times: torch.Tensor

    def __init__(self, config: FlowConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.dim_model
        eps = config.norm_eps

        # Raw inputs -> network inputs; network output -> robot units. (Stats: checkpoint buffers.)
        self.image_norm = Normalizer(config.image_norm, (config.n_cameras, 3), eps)
        self.state_norm = Normalizer(config.state_norm, (config.state_dim,), eps)
        self.action_norm = Normalizer(config.action_norm, (config.action_dim,), eps)
        self.register_buffer("pixel_scale", torch.tensor(255.0), persistent=False)

        # 1. Context: image tokens, the state token, a transformer over them.
        self.backbone = ResNet(config.vision_backbone)
        self.image_proj = nn.Conv2d(backbone_channels(config.vision_backbone), dim, kernel_size=1)
        rows, cols = feature_map_size(config.image_height, config.image_width)
        cell_pos = sinusoidal_position_embedding_2d(rows, cols, dim)
        self.register_buffer(
            "image_pos_embed", cell_pos.repeat(config.n_cameras, 1), persistent=False
        )
        self.camera_embed = nn.Parameter(torch.zeros(config.n_cameras, dim))
        self.cells_per_camera = rows * cols
        self.state_proj = nn.Linear(config.state_history * config.state_dim, dim)
        self.context_layers = nn.ModuleList(
            ContextLayer(dim, config.n_heads, config.dim_feedforward)
            for _ in range(config.n_context_layers)
        )
        self.context_norm = nn.LayerNorm(dim)

        # 3. Action expert: action tokens with time conditioning, layers, velocity head.
        self.action_in = nn.Linear(config.action_dim, dim)
        self.action_time_in = nn.Linear(2 * dim, dim)
        self.action_time_out = nn.Linear(dim, dim)
        self.action_pos_embed = nn.Parameter(torch.zeros(config.chunk_size, dim))
        self.expert_layers = nn.ModuleList(
            ExpertLayer(dim, config.n_heads, config.dim_feedforward)
            for _ in range(config.n_expert_layers)
        )
        self.expert_norm = nn.LayerNorm(dim)
        self.velocity_head = nn.Linear(dim, config.action_dim)

        # The Euler steps' times are fixed by the config, so their embeddings are constants.
        self.times = [k / config.n_steps for k in range(config.n_steps)]
        self.register_buffer("step_times", torch.tensor(self.times), persistent=False)
        self.register_buffer(
            "step_time_embed",
            sinusoidal_time_embedding(torch.tensor(self.times, dtype=torch.float64), dim),
            persistent=False,
        )
        self.pixel_format = torch.contiguous_format
        nn.init.normal_(self.action_pos_embed, std=0.02)
        nn.init.normal_(self.camera_embed, std=0.02)

    # ---- the inference path -------------------------------------------------------------------

    def forward(
        self, images: torch.Tensor, state: torch.Tensor, noise: torch.Tensor
    ) -> torch.Tensor:
        context = self.encode(images, state)
        actions = noise
        for step in range(self.config.n_steps):
            actions = actions + self.velocity(actions, step, context) / self.config.n_steps
        return self.action_norm.unnormalize(actions)

    def encode(self, images: torch.Tensor, state: torch.Tensor) -> Context:
        """1. Raw frames and state -> every expert layer's cross-attention keys and values."""
        batch = images.shape[0]
        pixels = prepare_images(images, self.pixel_scale, self.image_norm, None, False)
        features = self.image_proj(
            self.backbone(pixels.contiguous(memory_format=self.pixel_format))
        )
        cells = einops.rearrange(features, "(b n) d h w -> b (n h w) d", b=batch)
        camera = self.camera_embed.repeat_interleave(self.cells_per_camera, dim=0)
        cells = cells + self.image_pos_embed + camera
        robot_state = self.state_norm.normalize(state).flatten(1)
        tokens = torch.cat([self.state_proj(robot_state).unsqueeze(1), cells], dim=1)
        for layer in self.context_layers:
            tokens = layer(tokens)
        memory = self.context_norm(tokens)
        return [layer.cross_attn.project_memory(memory) for layer in self.experts()]

    def velocity(
        self, actions: torch.Tensor, step: int | torch.Tensor, context: Context
    ) -> torch.Tensor:
        """3. The action expert: v(A^t, o, t) for Euler step `step` (t = step / n_steps), in the
        normalized action space, (B, chunk_size, action_dim). `step` may be a (B,) tensor of
        steps, one per sample (training)."""
        batch, dim = actions.shape[0], self.config.dim_model
        time = self.step_time_embed[step].reshape(-1, 1, dim)
        time = time.expand(batch, self.config.chunk_size, dim)
        x = torch.cat([self.action_in(actions), time], dim=-1)
        x = self.action_time_out(F.silu(self.action_time_in(x))) + self.action_pos_embed
        for layer, (keys, values) in zip(self.experts(), context, strict=True):
            x = layer(x, keys, values)
        return self.velocity_head(self.expert_norm(x))

    def state_bounds(self, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) per state entry: the raw values whose normalization stays within +-limit
        (see policies.tensor_policy.with_state_bounds)."""
        return self.state_norm.input_bounds(limit)

    def experts(self) -> list[ExpertLayer]:
        return cast(list[ExpertLayer], list(self.expert_layers))

    # ---- serving options ----------------------------------------------------------------------

    def use_channels_last(self, enabled: bool = True) -> FlowMatchingPolicy:
        """Run the backbone channels-last (faster with cuDNN in half precision); call it before
        compiling."""
        memory_format = torch.channels_last if enabled else torch.contiguous_format
        self.backbone.to(memory_format=memory_format)  # type: ignore[call-overload]
        self.image_proj.to(memory_format=memory_format)  # type: ignore[call-overload]
        self.pixel_format = memory_format
        return self
