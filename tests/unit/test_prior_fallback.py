"""A planner overrunning its budget k times in n serves the prior for the next n steps, counted
and logged; then planning resumes."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from controller.inference.prior_fallback import PriorFallback
from policies.base import Prediction, RobotContext
from policies.reach import build_reach_policy

SPEC = build_reach_policy(["j0"], [], chunk_size=2).spec


class Fake:
    """A policy whose steps take `durations` seconds on the fake clock, in turn."""

    def __init__(self, clock: list[float], value: float, durations: list[float]) -> None:
        self.spec = SPEC
        self._clock, self._value, self._durations = clock, value, durations
        self.calls = 0

    def predict(self, images, context) -> Prediction:
        self._clock[0] += self._durations[self.calls % len(self._durations)]
        self.calls += 1
        return Prediction(np.full((2, 1), self._value, dtype=np.float32))

    def status(self) -> dict:
        return {"tier": "graph"}


def ctx() -> RobotContext:
    return RobotContext(step=0, episode_start=False, state_history=np.zeros((1, 1), np.float32))


def test_overruns_switch_to_the_prior_for_n_steps(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    # plans: fast, slow, fast, slow, slow (3rd overrun in the window of 5), then fast again
    planner = Fake(now, 1.0, [0.001, 0.010, 0.001, 0.010, 0.010, 0.001])
    prior = Fake(now, -1.0, [0.0001])
    policy = PriorFallback(planner, prior, budget_s=0.005, k=3, n=5, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        served = [float(policy.predict({}, ctx()).actions[0, 0]) for _ in range(12)]
    assert served == [1.0] * 5 + [-1.0] * 5 + [1.0] * 2  # 5 plans, 5 prior steps, plans again
    assert policy.counts == {"plans": 7, "overruns": 3, "switches": 1, "prior_steps": 5}
    assert "serving the policy prior for the next 5 steps" in caplog.text
    status = policy.status()
    assert status["tier"] == "graph" and status["prior_fallback"]["switches"] == 1


def test_no_overrun_never_switches() -> None:
    now = [0.0]
    planner, prior = Fake(now, 1.0, [0.001]), Fake(now, -1.0, [0.0])
    policy = PriorFallback(planner, prior, budget_s=0.005, k=1, n=3, clock=lambda: now[0])
    for _ in range(10):
        policy.predict({}, ctx())
    assert prior.calls == 0 and policy.counts["switches"] == 0


def test_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="k <= n"):
        PriorFallback(Fake([0.0], 0, [0]), Fake([0.0], 0, [0]), 0.01, k=4, n=3)
