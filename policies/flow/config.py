"""The configuration of a flow-matching policy (stored in its checkpoint), and of real-time
chunking (RTC, set when serving). Imports pydantic only.

The model is shaped like the action experts of pi0-class policies, scaled down: image tokens from
a ResNet, one state token, a transformer over them (the context, encoded once per inference), and
an action expert that turns H noisy action tokens with time conditioning into a velocity, run
once per denoising step. Field names follow ACT's config where the meaning is the same.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from policies.act.config import Backbone, NormMode, check_model_dims

RTCMode = Literal["off", "exact", "stop_grad", "inpaint"]
MaskSchedule = Literal["exp", "linear", "ones", "zeros"]


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


class RTCConfig(BaseModel):
    """Real-time chunking (Black, Galliker, Levine 2025): how a flow policy is served so that a
    new chunk agrees with the actions the robot executes while it is being computed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: RTCMode = Field(
        default="off",
        description="off: plain sampling. exact: the paper's guidance (a vector-Jacobian product "
        "through the action expert). stop_grad: the correction is the weighted error (no "
        "Jacobian; cheaper). inpaint: the prefix is written into the noisy actions at every "
        "step (hard for the first d actions, blended by the mask over the overlap).",
    )
    beta: float = Field(
        default=5.0,
        gt=0,
        le=1e4,
        description="Upper bound of the guidance weight (the paper's beta); it matters near "
        "t = 0, where the weight grows without bound. Each Euler step moves by up to "
        "beta / n_steps times the error: far above 1 the sampler overshoots (measured with "
        "scripts/rtc_smoothness.py: beta 200 at 10 steps diverged).",
    )
    schedule: MaskSchedule = Field(
        default="exp",
        description="How the mask decays from 1 (the first d actions, executed before the new "
        "chunk lands) to 0 (the end of the previous chunk's actions): exp (the paper's), "
        "linear, ones (no decay), zeros (only the first d actions guided).",
    )

    regional_compile: bool = Field(
        default=True,
        description="Compile one denoising step and call it for every Euler step "
        "(torch.compiler.nested_compile_region) instead of compiling n unrolled copies: the "
        "same chunks, a shorter cold compile. Modes stop_grad, inpaint and off only: exact "
        "always unrolls (its VJP inside a region does not compile on torch 2.11). Set false if "
        "your torch cannot compile the region (the compiled tiers then fail at start-up and the "
        "runner steps down).",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML reads a bare `off` as false (`--set policy.rtc.mode=off`): it means off here.
        return "off" if value is False else value
