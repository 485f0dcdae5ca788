"""The configuration of an ACT model, stored in its checkpoint next to the weights.

Every field that changes the model's shapes or its arithmetic is here; nothing about training is
(Tempo only serves). Field names follow LeRobot's `ACTConfig` where the meaning is the same, so a
LeRobot checkpoint maps onto this config field by field (see `policies.checkpoints.lerobot`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NormMode = Literal["identity", "mean_std", "min_max"]
Backbone = Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]

BASIC_BLOCK_BACKBONES = ("resnet18", "resnet34")


class ACTConfig(BaseModel):
    """Shapes, options and normalization modes of one ACT model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- Inputs and outputs ------------------------------------------------------------------
    n_cameras: int = Field(
        ge=0,
        le=16,
        description="Cameras the model reads; all go through the backbone as one batch.",
    )
    image_height: int = Field(ge=1, le=4096, description="Height of every camera frame, pixels.")
    image_width: int = Field(ge=1, le=4096, description="Width of every camera frame, pixels.")
    resize: tuple[int, int] | None = Field(
        default=None,
        description="(height, width) the frames are resized to (bilinear) before the backbone; "
        "None feeds them at their own size.",
    )
    resize_antialias: bool = Field(
        default=True, description="Low-pass filter when `resize` shrinks the frames."
    )
    state_dim: int = Field(
        ge=0,
        le=1024,
        description="Robot joint-state entries per step (LeRobot's observation.state); 0 = no "
        "robot-state token.",
    )
    env_state_dim: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="Environment-state entries (LeRobot's observation.environment_state); they "
        "follow the robot state in each state vector. 0 = no environment-state token.",
    )
    state_history: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Past state vectors the model reads, oldest first. The robot-state token "
        "projects all of them (flattened); the environment-state token reads the newest only. "
        "At the start of an episode the caller pads by repeating the first state.",
    )
    state_input_mask: tuple[bool, ...] | None = Field(
        default=None,
        description="One flag per state entry (state_dim + env_state_dim): False hides the entry "
        "from the model (it is set to 0 after normalization). None shows every entry.",
    )
    action_dim: int = Field(ge=1, le=1024, description="Entries per action (commanded joints).")
    chunk_size: int = Field(ge=1, le=10_000, description="Actions predicted per forward pass.")

    # ---- Normalization (statistics are buffers in model.safetensors) -------------------------
    image_norm: NormMode = Field(
        default="mean_std", description="Per-camera, per-channel normalization of [0, 1] pixels."
    )
    state_norm: NormMode = Field(default="mean_std", description="Normalization of robot state.")
    env_state_norm: NormMode = Field(
        default="identity", description="Normalization of environment state."
    )
    action_norm: NormMode = Field(
        default="mean_std", description="Normalization the action head was trained in; undone."
    )
    norm_eps: float = Field(
        default=1e-8,
        ge=0.0,
        le=1e-2,
        description="mean_std divides by (std + eps); min_max uses eps as the range when "
        "max == min (LeRobot's conventions).",
    )

    # ---- Vision backbone ---------------------------------------------------------------------
    vision_backbone: Backbone = Field(default="resnet18", description="ResNet variant.")
    replace_final_stride_with_dilation: bool = Field(
        default=False, description="Dilate layer4 instead of striding it (Bottleneck ResNets only)."
    )

    # ---- Transformer -------------------------------------------------------------------------
    dim_model: int = Field(default=512, ge=4, le=8192, description="Transformer width.")
    n_heads: int = Field(default=8, ge=1, le=128, description="Attention heads.")
    dim_feedforward: int = Field(default=3200, ge=1, le=65536, description="MLP hidden width.")
    feedforward_activation: Literal["relu", "gelu"] = Field(
        default="relu", description="MLP activation."
    )
    pre_norm: bool = Field(
        default=False,
        description="LayerNorm before each sub-block (and after the encoder) instead of after.",
    )
    n_encoder_layers: int = Field(default=4, ge=1, le=64, description="Encoder layers.")
    n_decoder_layers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Decoder layers, all used. (The original ACT code built 7 but used only the "
        "first; LeRobot's default of 1 reproduces that, and so does a checkpoint that says 1.)",
    )
    latent_dim: int = Field(
        default=32, ge=1, le=4096, description="Size of the style latent (zero when serving)."
    )
    use_vae: bool = Field(
        default=False,
        description="The checkpoint carries the VAE encoder used in training. Its weights are "
        "kept so the checkpoint round-trips, but serving never runs it: the latent is zero.",
    )
    n_vae_encoder_layers: int = Field(
        default=4, ge=1, le=64, description="Layers of that VAE encoder (when use_vae)."
    )

    # ---- What the training setup suggested for execution (informational) --------------------
    n_action_steps: int | None = Field(
        default=None, ge=1, description="Actions LeRobot executed per chunk, if known."
    )
    temporal_ensemble_coeff: float | None = Field(
        default=None,
        description="LeRobot's temporal-ensembling weight for this model, if known. Tempo's "
        "ensembler is set in the serving config; this is a hint, not a setting.",
    )

    @model_validator(mode="after")
    def _check(self) -> ACTConfig:
        if self.dim_model % self.n_heads != 0:
            raise ValueError(
                f"dim_model ({self.dim_model}) must be divisible by n_heads ({self.n_heads}); "
                "change one of them"
            )
        if self.dim_model % 4 != 0:
            raise ValueError(
                f"dim_model ({self.dim_model}) must be a multiple of 4: the 2D position embedding "
                "gives each image axis half of it, in sine/cosine pairs"
            )
        if self.n_cameras == 0 and self.env_state_dim == 0:
            raise ValueError(
                "ACT needs at least one camera or an environment state; set n_cameras or "
                "env_state_dim"
            )
        if self.state_dim + self.env_state_dim == 0:
            raise ValueError("state_dim + env_state_dim must be at least 1")
        if self.state_input_mask is not None:
            size = self.state_dim + self.env_state_dim
            if len(self.state_input_mask) != size:
                raise ValueError(
                    f"state_input_mask has {len(self.state_input_mask)} entries but the state has "
                    f"{size} (state_dim + env_state_dim); give one flag per entry"
                )
        if self.resize is not None and min(self.resize) < 1:
            raise ValueError(f"resize must be two positive sizes, got {self.resize}")
        if (
            self.replace_final_stride_with_dilation
            and self.vision_backbone in BASIC_BLOCK_BACKBONES
        ):
            raise ValueError(
                f"replace_final_stride_with_dilation needs a Bottleneck backbone (resnet50, "
                f"resnet101, resnet152); {self.vision_backbone}'s blocks cannot dilate"
            )
        if self.n_cameras > 0:
            height, width = self.backbone_input_size
            if min(height, width) < 32:
                raise ValueError(
                    f"frames reach the backbone at {height}x{width}; the ResNet needs at least "
                    "32x32 (set resize, or use larger frames)"
                )
        if self.n_action_steps is not None and self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps ({self.n_action_steps}) cannot exceed chunk_size "
                f"({self.chunk_size})"
            )
        return self

    @property
    def backbone_input_size(self) -> tuple[int, int]:
        """(height, width) of the frames the backbone sees."""
        if self.resize is not None:
            return self.resize
        return (self.image_height, self.image_width)

    @property
    def state_size(self) -> int:
        """Length of one state vector as the caller sends it."""
        return self.state_dim + self.env_state_dim
