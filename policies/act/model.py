"""ACT: Action Chunking with Transformers (Zhao et al., "Learning Fine-Grained Bimanual
Manipulation with Low-Cost Hardware", 2023), as served by Tempo.

Read top to bottom, `forward` is the paper's inference path:

1. Every camera frame goes through a ResNet; its layer4 feature map, projected to `dim_model`
   by a 1x1 convolution, gives one token per feature-map cell, with a fixed 2D sinusoidal
   position embedding. Cameras of one frame shape run as one batch; the tokens follow the
   cameras' order (as LeRobot concatenates them, camera by camera).
2. The robot's joint state becomes one token (a linear projection), an optional environment
   state another, and the style latent z a third. z comes from a VAE encoder in training; at
   inference it is zero, so its token is the projection's bias. These 1D tokens get learned
   position embeddings. Token order: latent, robot state, environment state, image cells.
3. A transformer encoder mixes all tokens.
4. A transformer decoder turns `chunk_size` learned queries (zero inputs whose position
   embeddings are the queries) into `chunk_size` outputs by cross-attending into the encoder.
5. A linear head maps each output to an action, which is unnormalized into robot units.

Module and parameter names match LeRobot's `ACT` (without its `model.` prefix), so LeRobot
weights load as they are (see `policies.act.lerobot`).

Contract (policies/inputs.py): forward(*frames, state) -> actions float32 (B, chunk_size,
action_dim) in robot units, where frames is one uint8 tensor (B, n, H, W, 3) per distinct camera
shape (in the order a shape first appears among the cameras; one tensor when all cameras share a
shape) and state is float32 (B, state_history, state_size).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import einops
import torch
from torch import nn

from policies.act.backbone import ResNet, backbone_channels, feature_map_size
from policies.act.config import ACTConfig
from policies.act.preprocess import Normalizer, prepare_images, prepare_state
from policies.act.transformer import (
    Decoder,
    Encoder,
    sinusoidal_position_embedding_1d,
    sinusoidal_position_embedding_2d,
)
from policies.model_hooks import ServedModule


class ACT(ServedModule):
    policy_type = "act"
    # Its linear, convolution and attention weights are used by those operations alone, so the
    # runner's half-precision tiers may hold them in half precision (no cast kernels per step).
    precast_half_weights: ClassVar[bool] = True

    backbone: ResNet
    encoder_img_feat_input_proj: nn.Conv2d
    encoder_robot_state_input_proj: nn.Linear
    encoder_env_state_input_proj: nn.Linear
    pixel_scale: torch.Tensor
    state_mask: torch.Tensor | None
    image_pos_embed: torch.Tensor
    latent_zero: torch.Tensor
    decoder_in_zero: torch.Tensor

    def __init__(self, config: ACTConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.dim_model
        has_state = config.state_dim > 0
        has_env = config.env_state_dim > 0

        # Raw inputs -> network inputs; network output -> robot units. (Stats: checkpoint buffers.)
        eps = config.norm_eps
        self.image_norm = Normalizer(config.image_norm, (config.n_cameras, 3), eps)
        self.state_norm = Normalizer(config.state_norm, (config.state_dim,), eps)
        self.env_state_norm = Normalizer(config.env_state_norm, (config.env_state_dim,), eps)
        self.action_norm = Normalizer(config.action_norm, (config.action_dim,), eps)
        self.register_buffer("pixel_scale", torch.tensor(255.0), persistent=False)
        mask = config.state_input_mask
        self.register_buffer(
            "state_mask",
            None if mask is None else torch.tensor(mask, dtype=torch.float32),
            persistent=False,
        )

        # 1. Image tokens. One frame tensor per camera shape; tokens in camera order.
        self.frame_groups = config.frame_groups
        self._groups_in_order = [indices for _, indices in self.frame_groups] == (
            [tuple(range(config.n_cameras))] if config.n_cameras else []
        )  # one shape: one batch whose tokens are already in camera order
        if config.n_cameras > 0:
            dilate = config.replace_final_stride_with_dilation
            self.backbone = ResNet(config.vision_backbone, dilate_layer4=dilate)
            channels = backbone_channels(config.vision_backbone)
            self.encoder_img_feat_input_proj = nn.Conv2d(channels, dim, kernel_size=1)
            cell_pos = [
                sinusoidal_position_embedding_2d(*feature_map_size(*size, dilate), dim)
                for size in config.backbone_sizes
            ]
            self.register_buffer("image_pos_embed", torch.cat(cell_pos), persistent=False)
        else:
            self.register_buffer("image_pos_embed", torch.zeros(0, dim), persistent=False)
        for g, (_, indices) in enumerate(self.frame_groups):  # each group's image statistics
            index = torch.tensor(indices, dtype=torch.long)
            self.register_buffer(f"frame_group_{g}", index, persistent=False)

        # 2. 1D tokens: latent, robot state, environment state.
        self.register_buffer("latent_zero", torch.zeros(1, config.latent_dim), persistent=False)
        self.encoder_latent_input_proj = nn.Linear(config.latent_dim, dim)
        if has_state:
            state_inputs = config.state_history * config.state_dim
            self.encoder_robot_state_input_proj = nn.Linear(state_inputs, dim)
        if has_env:
            self.encoder_env_state_input_proj = nn.Linear(config.env_state_dim, dim)
        self.encoder_1d_feature_pos_embed = nn.Embedding(1 + has_state + has_env, dim)

        # 3. Encoder.  4. Decoder with learned queries.
        self.encoder = Encoder(config, config.n_encoder_layers)
        self.decoder = Decoder(config)
        self.decoder_pos_embed = nn.Embedding(config.chunk_size, dim)
        zero_queries = torch.zeros(1, config.chunk_size, dim)
        self.register_buffer("decoder_in_zero", zero_queries, persistent=False)

        # 5. Action head.
        self.action_head = nn.Linear(dim, config.action_dim)

        # Memory format of the backbone's input (see `use_channels_last`).
        self.pixel_format = torch.contiguous_format

        # Training only: the VAE encoder that produced z. Kept so its weights load and round-trip.
        if config.use_vae:
            self._add_vae_encoder(config)

        for p in (*self.encoder.parameters(), *self.decoder.parameters()):
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """forward(*frames, state): one uint8 frame tensor per camera shape, then the state."""
        config = self.config
        *frames, state = inputs
        pixels = []
        if config.n_cameras > 0:
            for g, group in enumerate(frames):
                cameras = None if self._groups_in_order else getattr(self, f"frame_group_{g}")
                prepared = prepare_images(
                    group,
                    self.pixel_scale,
                    self.image_norm,
                    config.resize,
                    config.resize_antialias,
                    cameras,
                )
                pixels.append(prepared.contiguous(memory_format=self.pixel_format))
        robot_state, env_state = prepare_state(
            state, self.state_norm, self.env_state_norm, self.state_mask, config.state_dim
        )
        actions = self.predict_normalized(pixels, robot_state, env_state)
        return self.action_norm.unnormalize(actions)

    def state_bounds(self, limit: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(low, high) per state entry (robot state, then environment state): the raw values
        whose normalization stays within +-limit (see policies.tensor_policy.with_state_bounds).
        Masked entries too: they are normalized before the mask zeroes them."""
        robot = self.state_norm.input_bounds(limit)
        env = self.env_state_norm.input_bounds(limit)
        return torch.cat([robot[0], env[0]]), torch.cat([robot[1], env[1]])

    def predict_normalized(
        self, pixels: Sequence[torch.Tensor], robot_state: torch.Tensor, env_state: torch.Tensor
    ) -> torch.Tensor:
        """The network alone: normalized inputs -> normalized actions (B, chunk_size, action_dim).

        pixels: per camera shape (the frame groups), (B * n, 3, h, w) with the cameras of one
        sample adjacent (empty without cameras); robot_state: (B, state_history * state_dim);
        env_state: (B, env_state_dim).
        """
        config = self.config
        batch = robot_state.shape[0]

        # 2. The 1D tokens. A zero latent makes the latent token the projection's bias.
        tokens = [self.encoder_latent_input_proj(self.latent_zero).expand(batch, -1)]
        if config.state_dim > 0:
            tokens.append(self.encoder_robot_state_input_proj(robot_state))
        if config.env_state_dim > 0:
            tokens.append(self.encoder_env_state_input_proj(env_state))
        encoder_in = torch.stack(tokens, dim=1)  # (B, n_1d, D)

        # 1. The image tokens, camera by camera, each feature map row-major.
        if pixels:
            encoder_in = torch.cat([encoder_in, self._image_tokens(pixels, batch)], dim=1)
        encoder_pos = torch.cat([self.encoder_1d_feature_pos_embed.weight, self.image_pos_embed])
        encoder_pos = encoder_pos.unsqueeze(0)

        # 3. Encode.
        memory = self.encoder(encoder_in, encoder_pos)

        # 4. Decode: zero inputs; the learned position embeddings are the action queries.
        queries = self.decoder_pos_embed.weight.unsqueeze(0)
        decoded = self.decoder(
            self.decoder_in_zero.expand(batch, -1, -1), memory, queries, encoder_pos
        )

        # 5. One action per query.
        return self.action_head(decoded)

    def _image_tokens(self, pixels: Sequence[torch.Tensor], batch: int) -> torch.Tensor:
        """(B, total cells, D): one backbone batch per frame group, then camera order."""
        if self._groups_in_order:
            features = self.encoder_img_feat_input_proj(self.backbone(pixels[0]))
            return einops.rearrange(features, "(b n) d h w -> b (n h w) d", b=batch)
        per_camera: dict[int, torch.Tensor] = {}
        for group, (_, indices) in zip(pixels, self.frame_groups, strict=True):
            features = self.encoder_img_feat_input_proj(self.backbone(group))
            cells = einops.rearrange(features, "(b n) d h w -> b n (h w) d", b=batch)
            for position, camera in enumerate(indices):
                per_camera[camera] = cells[:, position]
        return torch.cat([per_camera[i] for i in range(self.config.n_cameras)], dim=1)

    def use_channels_last(self, enabled: bool = True) -> ACT:
        """Run the backbone in channels-last memory format, weights and input alike.

        Faster on GPUs (tensor cores); on a CPU the default NCHW is usually as fast. The
        uint8 HWC frames become channels-last without a copy. Call before compiling.
        """
        memory_format = torch.channels_last if enabled else torch.contiguous_format
        if self.config.n_cameras > 0:
            self.backbone.to(memory_format=memory_format)  # type: ignore[call-overload]
            self.encoder_img_feat_input_proj.to(memory_format=memory_format)  # type: ignore[call-overload]
        self.pixel_format = memory_format
        return self

    def _add_vae_encoder(self, config: ACTConfig) -> None:
        """The training-time encoder of (state, action chunk) into z; never run when serving."""
        dim = config.dim_model
        self.vae_encoder = Encoder(config, config.n_vae_encoder_layers)
        self.vae_encoder_cls_embed = nn.Embedding(1, dim)
        n_tokens = 1 + config.chunk_size
        if config.state_dim > 0:
            self.vae_encoder_robot_state_input_proj = nn.Linear(config.state_dim, dim)
            n_tokens += 1
        self.vae_encoder_action_input_proj = nn.Linear(config.action_dim, dim)
        self.vae_encoder_latent_output_proj = nn.Linear(dim, 2 * config.latent_dim)
        pos = sinusoidal_position_embedding_1d(n_tokens, dim).unsqueeze(0)
        self.register_buffer("vae_encoder_pos_enc", pos)
