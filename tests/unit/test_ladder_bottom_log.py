"""The lowest tier overrunning its budget (every CPU demo) is a warning said once, with what to
change; a failure at the bottom is still an error (controller.inference.ladder)."""

from __future__ import annotations

import logging

import pytest

from controller.inference.ladder import ServingLadder
from controller.runner_config import RunnerConfig

LOGGER = "controller.inference.ladder"


def bottom_ladder() -> ServingLadder:
    ladder = ServingLadder(RunnerConfig(step_budget_ms=20.0, overrun_k=2, overrun_n=4))
    ladder.begin(["eager_fp32"])
    return ladder


def test_a_slow_bottom_tier_is_one_warning_with_advice(caplog: pytest.LogCaptureFixture) -> None:
    ladder = bottom_ladder()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(50):
            ladder.record_step(0.5)
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in records] == [logging.WARNING]
    text = records[0].getMessage()
    assert "eager_fp32" in text and "control.rate_hz" in text and "GPU" in text
    assert ladder.serving == "eager_fp32" and ladder.overruns == 50


def test_a_failure_at_the_bottom_is_still_an_error(caplog: pytest.LogCaptureFixture) -> None:
    ladder = bottom_ladder()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert ladder.demote("non_finite", "the chunk held NaN") is None
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.ERROR]
