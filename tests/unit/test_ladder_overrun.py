"""An overrun demotes only to a tier measured at start-up to fit the budget: pi0's graph tier
a little over 20 ms must not step down to its 150 ms compiled tier (controller.inference.ladder)."""

from __future__ import annotations

import logging

import pytest

from controller.inference.ladder import ServingLadder
from controller.runner_config import RunnerConfig

LOGGER = "controller.inference.ladder"
TIERS = ["graph", "compiled", "eager_half", "eager_fp32"]


def ladder_with(step_s: dict[str, float | None]) -> ServingLadder:
    ladder = ServingLadder(RunnerConfig(step_budget_ms=20.0, overrun_k=2, overrun_n=4))
    ladder.begin(TIERS, step_s)
    return ladder


def test_overruns_keep_the_tier_when_the_one_below_is_slower(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ladder = ladder_with({"graph": 0.0208, "compiled": 0.154, "eager_half": 0.236,
                          "eager_fp32": 0.572})  # fmt: skip
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(40):
            ladder.record_step(0.021)
    assert ladder.serving == "graph" and ladder.demotions == [] and ladder.overruns == 40
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in records] == [logging.WARNING]  # said once
    text = records[0].getMessage()
    assert "graph keeps serving" in text and "154.0 ms" in text and "step_budget_ms" in text


def test_overruns_demote_to_a_tier_that_fits() -> None:
    ladder = ladder_with({"graph": 0.002, "compiled": 0.005, "eager_half": 0.3, "eager_fp32": 0.5})
    for _ in range(2):
        ladder.record_step(0.025)  # the graph went slow (a fault): compiled was 5 ms
    assert ladder.serving == "compiled" and ladder.demotions[0].cause == "overrun"
    for _ in range(8):
        ladder.record_step(0.025)  # compiled slow too; eager_half measured 300 ms: stay
    assert ladder.serving == "compiled" and len(ladder.demotions) == 1


def test_a_tier_without_a_start_up_time_is_demoted_to_as_before() -> None:
    ladder = ladder_with({})
    for _ in range(2):
        ladder.record_step(0.025)
    assert ladder.serving == "compiled"


def test_a_tier_slower_now_than_the_one_below_was_is_demoted() -> None:
    """The graph gone to 300 ms a step (a fault, contention): compiled's 154 ms at start-up
    is over the budget but still faster, so the ladder steps down."""
    ladder = ladder_with({"graph": 0.0208, "compiled": 0.154, "eager_half": 0.236,
                          "eager_fp32": 0.572})  # fmt: skip
    for _ in range(2):
        ladder.record_step(0.300)
    assert ladder.serving == "compiled" and ladder.demotions[0].cause == "overrun"
