"""The tier ladder on the CPU, with a tiny conv + MLP policy.

The first test that compiles pays a cold inductor compile of the tiny model (~15-25 s on a 2-core
CPU); later runners in the same process reuse dynamo's compiled code (same module class and
shapes) and start in about a second.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.errors import PolicyError  # noqa: E402
from controller.inference.examples import random_observation  # noqa: E402
from controller.inference.faults import FaultPlan  # noqa: E402
from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import Policy, RobotContext  # noqa: E402
from policies.tensor_policy import EagerPolicy  # noqa: E402
from policies.tiny import build_tiny_policy  # noqa: E402

ALWAYS = range(0, sys.maxsize)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One compile cache for the module; torch's process-wide cache setting restored after."""
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    yield tmp_path_factory.mktemp("compile-cache")
    if saved is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved


def make_runner(cache_dir, faults=None, seed=0, **settings) -> Runner:  # type: ignore[no-untyped-def]
    # No step budget unless a test is about the budget: a loaded CI machine must not demote.
    settings.setdefault("step_budget_ms", None)
    # The whole ladder: `auto` would start a CPU at eager_fp32.
    settings.setdefault("top_tier", "graph")
    config = RunnerConfig(
        cache_dir=cache_dir, parity_observations=3, **{"serve_slower_tiers": True, **settings}
    )
    return Runner(build_tiny_policy(seed=seed), config, device="cpu", faults=faults)


def started(cache_dir, faults=None, **settings) -> Runner:  # type: ignore[no-untyped-def]
    runner = make_runner(cache_dir, faults, **settings)
    runner.start()
    return runner


def reference_chunk(seed: int, observation) -> np.ndarray:  # type: ignore[no-untyped-def]
    return EagerPolicy(build_tiny_policy(seed=seed)).predict_chunk(*observation)


def test_auto_top_tier_serves_eager_fp32_on_a_cpu(cache_dir) -> None:
    runner = started(cache_dir, top_tier="auto")
    assert runner.tier == "eager_fp32" and runner.ready_tiers == ["eager_fp32"]


def test_cpu_ladder_starts_at_compiled_and_matches_the_reference(cache_dir) -> None:
    messages: list[str] = []
    runner = make_runner(cache_dir)
    assert isinstance(runner, Policy)
    runner.start(progress=messages.append)
    assert runner.tier == "compiled"
    assert runner.ready_tiers == ["compiled", "eager_fp32"]
    tiers = {t["name"]: t for t in runner.status()["tiers"]}  # type: ignore[union-attr]
    assert tiers["graph"]["state"] == "skipped" and "CUDA" in tiers["graph"]["reason"]
    assert tiers["eager_half"]["state"] == "skipped"
    assert tiers["compiled"]["parity_error"] < 1e-4
    assert any("ready" in m and "compiled" in m for m in messages)
    observation = random_observation(runner.spec, 42)
    chunk = runner.predict_chunk(*observation)
    assert chunk.shape == (10, 6) and chunk.dtype == np.float32
    np.testing.assert_allclose(chunk, reference_chunk(0, observation), rtol=1e-4, atol=1e-4)
    cache = runner.status()["compile_cache"]
    assert (cache_dir / f"megacache-{cache['key']}.bin").exists()  # type: ignore[index]


def test_fast_start_serves_eager_fp32_without_compiling(cache_dir) -> None:
    runner = make_runner(cache_dir, top_tier="eager_fp32")
    began = time.perf_counter()
    runner.start()
    assert time.perf_counter() - began < 5
    assert runner.tier == "eager_fp32" and runner.status()["compile_cache"] is None
    observation = random_observation(runner.spec, 7)
    np.testing.assert_array_equal(
        runner.predict_chunk(*observation), reference_chunk(0, observation)
    )


def test_eager_fp32_is_checked_by_the_reference_pass_not_run_again(cache_dir) -> None:
    # The reference pass is eager FP32 on the parity observations: running the eager_fp32
    # tier over them again (plus warm-up) would double a slow model's start.
    runner = make_runner(cache_dir, top_tier="eager_fp32", warmup_steps=2)
    steps: list[int] = []
    runner.module.register_forward_hook(lambda *_: steps.append(1))
    messages: list[str] = []
    runner.start(progress=messages.append)
    assert len(steps) == 3  # parity_observations, once
    report = runner.status()["tiers"][0]  # type: ignore[index]
    assert report["name"] == "eager_fp32" and report["state"] == "ready"
    assert report["parity_error"] == 0.0 and report["step_s"] > 0
    phases = runner.status()["start_phases"]  # type: ignore[index]
    assert list(phases) == ["weights", "reference", "eager_fp32", "the rest"]
    assert any("reference" in m and "eager_fp32" in m and "started in" in m for m in messages)


