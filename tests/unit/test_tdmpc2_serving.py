"""TD-MPC2 served through the runner: the codec's inputs, the plan mean coming back as the
robot's memory, the warm start, parity on the codec's fixed-noise examples, and (one tiny
CPU compile) no recompiles while serving."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.base import RobotContext
from policies.tdmpc2.serving import FIXED_NOISE, MEAN, TDMPC2Codec, random_tdmpc2_policy, with_mode
from tests.unit.test_tdmpc2_planner import small_config


def context(state: np.ndarray, memory: dict | None = None, start: bool = False) -> RobotContext:
    return RobotContext(
        step=0, episode_start=start, state_history=state[None].astype(np.float32),
        memory=memory or {},
    )  # fmt: skip


def encode(codec: TDMPC2Codec, ctx: RobotContext) -> list[np.ndarray]:
    out = [np.full(i.shape, np.nan, dtype=i.dtype) for i in codec.inputs]
    codec.encode(ctx, out)
    return out


def test_codec_inputs() -> None:
    policy = random_tdmpc2_policy(small_config())
    codec = policy.inputs
    assert isinstance(codec, TDMPC2Codec) and codec.outputs == (MEAN,)
    state = np.arange(5, dtype=np.float32)
    mean = np.full((3, 3), 0.5, dtype=np.float32)
    obs, prev, start, fixed = encode(codec, context(state, {MEAN: mean}))
    np.testing.assert_array_equal(obs, state)
    np.testing.assert_array_equal(prev, mean)
    assert start[0] == 0.0 and fixed[0] == 0.0
    _, prev, start, _ = encode(codec, context(state, {MEAN: mean}, start=True))
    assert start[0] == 1.0 and not prev.any()  # episode start: no warm start
    _, prev, start, _ = encode(codec, context(state))
    assert start[0] == 1.0 and not prev.any()  # no memory yet: no warm start either
    assert encode(codec, context(state, {MEAN: mean, FIXED_NOISE: np.ones(1)}))[3][0] == 1.0
    with pytest.raises(ValueError, match="plan mean"):
        encode(codec, context(state, {MEAN: np.zeros((2, 3), dtype=np.float32)}))
    with pytest.raises(ValueError, match="state"):
        encode(codec, context(np.zeros(4, dtype=np.float32)))


def serve(top_tier: str, mode: str = "plan", **overrides: object) -> Runner:
    values: dict = dict(num_samples=32, num_pi_trajs=4, horizon=3) | overrides
    policy = random_tdmpc2_policy(small_config(**values))
    policy = with_mode(policy, mode)  # type: ignore[arg-type]
    config = RunnerConfig(
        top_tier=top_tier,  # type: ignore[arg-type]
        cache_dir=None,
        step_budget_ms=None,
        serve_slower_tiers=True,
    )
    runner = Runner(policy, config, device="cpu")
    runner.start()
    return runner


def test_runner_serves_the_plan_and_returns_the_mean_as_memory() -> None:
    runner = serve("eager_fp32")
    state = np.linspace(-1, 1, 5).astype(np.float32)
    first = runner.predict({}, context(state, start=True))
    assert first.actions.shape == (3, 3) and first.memory is not None
    assert first.memory[MEAN].shape == (3, 3)
    second = runner.predict({}, context(state, dict(first.memory)))
    assert np.isfinite(second.actions).all()
    status = runner.status()
    assert status["tier"] == "eager_fp32"


def test_fast_mode_runner() -> None:
    runner = serve("eager_fp32", mode="prior")
    state = np.zeros(5, dtype=np.float32)
    a = runner.predict({}, context(state, start=True))
    b = runner.predict({}, context(state, start=True))
    np.testing.assert_array_equal(a.actions, b.actions)  # the prior's mean: deterministic


def test_compiled_tier_serves_without_recompiles() -> None:
    runner = serve("compiled", num_samples=16, num_pi_trajs=2, num_elites=4, iterations=2)
    assert runner.status()["tier"] == "compiled"
    state = np.zeros(5, dtype=np.float32)
    memory: dict = {}
    for step in range(3):  # episode start, then warm starts: same shapes, no recompile
        prediction = runner.predict({}, context(state + step, memory, start=step == 0))
        memory = dict(prediction.memory or {})
    assert runner.status()["tier"] == "compiled"  # a recompile would have raised and demoted
    assert not runner.demotions
    torch.compiler.reset()


def test_policy_planner_section_selects_fast_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.errors import ConfigError
    from controller.policy_sections import PolicyConfig
    from policies.catalog import build_tensor_policy
    from policies.demo import make_demo_checkpoint, make_demo_tdmpc2_checkpoint

    path = make_demo_tdmpc2_checkpoint(tmp_path / "tdmpc2")
    section = PolicyConfig(kind="checkpoint", path=path, tdmpc2={"mode": "prior"})
    assert build_tensor_policy(section).module.config.mode == "prior"
    assert build_tensor_policy(PolicyConfig(kind="checkpoint", path=path)).module.config.mode == (
        "plan"
    )
    short = PolicyConfig(kind="checkpoint", path=path, tdmpc2={"prior_steps": 1})
    assert build_tensor_policy(short).module.config.prior_steps == 1
    too_long = PolicyConfig(kind="checkpoint", path=path, tdmpc2={"prior_steps": 64})
    with pytest.raises(ConfigError, match="policy.tdmpc2: .*prior_steps \\(64\\) must be at most"):
        build_tensor_policy(too_long)
    act = make_demo_checkpoint(tmp_path / "act")
    with pytest.raises(ConfigError, match="TD-MPC2 checkpoints"):
        build_tensor_policy(
            PolicyConfig(kind="checkpoint", path=act, tdmpc2={"fallback_budget_ms": 5})
        )
