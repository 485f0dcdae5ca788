"""The sections that say which policy the daemon serves and what it builds it from
(`policy:`, with its `rtc:` and `planner:`, and `robot:`): the inference process builds the
policy from these alone.

The sections of the daemon itself (control loop, server, security, inference, supervision,
logging) and the `Section` base are in controller.config_sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from controller.config_sections import Section

# Real-time chunking's modes and mask schedules; policies.settings names the same ones.
RTCMode = Literal["off", "exact", "stop_grad", "inpaint", "trained"]
MaskSchedule = Literal["exp", "linear", "ones", "zeros"]


class CameraConfig(Section):
    name: str = Field(min_length=1, max_length=64)
    height: int = Field(gt=0, le=4096)
    width: int = Field(gt=0, le=4096)


class RobotConfig(Section):
    """Robot defaults, used by policies that do not fix their own spec (the built-in `reach`)."""

    joints: tuple[str, ...] = Field(
        default=tuple(f"joint_{i}" for i in range(6)), min_length=1, max_length=256
    )
    cameras: tuple[CameraConfig, ...] = Field(
        default=(CameraConfig(name="front", height=96, width=128),), max_length=16
    )


class PlannerConfig(Section):
    """How a TD-MPC2 checkpoint is served (the `policy.planner:` section)."""

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
    def _k_within_n(self) -> PlannerConfig:
        if self.fallback_k > self.fallback_n:
            raise ValueError(
                f"fallback_k ({self.fallback_k}) must be at most fallback_n ({self.fallback_n})"
            )
        return self


class RTCConfig(Section):
    """Real-time chunking (Black, Galliker, Levine 2025): how a flow, pi0 or pi0.5 policy is
    served so that a new chunk agrees with the actions the robot executes while it is being
    computed."""

    mode: RTCMode = Field(
        default="off",
        description="off: plain sampling. exact: the paper's guidance (a vector-Jacobian product "
        "through the action expert; pi0: the prefix's keys and values held constant). "
        "stop_grad: the correction is the weighted error (no Jacobian; cheaper; LeRobot's "
        "'guided' mode). inpaint: the prefix is written into the noisy actions at every step "
        "(hard for the first d actions, blended by the mask over the overlap). trained: "
        "pi0.5 checkpoints trained with training-time RTC (LeRobot's rtc_training_max_delay "
        "> 0) only: the first d actions are the previous chunk's, marked clean by their flow "
        "time, no guidance (d is capped at rtc_training_max_delay).",
    )
    beta: float | None = Field(
        default=None,
        gt=0,
        le=1e4,
        description="Upper bound of the guidance weight (the paper's beta, LeRobot's "
        "max_guidance_weight); null: the family's default, 5 for flow, 10 for pi0 and pi0.5 "
        "(LeRobot's). It matters near the noise end, where the weight grows without bound. "
        "Each Euler step moves by up to beta / n_steps times the error: far above 1 the "
        "sampler overshoots (measured with scripts/smoothness/rtc_smoothness.py: beta 200 at 10 "
        "steps diverged).",
    )
    overlap_rows: int | None = Field(
        default=None,
        ge=1,
        le=10000,
        description="How many rows of the previous plan the soft mask reaches (the guided "
        "overlap ends there, as LeRobot's execution_horizon); null: the family's default, all "
        "of the plan still ahead for flow, 10 for pi0 and pi0.5 (LeRobot's).",
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
        "same chunks, a shorter cold compile. Modes stop_grad, inpaint, trained and off only: "
        "exact always unrolls (its VJP inside a region does not compile on torch 2.11). Set "
        "false if your torch cannot compile the region (the compiled tiers then fail at "
        "start-up and the runner steps down).",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML reads a bare `off` as false (`--set policy.rtc.mode=off`): it means off here.
        return "off" if value is False else value


class PolicyConfig(Section):
    """Which policy the daemon serves."""

    kind: Literal["reach", "checkpoint"] = Field(
        default="reach",
        description="reach: the built-in scripted policy (moves smoothly toward `target`); "
        "checkpoint: load the directory at `path`.",
    )
    path: Path | None = Field(default=None, description="Checkpoint directory (kind: checkpoint).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description="auto: cuda if present, else cpu (the choice is logged). cuda without a GPU "
        "is refused.",
    )
    joint_names: tuple[str, ...] | None = Field(
        default=None,
        min_length=1,
        description="checkpoint: names of the action entries, in order, for a LeRobot "
        "directory (whose config has none; else taken from the dataset's meta/info.json next to "
        "it, else joint_0..). A Tempo checkpoint records its own; these must then agree.",
    )
    chunk_size: int = Field(default=20, ge=1, le=1000, description="reach: steps per chunk.")
    target: tuple[float, ...] | None = Field(
        default=None, description="reach: target pose, one value per joint (default: 0.5 rad each)."
    )
    time_constant_steps: float = Field(
        default=25.0, gt=0, description="reach: steps to cover ~63% of the way to the target."
    )
    rtc: RTCConfig = Field(
        default=RTCConfig(),
        description="Real-time chunking for a flow, pi0 or pi0.5 policy (mode "
        "off|exact|stop_grad|inpaint|trained, beta, schedule, overlap_rows); the execution "
        "horizon is inference.query_period, and the robot plays "
        "the old chunk until the new one lands (needs inference.ensemble: newest).",
    )
    planner: PlannerConfig = Field(
        default=PlannerConfig(), description="TD-MPC2 checkpoints: planning, fast mode, fallback."
    )
    tokenizer: Path | None = Field(
        default=None,
        description="pi0 / pi0.5: the PaliGemma SentencePiece model file (tokenizer.model), for a "
        "checkpoint that ships none (openpi's); overrides one it ships.",
    )
    default_task: str | None = Field(
        default=None,
        min_length=1,
        max_length=1000,
        description="pi0 / pi0.5: the task of a robot whose hello names none; unset, such a "
        "robot is refused.",
    )

    @model_validator(mode="before")
    @classmethod
    def _a_path_means_a_checkpoint(cls, data: Any) -> Any:
        """`policy.path` alone serves that checkpoint, never the scripted reach policy."""
        if isinstance(data, dict) and data.get("path") is not None and "kind" not in data:
            return {**data, "kind": "checkpoint"}
        return data

    @model_validator(mode="after")
    def _path_for_checkpoint(self) -> PolicyConfig:
        if self.kind == "checkpoint" and self.path is None:
            raise ValueError("policy.kind 'checkpoint' needs policy.path set to a directory")
        if self.kind == "reach" and self.path is not None:
            raise ValueError(
                "policy.path is set but policy.kind is 'reach' (the scripted policy, which reads "
                "no checkpoint): set policy.kind to 'checkpoint', or remove policy.path"
            )
        return self