def test_a_faulty_eager_fp32_is_still_checked_on_its_own(cache_dir) -> None:
    runner = make_runner(
        cache_dir, faults={"eager_fp32": FaultPlan(start_error=0.5)}, top_tier="eager_fp32"
    )
    with pytest.raises(PolicyError, match="eager_fp32"):
        runner.start()


def test_tier_forced_wrong_fails_parity_and_is_skipped(cache_dir) -> None:
    runner = started(cache_dir, faults={"compiled": FaultPlan(start_error=0.5)})
    assert runner.tier == "eager_fp32"
    compiled = runner.status()["tiers"][1]  # type: ignore[index]
    assert compiled["state"] == "skipped" and "parity error" in compiled["reason"]


def test_small_error_within_tolerance_passes(cache_dir) -> None:
    runner = started(cache_dir, faults={"compiled": FaultPlan(start_error=1e-3)})
    assert runner.tier == "compiled"


@pytest.mark.parametrize(
    ("plan", "reason"),
    [(FaultPlan(start_nan=True), "non-finite"), (FaultPlan(fail_build=True), "injected build")],
)
def test_non_finite_or_failed_build_is_skipped(cache_dir, plan, reason) -> None:
    runner = started(cache_dir, faults={"compiled": plan})
    assert runner.tier == "eager_fp32"
    assert reason in runner.status()["tiers"][1]["reason"]  # type: ignore[index]


def test_all_tiers_failing_raises_policy_error(cache_dir) -> None:
    faults = {"compiled": FaultPlan(fail_build=True), "eager_fp32": FaultPlan(start_error=1.0)}
    runner = make_runner(cache_dir, faults)
    with pytest.raises(PolicyError, match="no inference tier passed") as info:
        runner.start()
    assert "compiled: InjectedFault" in str(info.value) and "eager_fp32: ValueError" in str(
        info.value
    )
    with pytest.raises(PolicyError, match="not started"):
        runner.predict_chunk(*random_observation(runner.spec, 1))


@pytest.mark.parametrize(
    ("plan", "cause"),
    [(FaultPlan(raise_on={2}), "exception"), (FaultPlan(nan_on={2}), "non_finite")],
)
def test_failure_demotes_and_the_step_is_rerun_on_the_next_tier(cache_dir, plan, cause) -> None:
    runner = started(cache_dir, faults={"compiled": plan})
    observations = [random_observation(runner.spec, 100 + i) for i in range(4)]
    chunks = [runner.predict_chunk(*obs) for obs in observations]
    assert runner.tier == "eager_fp32"
    for observation, chunk in zip(observations, chunks, strict=True):
        assert np.isfinite(chunk).all()
        np.testing.assert_allclose(chunk, reference_chunk(0, observation), rtol=1e-4, atol=1e-4)
    (demotion,) = runner.demotions
    assert (demotion.from_tier, demotion.to_tier, demotion.cause) == (
        "compiled",
        "eager_fp32",
        cause,
    )
    status = runner.status()
    assert status["failed_steps"] == 1 and status["reruns"] == 1 and status["steps"] == 4
    assert status["demotions"][0]["cause"] == cause  # type: ignore[index]
    json.dumps(status)


