"""What the runner records of its tiers: how each fared at start-up (`TierReport`), and every
move down or back up the ladder (`TierChange`), both shown by `tempo status`."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class TierReport:
    """How one tier fared at start-up (and since)."""

    name: str
    precision: str
    state: str = "pending"  # pending | ready | skipped
    reason: str = ""
    build_s: float | None = None
    parity_error: float | None = None  # largest relative error over the parity observations
    step_s: float | None = None  # median predict path time during the parity check
    reference_error: float | None = None  # against the policy's ReferenceChunks, if it has any
    served_steps: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class TierChange:
    """One move of the serving tier: down (cause exception, non_finite or overrun) or back up
    (cause repromoted)."""

    time: float  # wall clock (time.time()), for people reading status
    from_tier: str
    to_tier: str
    cause: str  # exception | non_finite | overrun | repromoted
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
