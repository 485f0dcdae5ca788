"""pi0 with real-time chunking in the compiled tier on the CPU (the tiny demo directory): the
guided step with d and prefix_len as tensors compiles pi0's layers by regions (exact's VJP
through their compiled backward) and gives the eager FP32 reference's chunks on the plans a
robot's session hands over."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
import torch

from controller.inference.parity import relative_error
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.base import Plan
from policies.flow.settings import RTCConfig
from policies.inputs import example_frames
from policies.pi0.demo import write_demo_checkpoint
from policies.pi0.policy import read_pi0_policy
from policies.pi0.rtc import serve_pi0_with_rtc
from policies.tensor_policy import EagerPolicy, TensorPolicy

REGIONAL = "compiling the model's repeated blocks, not the whole step"  # tiers.CompiledStep


def compiled_tier_serves_the_eager_reference(pi0: TensorPolicy, mode: str) -> None:
    """pi0 with RTC `mode` served by the compiled tier (inductor, fullgraph) gives the eager
    FP32 reference's chunks for several delays, and the guidance moved them."""
    served = serve_pi0_with_rtc(pi0, RTCConfig(mode=mode))
    config = RunnerConfig(
        top_tier="compiled", serve_slower_tiers=True, step_budget_ms=None, cache_dir=None
    )
    runner = Runner(served, config, "cpu")
    runner.start()
    assert runner.tier == "compiled", runner.status()["tiers"]
    reference = EagerPolicy(served)
    unguided = EagerPolicy(pi0)
    images = example_frames(served.spec, 1)
    first = served.codec.example(1)
    chunk = reference.predict(images, first).actions
    step, moved = first.step, []
    for d in [1, 3, 0, 2]:
        step += 2  # two steps executed: the prefix is chunk_size - 2 rows long
        plan = Plan(start_step=step - 2, actions=chunk)
        context = dataclasses.replace(first, step=step, previous_plan=plan, inference_delay=d)
        chunk = runner.predict(images, context).actions
        expected = reference.predict(images, context).actions
        assert relative_error(chunk, expected) < 1e-4, d
        moved.append(relative_error(expected, unguided.predict(images, context).actions))
    assert runner.demotions == []
    assert max(moved) > 1e-2  # the guidance acted, so the comparison above is not vacuous


def test_pi0_stop_grad_compiled_is_the_eager_reference(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    pi0 = read_pi0_policy(write_demo_checkpoint(tmp_path / "pi0", "pi0"), None).policy
    compiled_tier_serves_the_eager_reference(pi0, "stop_grad")


def test_pi0_exact_compiles_by_regions_and_is_the_eager_reference(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Exact compiles pi0's layers, not the whole step (which took minutes on a GPU), and its
    VJP runs through them: a graph break there would fail the fullgraph compile."""
    torch.set_num_threads(1)
    caplog.set_level(logging.INFO, logger="controller.inference.tiers")
    pi0 = read_pi0_policy(write_demo_checkpoint(tmp_path / "pi0", "pi0"), None).policy
    compiled_tier_serves_the_eager_reference(pi0, "exact")
    assert REGIONAL in caplog.text


def test_pi0_compiled_by_regions_serves_every_bucket(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every bucket compiles pi0's regions on the same few functions: dynamo's default limit of
    8 compiled entries a function held two buckets and dropped the compiled tier from the
    third, so four robots were served as two steps of two."""
    torch.set_num_threads(1)
    pi0 = read_pi0_policy(write_demo_checkpoint(tmp_path / "pi0", "pi0"), None).policy
    config = RunnerConfig(
        top_tier="compiled", serve_slower_tiers=True, step_budget_ms=None, cache_dir=None
    )
    runner = Runner(pi0, config, "cpu", batch_sizes=(1, 2, 4))
    with caplog.at_level(logging.INFO):
        runner.start()
    assert REGIONAL in caplog.text  # the regions' path, where the limit applies
    assert runner.tier == "compiled"
    buckets = runner.status()["buckets"]
    assert [b["size"] for b in buckets] == [2, 4]
    assert all("compiled" in b["step_ms"] for b in buckets), buckets
    items = [(example_frames(pi0.spec, k), pi0.codec.example(k)) for k in range(4)]
    batch = runner.predict_batch(items)
    assert runner.status()["steps_by_bucket"] == {"4": 1}
    for item, result in zip(items, batch, strict=True):
        assert relative_error(result.actions, runner.predict(*item).actions) < 1e-5
