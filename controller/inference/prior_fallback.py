"""A planner that falls back to its policy prior under deadline pressure: the tier ladder's idea
applied to planning.

    policy = PriorFallback(planner_runner, prior_runner, budget_s=0.004, k=3, n=20)

Each step is planned; a plan that took longer than `budget_s` (wall time, upload to download) is
an overrun. When k of the last n plans overran, the next n steps are served by the prior (fast
mode: the policy prior's mean, a fraction of a plan's time) instead of plans that would arrive
stale; then planning resumes with a fresh window. Every switch is logged and counted, and so is
every step the prior served (`status()["prior_fallback"]`). Both are Policies over the same
weights and codec, so the robot's memory (the plan mean) stays valid across switches.

Like the runner, one thread calls `predict` (the inference thread, or the inference process's
server); `status` may be read from any thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from controller.feed.in_process_feed import InProcessFeed
from controller.feed.inference_feed import InferenceFeed
from controller.feed.served_policy import ServedInProcess
from controller.inference.local_policy import LocalPolicy
from controller.observe.overrun_window import OverrunWindow
from controller.observe.telemetry import Telemetry
from policies.base import PolicySpec, Prediction, RobotContext

log = logging.getLogger(__name__)


class PriorFallback(ServedInProcess):
    def __init__(
        self,
        planner: LocalPolicy,
        prior: LocalPolicy,
        budget_s: float,
        k: int,
        n: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not 1 <= k <= n:
            raise ValueError(f"need 1 <= k <= n for the fallback window, got k={k}, n={n}")
        if budget_s <= 0:
            raise ValueError(f"the planning budget must be positive, got {budget_s} s")
        self._planner, self._prior = planner, prior
        self._budget_s, self._k, self._n = budget_s, k, n
        self._clock = clock
        self._window = OverrunWindow(k, n)
        self._prior_left = 0
        self.counts = {"plans": 0, "overruns": 0, "switches": 0, "prior_steps": 0}

    @property
    def spec(self) -> PolicySpec:
        return self._planner.spec

    @property
    def planner(self) -> LocalPolicy:
        """What is served while plans keep their budget."""
        return self._planner

    @property
    def serving_prior(self) -> bool:
        return self._prior_left > 0

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        if self._prior_left > 0:
            self._prior_left -= 1
            self.counts["prior_steps"] += 1
            return self._prior.predict(images, context)
        began = self._clock()
        prediction = self._planner.predict(images, context)
        elapsed = self._clock() - began
        self.counts["plans"] += 1
        over = elapsed > self._budget_s
        if over:
            self.counts["overruns"] += 1
        if self._window.record(over):
            self._prior_left = self._n
            self.counts["switches"] += 1
            log.warning(
                "planning overran its %.2f ms budget %d times in the last %d plans (last "
                "%.2f ms): serving the policy prior for the next %d steps",
                self._budget_s * 1e3, self._k, self._n, elapsed * 1e3, self._n,
            )  # fmt: skip
        return prediction

    def status(self) -> dict[str, Any]:
        """The planner's status (its tier ladder), with the fallback's counters."""
        status = dict(self._planner.status())
        status["prior_fallback"] = {
            **self.counts,
            "serving_prior": self.serving_prior,
            "budget_ms": self._budget_s * 1e3,
            "k": self._k,
            "n": self._n,
        }
        return status

    @property
    def outputs(self) -> tuple[str, ...]:
        """The planner's extra outputs (its mean); the prior's codec returns the same."""
        return self._planner.outputs

    def add_pinned_region(self, address: int, size: int) -> None:
        """Both runners upload frames from this page-locked memory by DMA."""
        for policy in (self._planner, self._prior):
            policy.add_pinned_region(address, size)

    def remove_pinned_region(self, address: int, size: int) -> None:
        for policy in (self._planner, self._prior):
            policy.remove_pinned_region(address, size)

    def attach_telemetry(self, telemetry: Telemetry) -> None:
        """The planner's steps are timed like any runner's (the prior's are not)."""
        self._planner.attach_telemetry(telemetry)

    @property
    def serving(self) -> bool:
        return self._planner.serving

    def feed(self, telemetry: Telemetry) -> InferenceFeed:
        """A thread of this process runs it (controller.feed.in_process_feed)."""
        return InProcessFeed(self, telemetry)
