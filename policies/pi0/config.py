"""The configuration of a pi0 network (and the shared part of pi0.5's). Imports pydantic only.

Field names follow LeRobot's `PI0Config` where the meaning is the same. The three towers' widths
(`vision`, `language`, `expert`) default from the named variants, as in openpi's gemma.get_config;
giving them explicitly is how the tests build tiny networks (`tiny_pi0_config`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

GemmaVariant = Literal["gemma_2b", "gemma_300m"]
Precision = Literal["bfloat16", "float32"]


class GemmaWidths(BaseModel):
    """The shapes of one Gemma decoder stack."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    width: int = Field(ge=2, le=65536, description="Hidden size.")
    depth: int = Field(ge=1, le=256, description="Decoder layers.")
    mlp_dim: int = Field(ge=1, le=262144, description="Gated MLP hidden size.")
    num_heads: int = Field(ge=1, le=256, description="Query heads.")
    num_kv_heads: int = Field(ge=1, le=256, description="Key/value heads (1: multi-query).")
    head_dim: int = Field(ge=2, le=1024, description="Width of one head; even (rotary halves).")

    @model_validator(mode="after")
    def _check(self) -> GemmaWidths:
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}); change one of them"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for rotary embeddings")
        return self


class SiglipWidths(BaseModel):
    """The shapes of the SigLIP vision tower."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    width: int = Field(ge=2, le=65536, description="Hidden size.")
    depth: int = Field(ge=1, le=256, description="Encoder layers.")
    mlp_dim: int = Field(ge=1, le=262144, description="MLP hidden size.")
    num_heads: int = Field(ge=1, le=256, description="Attention heads.")
    patch_size: int = Field(ge=1, le=1024, description="Side of one square patch, pixels.")
    image_size: int = Field(ge=1, le=4096, description="Side of the square input image, pixels.")

    @model_validator(mode="after")
    def _check(self) -> SiglipWidths:
        if self.width % self.num_heads != 0:
            raise ValueError(
                f"width ({self.width}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.image_size % self.patch_size != 0:
            raise ValueError(
                f"image_size ({self.image_size}) must be a multiple of patch_size "
                f"({self.patch_size})"
            )
        return self

    @property
    def num_patches(self) -> int:
        """Image tokens per camera."""
        return (self.image_size // self.patch_size) ** 2


GEMMA_VARIANTS: dict[str, GemmaWidths] = {
    "gemma_2b": GemmaWidths(
        width=2048, depth=18, mlp_dim=16384, num_heads=8, num_kv_heads=1, head_dim=256
    ),
    "gemma_300m": GemmaWidths(
        width=1024, depth=18, mlp_dim=4096, num_heads=8, num_kv_heads=1, head_dim=256
    ),
}


def siglip_so400m(image_size: int = 224) -> SiglipWidths:
    """SigLIP So400m/14 as PaliGemma uses it (no pooling head)."""
    return SiglipWidths(
        width=1152, depth=27, mlp_dim=4304, num_heads=16, patch_size=14, image_size=image_size
    )


class PaliGemmaFlowConfig(BaseModel):
    """What pi0 and pi0.5 share: a PaliGemma prefix and a Gemma action expert that integrates a
    flow from noise (t=1) to actions (t=0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The suffix layout and the expert's norms; set by each family's config class.
    state_token: ClassVar[bool] = True
    adarms: ClassVar[bool] = False

    paligemma_variant: GemmaVariant = "gemma_2b"
    action_expert_variant: GemmaVariant = "gemma_300m"
    dtype: Precision = Field(
        default="float32",
        description="As LeRobot's: bfloat16 keeps the vision tower, projector and norms in "
        "float32 (see policies.pi0.weights.apply_precision).",
    )
    chunk_size: int = Field(default=50, ge=1, le=1000, description="Actions per inference.")
    n_action_steps: int = Field(default=50, ge=1, le=1000, description="Actions executed.")
    max_state_dim: int = Field(default=32, ge=1, le=1024, description="State padded to this.")
    max_action_dim: int = Field(default=32, ge=1, le=1024, description="Actions padded to this.")
    num_inference_steps: int = Field(default=10, ge=1, le=1000, description="Euler steps.")
    min_period: float = Field(default=4e-3, gt=0.0, description="Sine time embedding.")
    max_period: float = Field(default=4.0, gt=0.0, description="Sine time embedding.")
    tokenizer_max_length: int = Field(default=48, ge=1, le=8192, description="Prompt tokens.")
    image_resolution: tuple[int, int] = Field(default=(224, 224), description="(height, width).")
    empty_cameras: int = Field(default=0, ge=0, le=16, description="Padded camera slots.")
    vocab_size: int = Field(default=257152, ge=1, le=4_000_000, description="Token table rows.")
    rope_theta: float = Field(default=10000.0, gt=0.0, description="Rotary base (Gemma's).")
    rms_norm_eps: float = Field(default=1e-6, gt=0.0, le=1e-2, description="Gemma RMSNorm.")
    layer_norm_eps: float = Field(default=1e-6, gt=0.0, le=1e-2, description="SigLIP LayerNorm.")
    vision: SiglipWidths = Field(description="Defaults to SigLIP So400m/14 at image_resolution.")
    language: GemmaWidths = Field(description="Defaults to paligemma_variant's widths.")
    expert: GemmaWidths = Field(description="Defaults to action_expert_variant's widths.")

    @model_validator(mode="before")
    @classmethod
    def _default_widths(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("language") is None:
            data["language"] = GEMMA_VARIANTS[data.get("paligemma_variant", "gemma_2b")]
        if data.get("expert") is None:
            data["expert"] = GEMMA_VARIANTS[data.get("action_expert_variant", "gemma_300m")]
        if data.get("vision") is None:
            resolution = data.get("image_resolution", (224, 224))
            data["vision"] = siglip_so400m(int(resolution[0]))
        return data

    @model_validator(mode="after")
    def _check(self) -> PaliGemmaFlowConfig:
        if self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps ({self.n_action_steps}) cannot exceed chunk_size "
                f"({self.chunk_size})"
            )
        height, width = self.image_resolution
        if height != width or height != self.vision.image_size:
            raise ValueError(
                f"image_resolution {self.image_resolution} must be square and equal the vision "
                f"tower's image_size ({self.vision.image_size})"
            )
        lang, expert = self.language, self.expert
        if (lang.depth, lang.num_heads, lang.num_kv_heads, lang.head_dim) != (
            expert.depth,
            expert.num_heads,
            expert.num_kv_heads,
            expert.head_dim,
        ):
            raise ValueError(
                "the language model and the action expert must have the same depth, heads, "
                "key/value heads and head_dim: their layers attend over one joint sequence"
            )
        if expert.width % 2 != 0:
            raise ValueError(f"the expert width ({expert.width}) must be even (sine/cosine pairs)")
        return self

    @property
    def image_tokens(self) -> int:
        """Prefix tokens per camera."""
        return self.vision.num_patches

    @property
    def suffix_length(self) -> int:
        """Tokens the action expert runs over: [state token +] chunk_size action tokens."""
        return self.chunk_size + (1 if self.state_token else 0)


class Pi0Config(PaliGemmaFlowConfig):
    """pi0: one state token before the action tokens; action and time fused by an MLP."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_token: ClassVar[bool] = True
    adarms: ClassVar[bool] = False


TINY_WIDTHS: dict[str, Any] = {
    "vision": SiglipWidths(
        width=32, depth=2, mlp_dim=64, num_heads=2, patch_size=14, image_size=28
    ),
    "language": GemmaWidths(
        width=64, depth=2, mlp_dim=128, num_heads=2, num_kv_heads=1, head_dim=16
    ),
    "expert": GemmaWidths(width=32, depth=2, mlp_dim=64, num_heads=2, num_kv_heads=1, head_dim=16),
    "image_resolution": (28, 28),
    "vocab_size": 300,
    "chunk_size": 6,
    "n_action_steps": 6,
    "max_state_dim": 8,
    "max_action_dim": 8,
    "num_inference_steps": 3,
    "tokenizer_max_length": 5,
}


def tiny_pi0_config(**overrides: Any) -> Pi0Config:
    """A pi0 small enough for CPU tests: 28x28 images (4 tokens), widths 32-64, two layers."""
    return Pi0Config(**{**TINY_WIDTHS, **overrides})
