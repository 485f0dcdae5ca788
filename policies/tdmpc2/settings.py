"""The tdmpc2 family's settings, `policy.tdmpc2:` (read as `policy.planner:` too, its old
name): planning, fast mode and the prior fallback. Pydantic only (the control process
validates the config; see policies.section_model)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from policies.section_model import FamilySection


class PlannerSettings(FamilySection):
    """How a TD-MPC2 checkpoint is served (the `policy.tdmpc2:` section; `policy.planner:`
    before)."""

    mode: Literal["checkpoint", "plan", "prior"] = Field(
        default="checkpoint",
        description="plan: MPPI planning; prior: fast mode (the policy prior's mean, no "
        "planning); checkpoint: what the checkpoint's config says.",
    )
    compute: Literal["checkpoint", "fp32", "tf32", "bf16"] = Field(
        default="checkpoint",
        description="fp32: every tier plans in FP32 (elementwise start-up parity). tf32 or bf16: "
        "the graph, compiled and eager_half tiers plan with TF32 matmuls or pre-cast BF16 "
        "weights (faster on a GPU), eager FP32 stays FP32, and start-up parity is the value "
        "regret of their plans under the FP32 model. checkpoint: what the checkpoint says.",
    )
    prior_steps: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Fast mode (and the fallback's prior): how many of the chunk's actions the "
        "prior rolls out through the dynamics, the last one held after; 1 is the official "
        "fast mode (encode and one prior mean, the least GPU work). null: the checkpoint's "
        "(1 unless it says otherwise).",
    )
    fallback_budget_ms: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description="When planning overruns this budget fallback_k times in the last "
        "fallback_n plans, serve the policy prior for the next fallback_n steps (logged and "
        "counted in status). null: always plan.",
    )
    fallback_k: int = Field(default=3, ge=1, le=1000, description="Overruns that switch ...")
    fallback_n: int = Field(
        default=20, ge=1, le=1000, description="... within the last n plans; prior steps after."
    )

    @model_validator(mode="after")
    def _k_within_n(self) -> PlannerSettings:
        if self.fallback_k > self.fallback_n:
            raise ValueError(
                f"fallback_k ({self.fallback_k}) must be at most fallback_n ({self.fallback_n})"
            )
        return self
