"""Real-time chunking's settings, `policy.rtc:`, owned by the flow family and shared by pi0 and
pi0.5 (each serves RTC its own way). Pydantic only (the control process validates the config
and plans execution from it; see policies.section_model)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from policies.section_model import FamilySection

# Real-time chunking's modes and mask schedules.
RTCMode = Literal["off", "exact", "stop_grad", "inpaint", "trained"]
MaskSchedule = Literal["exp", "linear", "ones", "zeros"]


class RTCConfig(FamilySection):
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
