"""Serving a flow policy: its codecs, RTC through the runner, the config, the profiling tools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from controller.config import load_config
from controller.errors import ConfigError
from controller.inference.parity import relative_error
from controller.inference.runner import Runner
from controller.runner_config import RunnerConfig
from policies.base import Plan, RobotContext
from policies.catalog import build_tensor_policy
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_demo_flow_policy
from policies.flow.codec import FlowCodec, RTCCodec
from policies.flow.rtc import RealTimeChunking, serve_with_rtc
from policies.flow.settings import RTCConfig
from policies.tensor_policy import EagerPolicy, TensorPolicy

H = 8


def small_policy() -> TensorPolicy:
    return make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=H, dim_model=16)


def host_arrays(codec: FlowCodec) -> list[np.ndarray]:
    return [np.zeros(i.shape, dtype=i.dtype) for i in codec.inputs]


def context(step: int, plan: Plan | None = None, delay: int = 0) -> RobotContext:
    history = np.full((1, 6), 0.1, np.float32)
    return RobotContext(step, plan is None, history, previous_plan=plan, inference_delay=delay)


def test_rtc_codec_aligns_the_previous_plan_with_the_new_observation() -> None:
    codec = RTCCodec(small_policy().spec)
    assert [i.name for i in codec.inputs] == ["state", "noise", "prefix", "prefix_len", "delay"]
    out = host_arrays(codec)
    plan = Plan(start_step=10, actions=np.arange(6 * 6, dtype=np.float32).reshape(6, 6))
    codec.encode(context(12, plan, delay=3), out)
    state, noise, prefix, prefix_len, delay = out
    np.testing.assert_array_equal(prefix[:4], plan.actions[2:])  # row 0 = step 12
    assert not prefix[4:].any() and int(prefix_len) == 4 and int(delay) == 3
    np.testing.assert_array_equal(state, np.float32(0.1))
    codec.encode(context(12), out)  # no plan: nothing to agree with
    assert int(out[3]) == 0 and not out[2].any()
    codec.encode(context(9, plan), out)  # the plan starts after the observation
    assert int(out[3]) == 0


def test_noise_is_a_function_of_the_step() -> None:
    codec = FlowCodec(small_policy().spec)
    a, b, c = host_arrays(codec), host_arrays(codec), host_arrays(codec)
    codec.encode(context(5), a)
    codec.encode(context(5), b)
    codec.encode(context(6), c)
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.allclose(a[1], c[1])
    assert abs(float(a[1].std()) - 1.0) < 0.5


def test_rtc_example_contexts_carry_a_plan_and_a_delay() -> None:
    codec = RTCCodec(small_policy().spec)
    out = host_arrays(codec)
    for seed in range(5):
        codec.encode(codec.example(seed), out)
        assert 1 <= int(out[3]) <= H and 0 <= int(out[4]) <= H - int(out[3])


@pytest.mark.parametrize("mode", ["exact", "stop_grad", "inpaint"])
def test_the_runner_serves_rtc_and_keeps_the_executed_prefix(mode: str) -> None:
    policy = serve_with_rtc(small_policy(), RTCConfig(mode=mode, beta=10.0))
    runner = Runner(policy, RunnerConfig(top_tier="eager_fp32", cache_dir=None), device="cpu")
    runner.start()
    images = {"front": np.full((32, 32, 3), 7, np.uint8)}
    first = runner.predict(images, context(10)).actions
    plan = Plan(start_step=12, actions=first[2:] + 0.2)  # what the robot still has to play
    guided = runner.predict(images, context(12, plan, delay=2)).actions
    unguided = serve_with_rtc(small_policy(), RTCConfig(mode="off"))
    plain = Runner(unguided, RunnerConfig(top_tier="eager_fp32", cache_dir=None), device="cpu")
    plain.start()
    free = plain.predict(images, context(12, plan, delay=2)).actions
    before = np.abs(free[:2] - plan.actions[:2]).max()
    after = np.abs(guided[:2] - plan.actions[:2]).max()
    assert after < 0.05 * before, (before, after)


def test_config_and_catalog_refuse_rtc_where_it_cannot_work(tmp_path: Path) -> None:
    off = load_config(None, ["policy.rtc.mode=off"]).policy.section("rtc")
    assert off.mode == "off"  # YAML's `off`
    with pytest.raises(ConfigError, match="execution.ensemble: newest"):
        load_config(None, ["policy.rtc.mode=exact"])
    config = load_config(None, ["policy.rtc.mode=exact", "execution.ensemble=newest"])
    with pytest.raises(ConfigError, match="reach has no flow"):
        build_tensor_policy(config.policy, config.robot)
    from policies.demo import make_demo_policy

    act = save_checkpoint(tmp_path / "act", make_demo_policy(cameras=(("front", 32, 32),)))
    config = load_config(
        None,
        [
            "policy.kind=checkpoint",
            f"policy.path={act}",
            "policy.rtc.mode=inpaint",
            "execution.ensemble=newest",
        ],
    )
    with pytest.raises(ConfigError, match="needs a flow policy"):
        build_tensor_policy(config.policy, config.robot)
    flow = save_checkpoint(tmp_path / "flow", small_policy())
    config = load_config(
        None,
        [
            "policy.kind=checkpoint",
            f"policy.path={flow}",
            "policy.rtc.mode=inpaint",
            "execution.ensemble=newest",
        ],
    )
    served = build_tensor_policy(config.policy, config.robot)
    assert isinstance(served.module, RealTimeChunking) and isinstance(served.codec, RTCCodec)


def test_profile_breaks_rtc_into_phases_and_compare_gives_a_verdict_per_mode(
    tmp_path: Path,
) -> None:
    from controller.tools.profiling import run_profile
    from controller.tools.rtc_compare import render_rtc_compare, run_rtc_compare

    flow = save_checkpoint(tmp_path / "flow", small_policy())
    settings = [
        "policy.kind=checkpoint",
        f"policy.path={flow}",
        "execution.ensemble=newest",
        "execution.query_period=4",
        "runner.top_tier=eager_fp32",
        "runner.cache_dir=null",
        "runner.step_budget_ms=null",
    ]
    config = load_config(None, [*settings, "policy.rtc.mode=exact"])
    result = run_profile(config, iterations=2, warmup=1)
    keys = {row.key for row in result.rows}
    assert {"phase:encode", "phase:base", "phase:guidance", "phase:autograd"} <= keys
    assert result.flow == {"rtc_mode": "exact", "chunk_size": H, "n_steps": 10}
    assert any(
        "execution.query_period" in text or "Execution horizon" in text
        for text in result.recommendations
    )
    compared = run_rtc_compare(load_config(None, settings), iterations=2, warmup=0)
    assert [m.mode for m in compared.modes] == ["off", "exact", "stop_grad", "inpaint"]
    text = render_rtc_compare(compared)
    for mode in ("exact", "stop_grad", "inpaint"):
        assert f"verdict rtc {mode}: " in text
    assert all(m.fits is not None for m in compared.modes)


def test_newest_execution_plays_the_old_chunk_for_d_steps_then_the_new_one() -> None:
    """RTC's execution is the ensembler's `newest` mode: no averaging, late rows dropped."""
    from controller.action.ensembler import ChunkEnsembler

    ensembler = ChunkEnsembler(H, 1, mode="newest")
    old = np.arange(H, dtype=np.float32)[:, None]
    new = 100 + np.arange(H, dtype=np.float32)[:, None]
    ensembler.add_chunk(0, old, 0)
    out = np.zeros(1)
    played = []
    d, s = 2, 4
    for step in range(s, s + 5):
        if step == s + d:  # the chunk of step s lands d steps late
            assert ensembler.add_chunk(s, new, step) == d  # its first d rows are past: dropped
        assert ensembler.action_at(step, out)
        played.append(float(out[0]))
    assert played == [4.0, 5.0, 102.0, 103.0, 104.0]


def test_rtc_exact_is_served_compiled_and_matches_the_reference_on_served_plans() -> None:
    """The compiled step (the VJP traced into it) against the eager FP32 reference a user gets
    (EagerPolicy), on the plans a robot's session hands over: its own previous chunk, delays
    0..4, long prefixes. Both must guide: a reference whose VJP vanished (older torch under
    inference_mode) would differ from the compiled chunk by the whole guidance."""
    small = make_demo_flow_policy(
        cameras=(("front", 32, 32),), chunk_size=H, dim_model=16, n_steps=3
    )
    served = serve_with_rtc(small, RTCConfig(mode="exact"))
    config = RunnerConfig(
        top_tier="compiled", serve_slower_tiers=True, step_budget_ms=None, cache_dir=None
    )
    runner = Runner(served, config, "cpu")
    runner.start()
    assert runner.tier == "compiled", runner.status()["tiers"]
    reference = EagerPolicy(served)
    unguided = EagerPolicy(serve_with_rtc(small, RTCConfig(mode="off")))
    rng = np.random.default_rng(0)
    images = {"front": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)}
    chunk = runner.predict(images, context(10)).actions
    step, moved = 10, []
    for d in [0, 1, 2, 3, 4, 2, 4]:
        step += 1  # one step executed: the prefix is H - 1 rows long
        plan = Plan(start_step=step - 1, actions=chunk)
        ctx = context(step, plan, delay=d)
        chunk = runner.predict(images, ctx).actions
        expected = reference.predict(images, ctx).actions
        assert relative_error(chunk, expected) < 1e-4, d
        moved.append(relative_error(expected, unguided.predict(images, ctx).actions))
    assert runner.demotions == []
    assert max(moved) > 1e-2  # the guidance acted, so the comparison above is not vacuous
