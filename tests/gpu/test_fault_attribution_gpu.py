"""Fault attribution on the GPU ladder: an input that makes the FP32 reference fail as well is
the input's fault (InputFault, no tier demoted), whatever tier serves; the graph tier serves on."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.errors import InputFault  # noqa: E402
from controller.inference.examples import random_observation  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.tiny import build_tiny_policy, tiny_spec  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = tiny_spec(cameras=2, height=96, width=128, state_size=6, joints=6, chunk_size=10)


def test_a_bad_input_demotes_no_gpu_tier(gpu_cache_dir) -> None:  # type: ignore[no-untyped-def]
    config = RunnerConfig(cache_dir=gpu_cache_dir, parity_observations=3, step_budget_ms=None)
    runner = Runner(build_tiny_policy(SPEC), config, device="cuda")
    runner.start()
    assert runner.tier == "graph"
    images, state = random_observation(SPEC, 5)
    for _ in range(3):
        with pytest.raises(InputFault):
            runner.predict_chunk(images, np.full_like(state, 3e38))
    assert runner.tier == "graph" and runner.demotions == []
    assert runner.status()["input_faults"] == 3
    assert np.isfinite(runner.predict_chunk(images, state)).all()
    assert runner.tier == "graph"
