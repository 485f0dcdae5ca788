"""The configuration of a pi0.5 network: pi0's fields (policies.pi0.config) with what pi0.5
changes. Field names follow LeRobot's `PI05Config`."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, Field, model_validator

from policies.pi0.config import TINY_WIDTHS, PaliGemmaFlowConfig


class Pi05Config(PaliGemmaFlowConfig):
    """pi0.5: action tokens only (no state token), adaRMS time conditioning in the expert."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state_token: ClassVar[bool] = False
    adarms: ClassVar[bool] = True

    tokenizer_max_length: int = Field(
        default=200, ge=1, le=8192, description="Prompt tokens (the state is among them)."
    )
    rtc_training_max_delay: int = Field(
        default=0,
        ge=0,
        description="Training-time RTC's largest delay: trained with the first 0..this many "
        "actions clean (LeRobot's field); > 0 allows policy.rtc.mode trained.",
    )

    @model_validator(mode="after")
    def _delay_within_chunk(self) -> Pi05Config:
        if self.rtc_training_max_delay >= self.chunk_size:
            raise ValueError(
                f"rtc_training_max_delay ({self.rtc_training_max_delay}) must be smaller than "
                f"chunk_size ({self.chunk_size})"
            )
        return self


def tiny_pi05_config(**overrides: Any) -> Pi05Config:
    """A pi0.5 small enough for CPU tests (the widths of policies.pi0.config.tiny_pi0_config)."""
    return Pi05Config(**{**TINY_WIDTHS, **overrides})
