"""The configuration of a SmolVLA model, stored in its checkpoint next to the weights. Imports
pydantic only.

Field names follow LeRobot's `SmolVLAConfig` where the meaning is the same. The widths of the
vision encoder and of the language model are not in a LeRobot config.json (LeRobot builds its
backbone from the Hugging Face config of `vlm_model_name`): they default to SmolVLM2-500M's
(`SMOLVLM2_500M`), and giving them explicitly is how tests build tiny models
(`tiny_smolvla_config`). The action expert's width is derived as LeRobot derives it: the
language width times `expert_width_multiplier`, its MLP by LeRobot's rounding rule.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

NormMode = Literal["IDENTITY", "MEAN_STD", "MIN_MAX", "QUANTILES"]
AttentionMode = Literal["cross_attn", "self_attn"]


class VisionWidths(BaseModel):
    """The shapes of SmolVLM's vision encoder (SigLIP-style)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    width: int = Field(ge=2, le=65536, description="Hidden size.")
    depth: int = Field(ge=1, le=256, description="Encoder layers.")
    mlp_dim: int = Field(ge=1, le=262144, description="MLP hidden size.")
    num_heads: int = Field(ge=1, le=256, description="Attention heads.")
    patch_size: int = Field(ge=1, le=1024, description="Side of one square patch, pixels.")
    image_size: int = Field(ge=1, le=8192, description="Side the position table was made for.")

    @model_validator(mode="after")
    def _check(self) -> VisionWidths:
        if self.width % self.num_heads != 0:
            raise ValueError(
                f"vision width ({self.width}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.image_size % self.patch_size != 0:
            raise ValueError(
                f"vision image_size ({self.image_size}) must be a multiple of patch_size "
                f"({self.patch_size})"
            )
        return self

    @property
    def patches_per_side(self) -> int:
        return self.image_size // self.patch_size


class TextWidths(BaseModel):
    """The shapes of the language model (SmolLM2, a Llama) as SmolVLA cuts it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    width: int = Field(ge=2, le=65536, description="Hidden size.")
    depth: int = Field(ge=1, le=256, description="Decoder layers kept (num_vlm_layers).")
    mlp_dim: int = Field(ge=1, le=262144, description="Gated MLP hidden size.")
    num_heads: int = Field(ge=1, le=256, description="Query heads.")
    num_kv_heads: int = Field(ge=1, le=256, description="Key/value heads.")
    head_dim: int = Field(ge=2, le=1024, description="Width of one head; even (rotary halves).")

    @model_validator(mode="after")
    def _check(self) -> TextWidths:
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for rotary embeddings")
        return self


def expert_mlp_dim(width: int, multiplier: int = 4, multiple_of: int = 256) -> int:
    """LeRobot's rule for the action expert's MLP: 2/3 of 4x the width, rounded up to 256."""
    hidden = int(multiplier * int(2 * width / 3))
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# SmolVLM2-500M-Video-Instruct, the backbone of lerobot/smolvla_base (its Hugging Face config).
SMOLVLM2_500M: dict[str, Any] = {
    "vision": VisionWidths(
        width=768, depth=12, mlp_dim=3072, num_heads=12, patch_size=16, image_size=512
    ),
    "text_widths": {"width": 960, "mlp_dim": 2560, "num_heads": 15, "num_kv_heads": 5},
    "head_dim": 64,
    "vocab_size": 49280,
    "scale_factor": 4,
    "rms_norm_eps": 1e-5,
    "layer_norm_eps": 1e-6,
}
SMOLVLM2_500M_NAME = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"


def smolvlm2_500m_text(num_vlm_layers: int = 16) -> TextWidths:
    widths = SMOLVLM2_500M["text_widths"]
    return TextWidths(depth=num_vlm_layers, head_dim=SMOLVLM2_500M["head_dim"], **widths)


class SmolVLAConfig(BaseModel):
    """Shapes, options and normalization modes of one SmolVLA policy (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- The robot ---------------------------------------------------------------------------
    camera_sizes: tuple[tuple[int, int], ...] = Field(
        min_length=1, max_length=16, description="(height, width) of each camera, spec order."
    )
    state_size: int = Field(ge=1, le=1024, description="Robot state entries.")
    action_size: int = Field(ge=1, le=1024, description="Robot action entries.")
    state_norm: NormMode = "MEAN_STD"
    action_norm: NormMode = "MEAN_STD"

    # ---- LeRobot's SmolVLAConfig -------------------------------------------------------------
    chunk_size: int = Field(default=50, ge=1, le=1000, description="Actions per inference.")
    n_action_steps: int = Field(default=50, ge=1, le=1000, description="Actions executed.")
    max_state_dim: int = Field(default=32, ge=1, le=1024, description="State padded to this.")
    max_action_dim: int = Field(default=32, ge=1, le=1024, description="Actions padded to this.")
    resize_imgs_with_padding: tuple[int, int] = Field(
        default=(512, 512), description="(width, height) frames are resized to, padded."
    )
    empty_cameras: int = Field(
        default=0, ge=0, le=16, description="Empty camera slots (masked: they change nothing)."
    )
    tokenizer_max_length: int = Field(default=48, ge=1, le=8192, description="Prompt tokens.")
    num_steps: int = Field(default=10, ge=1, le=1000, description="Euler steps.")
    attention_mode: AttentionMode = "cross_attn"
    self_attn_every_n_layers: int = Field(
        default=2, ge=-1, le=256, description="Every n-th expert layer self-attends; <= 0: none."
    )
    expert_width_multiplier: float = Field(default=0.75, gt=0.0, le=4.0)
    min_period: float = Field(default=4e-3, gt=0.0, description="Sine time embedding.")
    max_period: float = Field(default=4.0, gt=0.0, description="Sine time embedding.")

    # ---- The backbone (SmolVLM2's Hugging Face config) ----------------------------------------
    vision: VisionWidths = Field(default_factory=lambda: SMOLVLM2_500M["vision"])
    text: TextWidths = Field(default_factory=smolvlm2_500m_text)
    scale_factor: int = Field(default=4, ge=1, le=64, description="Pixel shuffle factor.")
    vocab_size: int = Field(default=49280, ge=1, le=4_000_000, description="Token table rows.")
    rms_norm_eps: float = Field(default=1e-5, gt=0.0, le=1e-2)
    layer_norm_eps: float = Field(default=1e-6, gt=0.0, le=1e-2)
    rope_base: float = Field(default=10000.0, gt=0.0, description="LeRobot's rotary base.")

    @model_validator(mode="after")
    def _check(self) -> SmolVLAConfig:
        if self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps ({self.n_action_steps}) cannot exceed chunk_size "
                f"({self.chunk_size})"
            )
        if self.state_size > self.max_state_dim:
            raise ValueError(
                f"the state has {self.state_size} entries, more than max_state_dim "
                f"({self.max_state_dim})"
            )
        if self.action_size > self.max_action_dim:
            raise ValueError(
                f"the actions have {self.action_size} entries, more than max_action_dim "
                f"({self.max_action_dim})"
            )
        width, height = self.resize_imgs_with_padding
        patch = self.vision.patch_size
        if width % patch or height % patch:
            raise ValueError(
                f"resize_imgs_with_padding {self.resize_imgs_with_padding} must be a multiple of "
                f"the patch size ({patch})"
            )
        side = height // patch
        if width != height or side % self.scale_factor:
            raise ValueError(
                f"the pixel shuffle needs square frames whose {side} patches per side are a "
                f"multiple of scale_factor ({self.scale_factor})"
            )
        if self.expert_width % 2 or self.expert_width < 2:
            raise ValueError(f"the expert width ({self.expert_width}) must be even")
        return self

    @property
    def expert_width(self) -> int:
        return int(self.text.width * self.expert_width_multiplier)

    @property
    def expert(self) -> TextWidths:
        """The action expert: the language model's heads at expert_width, as deep."""
        return self.text.model_copy(
            update={"width": self.expert_width, "mlp_dim": expert_mlp_dim(self.expert_width)}
        )

    @property
    def image_side(self) -> int:
        """Side of the square image the vision encoder reads."""
        return self.resize_imgs_with_padding[1]

    @property
    def image_tokens(self) -> int:
        """Prefix tokens per camera after the pixel shuffle."""
        return (self.image_side // self.vision.patch_size) ** 2 // self.scale_factor**2

    @property
    def prefix_length(self) -> int:
        """Image tokens of every camera, the prompt, the state token."""
        return len(self.camera_sizes) * self.image_tokens + self.tokenizer_max_length + 1

    def self_attends(self, layer: int) -> bool:
        """Whether expert layer `layer` attends to the prefix and itself (else: cross-attends
        to the prefix's keys and values alone)."""
        if self.attention_mode != "cross_attn":
            return True
        every = self.self_attn_every_n_layers
        return every > 0 and layer % every == 0


TINY: dict[str, Any] = {
    "vision": VisionWidths(width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=4, image_size=32),
    "text": TextWidths(width=64, depth=4, mlp_dim=96, num_heads=4, num_kv_heads=2, head_dim=16),
    "scale_factor": 2,
    "vocab_size": 300,
    "resize_imgs_with_padding": (32, 32),
    "chunk_size": 6,
    "n_action_steps": 4,
    "max_state_dim": 8,
    "max_action_dim": 8,
    "num_steps": 3,
    "tokenizer_max_length": 6,
}


def tiny_smolvla_config(**overrides: Any) -> SmolVLAConfig:
    """A SmolVLA small enough for CPU tests: 32x32 images (16 tokens), widths 32-64, 4 layers."""
    values = {"camera_sizes": ((24, 32),), "state_size": 5, "action_size": 5, **TINY}
    return SmolVLAConfig(**{**values, **overrides})