class FakeClock:
    """Step times without the machine's load in them: only injected slowness counts."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_k_overruns_in_n_steps_demote(cache_dir) -> None:
    clock = FakeClock()
    # 5 s on the fake clock, costing no real time: a demotion is held back when the tier below
    # took longer at start-up (timed for real), which a loaded machine made 60 ms reach.
    plan = FaultPlan(slow_on={1, 4}, slow_s=5.0, sleep=clock.advance)
    config = RunnerConfig(
        cache_dir=cache_dir,
        top_tier="compiled",
        serve_slower_tiers=True,
        step_budget_ms=40,
        overrun_k=2,
        overrun_n=5,
    )
    runner = Runner(
        build_tiny_policy(), config, device="cpu", faults={"compiled": plan}, clock=clock
    )
    runner.start()
    observation = random_observation(runner.spec, 5)
    for _ in range(4):
        runner.predict_chunk(*observation)
    assert runner.tier == "compiled"  # one overrun so far
    runner.predict_chunk(*observation)  # call 4: the second overrun within 5 steps
    assert runner.tier == "eager_fp32"
    (demotion,) = runner.demotions
    assert demotion.cause == "overrun" and "2 of the last 5" in demotion.detail
    assert runner.status()["overruns"] == 2


def test_overruns_spread_wider_than_n_steps_do_not_demote(cache_dir) -> None:
    clock = FakeClock()
    plan = FaultPlan(slow_on={0, 5, 10}, slow_s=0.06, sleep=clock.advance)
    config = RunnerConfig(
        cache_dir=cache_dir,
        top_tier="compiled",
        serve_slower_tiers=True,
        step_budget_ms=40,
        overrun_k=2,
        overrun_n=5,
    )
    runner = Runner(
        build_tiny_policy(), config, device="cpu", faults={"compiled": plan}, clock=clock
    )
    runner.start()
    observation = random_observation(runner.spec, 6)
    for _ in range(12):
        runner.predict_chunk(*observation)
    assert runner.tier == "compiled" and runner.status()["overruns"] == 3


def test_failed_step_is_not_rerun_past_the_budget(cache_dir) -> None:
    # Every step is "over" a 1 us budget; k = n = 1000 keeps overruns from demoting on their own.
    runner = started(
        cache_dir,
        faults={"compiled": FaultPlan(raise_on={0})},
        step_budget_ms=0.001,
        overrun_k=1000,
        overrun_n=1000,
    )
    observation = random_observation(runner.spec, 9)
    with pytest.raises(PolicyError, match="not re-run"):
        runner.predict_chunk(*observation)
    assert runner.tier == "eager_fp32"
    assert np.isfinite(runner.predict_chunk(*observation)).all()


def test_bottom_tier_failure_raises_and_keeps_serving(cache_dir) -> None:
    runner = started(
        cache_dir, faults={"eager_fp32": FaultPlan(raise_on={0})}, top_tier="eager_fp32"
    )
    observation = random_observation(runner.spec, 3)
    with pytest.raises(PolicyError, match="no lower tier"):
        runner.predict_chunk(*observation)
    assert np.isfinite(runner.predict_chunk(*observation)).all()
    assert runner.status()["failed_steps"] == 1 and runner.demotions == []


def test_repromotion_after_cooldown_through_fresh_parity(cache_dir) -> None:
    runner = started(
        cache_dir, faults={"compiled": FaultPlan(raise_on={0})}, repromote_after_s=0.05
    )
    observation = random_observation(runner.spec, 11)
    runner.predict_chunk(*observation)
    assert runner.tier == "eager_fp32"
    time.sleep(0.06)
    chunk = runner.predict_chunk(*observation)
    assert runner.tier == "compiled"
    np.testing.assert_allclose(chunk, reference_chunk(0, observation), rtol=1e-4, atol=1e-4)
    (promotion,) = runner.status()["promotions"]  # type: ignore[misc]
    assert promotion["to_tier"] == "compiled" and promotion["cause"] == "repromoted"


def test_repromotion_refused_when_parity_fails(cache_dir) -> None:
    plan = FaultPlan(raise_on={0}, nan_on=range(1, sys.maxsize))
    runner = started(cache_dir, faults={"compiled": plan})
    observation = random_observation(runner.spec, 12)
    runner.predict_chunk(*observation)
    assert runner.try_repromote() is False and runner.tier == "eager_fp32"


def test_recompile_after_start_is_an_error_not_a_stall(cache_dir) -> None:
    runner = started(cache_dir)
    observation = random_observation(runner.spec, 13)
    runner.predict_chunk(*observation)
    runner.module.train()  # changes a guard: would silently recompile without the stance
    try:
        chunk = runner.predict_chunk(*observation)
    finally:
        runner.module.eval()
    assert np.isfinite(chunk).all()  # re-run on eager_fp32, which the stance does not affect
    (demotion,) = runner.demotions
    assert demotion.cause == "exception" and "recompile" in demotion.detail.lower()


def test_the_no_recompile_stance_is_set_only_inside_serving_steps(cache_dir) -> None:
    runner = started(cache_dir)
    elsewhere = torch.compile(lambda x: x + 1, backend="eager", dynamic=False)
    elsewhere(torch.ones(2))
    elsewhere(torch.ones(3))  # a recompile outside the runner, once it serves: allowed
    runner.predict_chunk(*random_observation(runner.spec, 14))
    runner.predict_chunk(*random_observation(runner.spec, 15))  # the stance re-entered
    elsewhere(torch.ones(4))  # and after its steps
    assert runner.tier == "compiled" and not runner.demotions


def test_returned_chunks_are_owned_by_the_caller(cache_dir) -> None:
    runner = started(cache_dir)
    first = runner.predict_chunk(*random_observation(runner.spec, 20))
    kept = first.copy()
    runner.predict_chunk(*random_observation(runner.spec, 21))
    np.testing.assert_array_equal(first, kept)


def test_malformed_observation_is_a_value_error(cache_dir) -> None:
    runner = started(cache_dir, top_tier="eager_fp32")
    images, state = random_observation(runner.spec, 1)
    with pytest.raises(ValueError, match="cam1"):
        runner.predict_chunk({"cam0": images["cam0"]}, state)
    with pytest.raises(ValueError, match="state"):
        runner.predict_chunk(images, state.astype(np.float64))
    assert runner.status()["failed_steps"] == 0


def test_predict_is_a_pure_function_of_the_robots_context(cache_dir) -> None:
    runner = make_runner(cache_dir, top_tier="eager_fp32")
    runner.start()
    images, state = random_observation(runner.spec, 7)
    other = state + 1.0
    a = RobotContext(step=0, episode_start=True, state_history=state)
    b = RobotContext(step=5, episode_start=False, state_history=other)
    first = runner.predict(images, a).actions
    np.testing.assert_array_equal(first, runner.predict_chunk(images, state))
    assert not np.allclose(runner.predict(images, b).actions, first)  # the history matters
    np.testing.assert_array_equal(runner.predict(images, a).actions, first)  # nothing kept


class _Broken(torch.nn.Module):
    def forward(self, images, state):  # type: ignore[no-untyped-def]
        raise RuntimeError("shape mismatch in layer 3")


def test_a_model_broken_in_eager_fp32_is_a_policy_error(cache_dir) -> None:
    policy = build_tiny_policy()
    config = RunnerConfig(cache_dir=cache_dir)
    runner = Runner(type(policy)(policy.spec, _Broken()), config, device="cpu")
    with pytest.raises(PolicyError, match="eager FP32.*shape mismatch in layer 3"):
        runner.start()


def test_unknown_fault_tier_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tiers"):
        Runner(build_tiny_policy(), device="cpu", faults={"grpah": FaultPlan()})


def test_an_input_the_reference_fails_on_too_is_refused_and_demotes_nothing(cache_dir) -> None:
    """Fault attribution on the CPU `compiled` tier: a finite but huge state makes every tier,
    the FP32 reference included, return NaN. That is the input's fault: InputFault, counted, and
    the tier keeps serving. A NaN the reference does not share (injected into `compiled` on its
    next call) is the tier's fault: demoted, the step re-run."""
    from controller.errors import InputFault

    runner = started(cache_dir, faults={"compiled": FaultPlan(nan_on={1})}, top_tier="compiled")
    assert runner.tier == "compiled"
    images, state = random_observation(runner.spec, 21)
    huge = np.full_like(state, 3e38)  # finite; normalized, beyond float32
    with pytest.raises(InputFault, match="reference also returns NaN or Inf"):
        runner.predict_chunk(images, huge)
    status = runner.status()
    assert runner.tier == "compiled" and runner.demotions == []
    assert status["input_faults"] == 1 and status["failed_steps"] == 0

    chunk = runner.predict_chunk(images, state)  # call 1: the injected NaN, not the input's
    np.testing.assert_allclose(chunk, reference_chunk(0, (images, state)), rtol=1e-4, atol=1e-4)
    ((demotion),) = runner.demotions
    assert (demotion.from_tier, demotion.cause) == ("compiled", "non_finite")
    assert runner.status()["input_faults"] == 1


def test_an_act_with_cameras_of_different_shapes_is_served() -> None:
    """One staged frame tensor per camera shape, through the runner, equals the eager
    reference; the runner's start-up parity checks pass on it."""
    from policies.base import first_context
    from policies.demo import make_demo_policy
    from policies.inputs import example_frames

    cameras = (("top", 32, 48), ("wrist", 40, 40), ("side", 32, 48))
    policy = make_demo_policy(cameras=cameras, chunk_size=6, seed=2)
    config = RunnerConfig(top_tier="eager_fp32", warmup_steps=1, parity_observations=1)
    runner = Runner(policy, config, device="cpu")
    runner.start()
    images = example_frames(policy.spec, seed=5)
    context = first_context(policy.spec, np.linspace(-0.5, 0.5, 6, dtype=np.float32))
    served = runner.predict(images, context).actions
    reference = EagerPolicy(make_demo_policy(cameras=cameras, chunk_size=6, seed=2))
    np.testing.assert_allclose(served, reference.predict(images, context).actions, atol=1e-5)
