"""The guards' settings (the `guards:` section) and the check of a joint's limit pair, shared by
the config and the limits a driver sends in `hello`."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class GuardsConfig(BaseModel):
    """Limits and timeouts applied to every action sent to a robot."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    position_limits: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="Joint name -> (lower, upper) in the joint's units (rad or m). Intersected "
        "with the limits the driver sends in `hello`: the tighter bound wins. Joints in neither "
        "are unlimited.",
    )
    max_velocity: dict[str, float] | float | None = Field(
        default=None,
        description="Largest speed, units/s: one number for every joint, or joint name -> "
        "speed (joints left out are unlimited). Per tick a joint moves at most this / rate_hz. "
        "None: off.",
    )
    max_acceleration: dict[str, float] | float | None = Field(
        default=None,
        description="Largest acceleration, units/s^2, as for max_velocity: the per-tick change "
        "may change by at most this / rate_hz^2 from one tick to the next. None: off.",
    )
    hold_after_ms: float = Field(
        default=200.0,
        gt=0,
        description="No fresh observation for this long: send hold instead of actions.",
    )
    stop_after_ms: float = Field(
        default=1000.0,
        gt=0,
        description="No fresh observation for this long: enter the stop state, left only as "
        "`resume` says. Must be greater than hold_after_ms.",
    )
    resume: Literal["observation", "explicit"] = Field(
        default="observation",
        description="How the stop state ends. observation: at the first fresh observation; "
        "explicit: a fresh observation and an explicit resume (operator or API).",
    )

    @field_validator("position_limits", mode="before")
    @classmethod
    def _limits_form(cls, value: object) -> object:
        """The expected form in the sentence, not pydantic's "a valid tuple"."""
        form = "joint name -> [lower, upper], e.g. {shoulder: [-1.5, 1.5]}"
        if not isinstance(value, dict):
            raise ValueError(f"expected a mapping of {form}; got {value!r}")
        for joint, pair in value.items():
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"{joint}: expected [lower, upper] ({form}); got {pair!r}")
        return value

    @field_validator("position_limits")
    @classmethod
    def _ordered_limits(
        cls, value: dict[str, tuple[float, float]]
    ) -> dict[str, tuple[float, float]]:
        for joint, (lower, upper) in value.items():
            check_limit_pair(joint, lower, upper, "guards.position_limits")
        return value

    @field_validator("max_velocity", "max_acceleration")
    @classmethod
    def _positive_rates(
        cls, value: dict[str, float] | float | None
    ) -> dict[str, float] | float | None:
        items = value.items() if isinstance(value, dict) else [("every joint", value)]
        for joint, rate in items:
            if rate is not None and not (math.isfinite(rate) and rate > 0):
                raise ValueError(
                    f"{joint}: {rate} is not a positive finite number; leave the joint out (or "
                    "set the field to null) to turn the limit off"
                )
        return value

    @model_validator(mode="after")
    def _stop_after_hold(self) -> GuardsConfig:
        if self.stop_after_ms <= self.hold_after_ms:
            raise ValueError(
                f"guards.stop_after_ms ({self.stop_after_ms}) must be greater than "
                f"guards.hold_after_ms ({self.hold_after_ms}): raise stop_after_ms or lower "
                "hold_after_ms"
            )
        return self


def check_limit_pair(joint: str, lower: float, upper: float, where: str) -> None:
    if math.isnan(lower) or math.isnan(upper):
        raise ValueError(f"{where}: joint {joint!r} has a NaN limit ({lower}, {upper})")
    if lower > upper:
        raise ValueError(
            f"{where}: joint {joint!r} has lower limit {lower} above upper limit {upper}; swap them"
        )
