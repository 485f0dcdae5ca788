"""The configuration of an ACT model, stored in its checkpoint next to the weights.

Every field that changes the model's shapes or its arithmetic is here; nothing about training is
(Tempo only serves). Field names follow LeRobot's `ACTConfig` where the meaning is the same, so a
LeRobot checkpoint maps onto this config field by field (see `policies.act.lerobot`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NormMode = Literal["identity", "mean_std", "min_max"]
Backbone = Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]

BASIC_BLOCK_BACKBONES = ("resnet18", "resnet34")


def check_model_dims(dim_model: int, n_heads: int) -> None:
    """A transformer over image tokens with the 2D sine position embedding (ACT's, and the flow
    policy's): ValueError with what to change."""
    if dim_model % n_heads != 0:
        raise ValueError(
            f"dim_model ({dim_model}) must be divisible by n_heads ({n_heads}); change one of them"
        )
    if dim_model % 4 != 0:
        raise ValueError(
            f"dim_model ({dim_model}) must be a multiple of 4: the 2D position embedding "
            "gives each image axis half of it, in sine/cosine pairs"
        )


class ACTConfig(BaseModel):
    """Shapes, options and normalization modes of one ACT model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- Inputs and outputs ------------------------------------------------------------------
    n_cameras: int = Field(
        ge=0,
        le=16,
        description="Cameras the model reads; cameras of one frame shape go through the "
        "backbone as one batch.",
    )
    image_height: int = Field(
        ge=1, le=4096, description="Height of every camera frame (the first, with camera_sizes)."
    )
    image_width: int = Field(
        ge=1, le=4096, description="Width of every camera frame (the first, with camera_sizes)."
    )
    camera_sizes: tuple[tuple[int, int], ...] | None = Field(
        default=None,
        description="(height, width) of each camera in order, for cameras of different shapes; "
        "None: every camera is image_height x image_width.",
    )
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

    # ---- LeRobot's execution settings, as its config gave them ------------------------------
    n_action_steps: int | None = Field(
        default=None, ge=1, description="Actions LeRobot executed per chunk, if known."
    )
    temporal_ensemble_coeff: float | None = Field(
        default=None,
        description="LeRobot's temporal-ensembling weight for this model, if known. What the "
        "daemon executes is the spec's `execution` (policies.checkpoints.execution translates "
        "these two into it), unless the config's execution section overrides it.",
    )

    @model_validator(mode="after")
    def _check(self) -> ACTConfig:
        check_model_dims(self.dim_model, self.n_heads)
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
        if self.camera_sizes is not None:
            if len(self.camera_sizes) != self.n_cameras:
                raise ValueError(
                    f"camera_sizes has {len(self.camera_sizes)} entries for {self.n_cameras} "
                    "cameras; give one (height, width) per camera"
                )
            if self.camera_sizes and self.camera_sizes[0] != (self.image_height, self.image_width):
                raise ValueError(
                    f"camera_sizes starts with {self.camera_sizes[0]} but image_height x "
                    f"image_width is {self.image_height}x{self.image_width}; they name the "
                    "first camera's size"
                )
            if any(min(size) < 1 or max(size) > 4096 for size in self.camera_sizes):
                raise ValueError("camera_sizes must be positive sizes of at most 4096")
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
        for height, width in self.backbone_sizes:
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
    def frame_sizes(self) -> tuple[tuple[int, int], ...]:
        """(height, width) of each camera's frames, in camera order."""
        if self.camera_sizes is not None:
            return self.camera_sizes
        return ((self.image_height, self.image_width),) * self.n_cameras

    @property
    def frame_groups(self) -> tuple[tuple[tuple[int, int], tuple[int, ...]], ...]:
        """((height, width), camera indices) per distinct frame shape, in the order a shape
        first appears: the frame tensors `forward` takes (policies.inputs.frame_groups)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for index, size in enumerate(self.frame_sizes):
            groups.setdefault(size, []).append(index)
        return tuple((size, tuple(indices)) for size, indices in groups.items())

    @property
    def backbone_sizes(self) -> tuple[tuple[int, int], ...]:
        """(height, width) at which each camera's frames reach the backbone."""
        if self.resize is not None:
            return (self.resize,) * self.n_cameras
        return self.frame_sizes

    @property
    def backbone_input_size(self) -> tuple[int, int]:
        """(height, width) of the first camera's frames at the backbone."""
        if self.resize is not None:
            return self.resize
        return (self.image_height, self.image_width)

    @property
    def state_size(self) -> int:
        """Length of one state vector as the caller sends it."""
        return self.state_dim + self.env_state_dim


def camera_fields(sizes: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The config fields describing cameras of these (height, width) sizes, in order:
    camera_sizes only when they differ (so one-shape configs stay as they always were)."""
    sizes = [(int(h), int(w)) for h, w in sizes]
    first = sizes[0] if sizes else (1, 1)
    return {
        "n_cameras": len(sizes),
        "image_height": first[0],
        "image_width": first[1],
        "camera_sizes": tuple(sizes) if len(set(sizes)) > 1 else None,
    }
