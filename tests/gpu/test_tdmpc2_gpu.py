"""TD-MPC2 on a GPU: the whole MPPI plan captured as one CUDA graph, parity of every tier with
eager FP32 on fixed noise, fresh device-generator noise on every replay, the plan mean carried
as memory without recompiles or demotions, fast mode in its own graph, and the reduced-precision
planners (TF32, BF16) passing their value-regret parity while eager FP32 stays true FP32."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import RobotContext  # noqa: E402
from policies.tdmpc2.config import TDMPC2Config  # noqa: E402
from policies.tdmpc2.planner import TDMPC2Policy  # noqa: E402
from policies.tdmpc2.serving import (  # noqa: E402
    FIXED_NOISE,
    MEAN,
    random_tdmpc2_policy,
    tdmpc2_policy,
    with_mode,
)

pytestmark = pytest.mark.gpu

CONFIG = TDMPC2Config(obs_dim=67, action_dim=21, model_size=1)  # humanoid, official planner


def start(cache_dir, mode: str = "plan") -> Runner:  # type: ignore[no-untyped-def]
    policy = with_mode(random_tdmpc2_policy(CONFIG), mode)  # type: ignore[arg-type]
    config = RunnerConfig(cache_dir=cache_dir, step_budget_ms=None, parity_observations=4)
    runner = Runner(policy, config, device="cuda")
    runner.start()
    return runner


@pytest.fixture(scope="module")
def planner(gpu_cache_dir) -> Runner:  # type: ignore[no-untyped-def]
    return start(gpu_cache_dir)


def context(seed: int, memory: dict | None = None, start: bool = False) -> RobotContext:
    state = np.random.default_rng(seed).standard_normal((1, CONFIG.obs_dim)).astype(np.float32)
    return RobotContext(step=seed, episode_start=start, state_history=state, memory=memory or {})


def test_every_tier_passes_fixed_noise_parity_and_the_graph_serves(planner: Runner) -> None:
    assert planner.tier == "graph"
    assert planner.ready_tiers == ["graph", "compiled", "eager_half", "eager_fp32"]
    for tier in planner.status()["tiers"]:  # type: ignore[union-attr]
        # compute fp32: every tier plans in FP32 and makes the reference's elite choices
        assert tier["state"] == "ready" and tier["parity_error"] <= 1e-3, tier


def test_replays_draw_fresh_noise_and_fixed_noise_matches_eager(planner: Runner) -> None:
    mean = np.zeros((CONFIG.horizon, CONFIG.action_dim), dtype=np.float32)
    planner.use_tier("graph")
    a = planner.predict({}, context(1, {MEAN: mean})).actions
    b = planner.predict({}, context(1, {MEAN: mean})).actions
    assert not np.array_equal(a, b)  # the device generator advances inside the graph
    fixed = {MEAN: mean, FIXED_NOISE: np.ones(1, dtype=np.float32)}
    graph = planner.predict({}, context(2, fixed))
    planner.use_tier("eager_fp32")
    eager = planner.predict({}, context(2, fixed))
    planner.use_tier("graph")
    np.testing.assert_allclose(graph.actions, eager.actions, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(graph.memory[MEAN], eager.memory[MEAN], rtol=1e-4, atol=1e-4)


def test_warm_started_steps_serve_from_the_graph_without_demotion(planner: Runner) -> None:
    planner.use_tier("graph")
    memory: dict = {}
    for step in range(50):
        prediction = planner.predict({}, context(step, memory, start=step == 0))
        assert prediction.actions.shape == (CONFIG.horizon, CONFIG.action_dim)
        memory = dict(prediction.memory or {})
    assert planner.tier == "graph" and not planner.demotions


def test_fast_mode_graph(gpu_cache_dir) -> None:  # type: ignore[no-untyped-def]
    prior = start(gpu_cache_dir, mode="prior")
    assert prior.tier == "graph"
    a = prior.predict({}, context(3)).actions
    b = prior.predict({}, context(3)).actions
    np.testing.assert_array_equal(a, b)  # the prior's mean: no noise


@pytest.mark.parametrize("compute", ["tf32", "bf16"])
def test_reduced_precision_tiers_pass_value_regret_and_eager_fp32_stays_fp32(
    gpu_cache_dir, compute: str
) -> None:  # type: ignore[no-untyped-def]
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    fp32 = random_tdmpc2_policy(CONFIG)
    reduced = tdmpc2_policy(
        TDMPC2Policy(CONFIG.model_copy(update={"compute": compute}), model=fp32.module.model)
    )
    config = RunnerConfig(cache_dir=gpu_cache_dir, step_budget_ms=None, parity_observations=4)
    runner = Runner(reduced, config, device="cuda")
    runner.start()
    assert runner.tier == "graph"
    for tier in runner.status()["tiers"]:  # type: ignore[union-attr]
        assert tier["state"] == "ready" and tier["parity_error"] <= CONFIG.parity_regret, tier
    mean = np.zeros((CONFIG.horizon, CONFIG.action_dim), dtype=np.float32)
    fixed = {MEAN: mean, FIXED_NOISE: np.ones(1, dtype=np.float32)}
    runner.use_tier("eager_fp32")
    eager = runner.predict({}, context(5, fixed))
    assert torch.backends.cuda.matmul.allow_tf32 == tf32_before  # the tier scope restored it
    reference = Runner(fp32, RunnerConfig(top_tier="eager_fp32", cache_dir=None), device="cuda")
    reference.start()
    expected = reference.predict({}, context(5, fixed))
    np.testing.assert_allclose(eager.actions, expected.actions, rtol=1e-5, atol=1e-5)  # not TF32
