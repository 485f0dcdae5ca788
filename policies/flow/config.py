"""The configuration of a flow-matching policy (stored in its checkpoint). Imports pydantic only.
How real-time chunking is set when serving (`policy.rtc`) is the family's section
(policies.flow.settings, with the modes and mask schedules it may name).

The model is shaped like the action experts of pi0-class policies, scaled down: image tokens from
a ResNet, one state token, a transformer over them (the context, encoded once per inference), and
an action expert that turns H noisy action tokens with time conditioning into a velocity, run
once per denoising step. Field names follow ACT's config where the meaning is the same.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.act.config import Backbone, NormMode, check_model_dims


class FlowConfig(BaseModel):
    """Shapes, options and normalization modes of one flow-matching policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ---- Inputs and outputs ------------------------------------------------------------------
    n_cameras: int = Field(ge=1, le=16, description="Cameras; all go through the backbone at once.")
    image_height: int = Field(ge=32, le=4096, description="Height of every camera frame, pixels.")
    image_width: int = Field(ge=32, le=4096, description="Width of every camera frame, pixels.")
    state_dim: int = Field(ge=1, le=1024, description="Joint-state entries per step.")
    state_history: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Past state vectors the state token reads, oldest first.",
    )
    action_dim: int = Field(ge=1, le=1024, description="Entries per action (commanded joints).")
    chunk_size: int = Field(
        default=50, ge=2, le=1000, description="H: actions generated per inference."
    )
    n_steps: int = Field(
        default=10, ge=1, le=100, description="Euler steps from noise (t=0) to actions (t=1)."
    )

    # ---- Normalization (statistics are buffers in model.safetensors) -------------------------
    image_norm: NormMode = Field(default="mean_std", description="Per camera and channel.")
    state_norm: NormMode = Field(default="mean_std", description="Normalization of the state.")
    action_norm: NormMode = Field(
        default="mean_std", description="The space the flow was trained in; undone on output."
    )
    norm_eps: float = Field(default=1e-8, ge=0.0, le=1e-2, description="As in ACT's config.")

    # ---- Network -----------------------------------------------------------------------------
    vision_backbone: Backbone = Field(default="resnet18", description="ResNet variant.")
    dim_model: int = Field(default=256, ge=8, le=8192, description="Transformer width.")
    n_heads: int = Field(default=4, ge=1, le=128, description="Attention heads.")
    dim_feedforward: int = Field(default=1024, ge=1, le=65536, description="MLP hidden width.")
    n_context_layers: int = Field(
        default=2, ge=1, le=64, description="Layers over the image and state tokens (run once)."
    )
    n_expert_layers: int = Field(
        default=4, ge=1, le=64, description="Action-expert layers (run once per Euler step)."
    )

    @model_validator(mode="after")
    def _check(self) -> FlowConfig:
        check_model_dims(self.dim_model, self.n_heads)
        return self

    @property
    def state_size(self) -> int:
        """Length of one state vector as the caller sends it."""
        return self.state_dim
