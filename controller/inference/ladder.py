"""The ladder's state machine: which ready tier serves, and the rules that move it.

    trouble (an exception, a non-finite chunk)   -> one tier down at once (`demote`)
    overrun_k of the last overrun_n steps over budget -> one tier down (`record_step`), only
                                                    where that tier's start-up step time fits
                                                    the budget: a slower tier never helps
    repromote_after_s since the last change      -> the runner re-checks the tiers above and
                                                    `promote`s to the highest that passes

Nothing here runs a model; the runner does the checks and tells this object what happened. Not
thread-safe: the runner calls it under its lock. Readers on other threads (status) may read the
public fields at any time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from controller.inference.tier_report import TierChange
from controller.observe.overrun_window import OverrunWindow
from controller.runner_config import RunnerConfig

log = logging.getLogger(__name__)

BOTTOM_LOG_INTERVAL_S = 10.0  # "no lower tier" is logged at most this often, not every step


class ServingLadder:
    def __init__(self, config: RunnerConfig) -> None:
        self._config = config
        self.tiers: list[str] = []  # tiers that passed start-up, highest first
        self.current: int | None = None  # index of the serving tier (None before start)
        self.demotions: list[TierChange] = []
        self.promotions: list[TierChange] = []
        self.overruns = 0
        self._window = OverrunWindow(config.overrun_k, config.overrun_n)  # over budget, per step
        self._last_change = 0.0  # monotonic time of the last demotion or re-promotion attempt
        self._last_bottom_log = -1e9
        self._warned_slow_bottom = False  # the bottom tier overran its budget (said once)
        self._warned_slower_below: set[str] = set()  # tiers kept serving over budget (said once)
        self._step_s: dict[str, float | None] = {}  # each tier's step time at start-up

    def begin(self, ready: list[str], step_s: Mapping[str, float | None] | None = None) -> None:
        """Start-up is over: serve the highest of `ready`. `step_s`: each tier's measured step
        time at start-up, which an overrun's demotion must fit."""
        self.tiers, self.current = list(ready), 0
        self._step_s = dict(step_s or {})

    @property
    def serving(self) -> str | None:
        current, tiers = self.current, self.tiers
        return None if current is None else tiers[current]

    @property
    def budget_s(self) -> float | None:
        budget = self._config.step_budget_ms
        return None if budget is None else budget / 1e3

    def record_step(self, seconds: float) -> None:
        """A served step took `seconds`; too many overruns in the window demote."""
        budget = self.budget_s
        if budget is None:
            return
        over = seconds > budget
        if over:
            self.overruns += 1
        if self._window.record(over):
            if self._slower_below(budget, seconds):
                return
            self.demote(
                "overrun",
                f"{self._window.k} of the last {self._window.n} steps took longer than "
                f"{budget * 1e3:.1f} ms (last {seconds * 1e3:.1f} ms)",
            )

    def _slower_below(self, budget: float, seconds: float) -> bool:
        """Whether demoting would not help: the tier below took, at start-up, longer than the
        budget and longer than this step (pi0's compiled tier is 7x its graph). A tier that
        has become slower than the one below (a fault, contention) is demoted. Said once per
        tier."""
        if self.current is None or self.current + 1 >= len(self.tiers):
            return False  # the bottom: demote() says it
        serving, below = self.tiers[self.current], self.tiers[self.current + 1]
        below_s = self._step_s.get(below)
        if below_s is None or below_s <= budget or below_s < seconds:
            return False
        if serving not in self._warned_slower_below:
            self._warned_slower_below.add(serving)
            log.warning(
                "tier %s overruns the step budget of %.1f ms (last %.1f ms) but %s took %.1f ms "
                "a step at start-up, so %s keeps serving; raise runner.step_budget_ms to the "
                "time this policy needs (logged once)",
                serving, budget * 1e3, seconds * 1e3, below, below_s * 1e3, serving,
            )  # fmt: skip
        return True

    def demote(self, cause: str, detail: str) -> str | None:
        """Step down one tier; returns the new tier, None (nothing recorded) at the bottom."""
        if self.current is None:
            return None
        from_tier = self.tiers[self.current]
        if self.current + 1 >= len(self.tiers):
            if cause == "overrun":
                self._warn_slow_bottom(from_tier, detail)
                return None
            now = time.monotonic()
            if now - self._last_bottom_log >= BOTTOM_LOG_INTERVAL_S:
                self._last_bottom_log = now
                log.error("tier %s: %s (%s); no lower tier to demote to", from_tier, cause, detail)
            return None
        self.current += 1
        to_tier = self.tiers[self.current]
        self._window.clear()
        self._last_change = time.monotonic()
        self.demotions.append(TierChange(time.time(), from_tier, to_tier, cause, detail))
        log.warning("demoted %s -> %s (%s): %s", from_tier, to_tier, cause, detail)
        return to_tier

    def _warn_slow_bottom(self, tier: str, detail: str) -> None:
        """The lowest tier is slower than the step budget: expected on a CPU, so a warning,
        once (the overrun count in `tempo status` keeps growing), with what to change."""
        if self._warned_slow_bottom:
            return
        self._warned_slow_bottom = True
        log.warning(
            "tier %s is slower than the step budget (%s) and is the lowest tier; the robot "
            "keeps playing each chunk until the next lands. For a step per control period, "
            "lower control.rate_hz, raise execution.query_period, or serve on a GPU "
            "(logged once)",
            tier,
            detail,
        )

    def repromote_due(self) -> bool:
        after = self._config.repromote_after_s
        return bool(after and self.current and time.monotonic() - self._last_change >= after)

    def candidates(self) -> list[str]:
        """The tiers above the serving one, highest first; starts the cool-down again."""
        self._last_change = time.monotonic()
        return self.tiers[: self.current or 0]

    def promote(self, name: str, detail: str) -> None:
        """Serve `name` again (a tier above that passed a fresh check)."""
        current = self.serving
        self.current = self.tiers.index(name)
        self._window.clear()
        self.promotions.append(TierChange(time.time(), str(current), name, "repromoted", detail))
        log.warning("re-promoted %s -> %s after a fresh parity check", current, name)

    def use(self, name: str) -> None:
        """Serve `name` without recording a change: for benchmarks and tests."""
        if name not in self.tiers:
            raise ValueError(f"tier {name} is not ready; ready: {self.tiers}")
        self.current = self.tiers.index(name)
        self._window.clear()
