"""The serving step's lean path on a GPU: one stream switch per step, uploads on the compute
stream, the graph tier's outputs packed in its graph and downloaded by one copy. Each step must
still return exactly its own observation's outputs, equal to eager FP32's, and a NaN a tier
returns must still demote it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.faults import FaultPlan  # noqa: E402
from controller.inference.output_download import PackedOutputs  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import RobotContext  # noqa: E402
from policies.tdmpc2.config import TDMPC2Config  # noqa: E402
from policies.tdmpc2.serving import MEAN, random_tdmpc2_policy  # noqa: E402

pytestmark = pytest.mark.gpu

CONFIG = TDMPC2Config(obs_dim=67, action_dim=21, model_size=1, mode="prior")


def start(cache_dir, faults=None, **changes) -> Runner:  # type: ignore[no-untyped-def]
    policy = random_tdmpc2_policy(CONFIG.model_copy(update=changes))
    config = RunnerConfig(cache_dir=cache_dir, step_budget_ms=None, parity_observations=3)
    runner = Runner(policy, config, device="cuda", faults=faults)
    runner.start()
    return runner


def context(seed: int, memory: dict | None = None) -> RobotContext:
    state = np.random.default_rng(seed).standard_normal((1, CONFIG.obs_dim)).astype(np.float32)
    return RobotContext(step=seed, episode_start=memory is None, state_history=state,
                        memory=memory or {})  # fmt: skip


@pytest.mark.parametrize("prior_steps", [None, 1])
def test_graph_steps_return_their_own_outputs_equal_to_eager(gpu_cache_dir, prior_steps) -> None:  # type: ignore[no-untyped-def]
    runner = start(gpu_cache_dir, prior_steps=prior_steps)
    assert runner.tier == "graph"
    assert isinstance(runner.serving_tier.run(), PackedOutputs)  # chunk and mean: one download
    torch.cuda.synchronize()
    graph, memory = [], None
    for seed in range(12):  # a different observation every step, memory carried
        prediction = runner.predict({}, context(seed, memory))
        graph.append(prediction)
        memory = dict(prediction.memory or {})
    runner.use_tier("eager_fp32")
    memory = None
    for seed, served in enumerate(graph):
        reference = runner.predict({}, context(seed, memory))
        np.testing.assert_allclose(served.actions, reference.actions, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(served.memory[MEAN], reference.memory[MEAN], rtol=1e-3,
                                   atol=1e-4)  # fmt: skip
        memory = dict(reference.memory or {})
    assert runner.status()["steps"] == 24 and not runner.demotions


def test_a_nan_from_the_graph_tier_still_demotes_it(gpu_cache_dir) -> None:  # type: ignore[no-untyped-def]
    runner = start(gpu_cache_dir, faults={"graph": FaultPlan(nan_on={1})})
    runner.predict({}, context(0))
    prediction = runner.predict({}, context(1))  # NaN from graph: re-run on compiled
    assert np.isfinite(prediction.actions).all()
    assert runner.tier == "compiled"
    assert [d.cause for d in runner.demotions] == ["non_finite"]
