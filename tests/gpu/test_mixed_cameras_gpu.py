"""ACT with cameras of different shapes on a GPU: every tier (the CUDA graph included) passes its
start-up checks on it, and the graph tier's chunks match the FP32 eager reference."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.parity import relative_error  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import first_context  # noqa: E402
from policies.demo import make_demo_policy  # noqa: E402
from policies.inputs import example_frames  # noqa: E402
from policies.tensor_policy import EagerPolicy  # noqa: E402

pytestmark = pytest.mark.gpu

CAMERAS = (("top", 240, 320), ("wrist", 96, 128), ("side", 240, 320))


def test_mixed_camera_shapes_serve_from_the_graph_tier(gpu_cache_dir) -> None:  # type: ignore[no-untyped-def]
    policy = make_demo_policy(cameras=CAMERAS, chunk_size=20, seed=4)
    config = RunnerConfig(cache_dir=gpu_cache_dir, parity_observations=3, step_budget_ms=None)
    runner = Runner(policy, config, device="cuda")
    runner.start()
    assert runner.tier == "graph"
    for tier in runner.status()["tiers"]:  # type: ignore[union-attr]
        assert tier["state"] == "ready" and tier["parity_error"] <= 1e-2, tier
    reference = EagerPolicy(make_demo_policy(cameras=CAMERAS, chunk_size=20, seed=4), "cuda")
    for seed in range(3):
        images = example_frames(policy.spec, seed)
        context = first_context(policy.spec, np.full(6, 0.1 * seed, np.float32))
        chunk = runner.predict(images, context).actions
        expected = reference.predict(images, context).actions
        assert relative_error(chunk, expected) <= 1e-2
