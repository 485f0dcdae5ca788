"""RunnerConfig: working defaults, refusals that say what to change, no torch import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from controller.runner_config import TIER_ORDER, RunnerConfig


def test_defaults_are_the_full_ladder_in_fp16() -> None:
    config = RunnerConfig()
    assert config.top_tier == "auto" and TIER_ORDER[0] == "graph"
    assert config.precision == "fp16" and config.parity_rtol == 1e-2
    assert config.overrun_k <= config.overrun_n
    assert config.repromote_after_s is None


def test_k_larger_than_n_is_refused_with_both_values() -> None:
    with pytest.raises(ValidationError, match=r"overrun_k \(5\) must be at most overrun_n \(3\)"):
        RunnerConfig(overrun_k=5, overrun_n=3)


def test_unknown_fields_and_tiers_are_refused() -> None:
    with pytest.raises(ValidationError):
        RunnerConfig(top_teir="graph")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        RunnerConfig(top_tier="turbo")  # type: ignore[arg-type]


def test_round_trips_through_json() -> None:
    config = RunnerConfig(step_budget_ms=None, cache_dir=None, precision="bf16")
    assert RunnerConfig.model_validate_json(config.model_dump_json()) == config


def test_imports_without_torch() -> None:
    code = "import sys, controller.runner_config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
