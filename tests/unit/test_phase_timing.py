"""What the eager phase timing of flow and pi0 policies runs, and for how long
(controller.tools.phase_timing)."""

from __future__ import annotations

import torch

from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from controller.tools import phase_timing
from controller.tools.phase_timing import PHASE_MIN, eager_module, timed_rounds
from policies.demo import make_demo_flow_policy


def test_the_rounds_stop_at_the_budget_with_the_minimum_measured(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert list(timed_rounds(3)) == [0, 1, 2, 3, 4]  # within the budget: all, plus two warm-up
    monkeypatch.setattr(phase_timing, "PHASE_BUDGET_S", 0.0)
    assert list(timed_rounds(1000)) == list(range(2 + PHASE_MIN))


def test_half_precision_phases_run_the_half_tiers_own_module() -> None:
    policy = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=8, dim_model=16)
    config = RunnerConfig(top_tier="eager_fp32", cache_dir=None, step_budget_ms=None)
    runner = Runner(policy, config, device="cpu")
    runner.start()
    # On the CPU the half tiers' module is the FP32 one itself (no half weights); the runner
    # keeps whatever the tiers were built with.
    assert runner.half_module is runner.step_path.module
    runner.half_module = torch.nn.Linear(2, 2)  # stands for the half tiers' copy on a GPU
    assert eager_module(runner, torch.float16) is runner.half_module
    assert eager_module(runner, None) is runner.step_path.module  # FP32: the reference's
