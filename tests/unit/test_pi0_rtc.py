"""Real-time chunking on pi0 and pi0.5 (tiny LeRobot directories, CPU, FP32): every mode's chunk
against a reference written here from the network's own `velocity` in pi0's time (1: noise),
as LeRobot's RTCProcessor and euler_integrate compute it; exact's correction against
torch.autograd; trained mode's clean rows and their per-token time; the refusals."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from controller.config import load_config
from controller.errors import ConfigError
from controller.inference.half_weights import copy_sharing_tensors
from policies.base import Plan
from policies.catalog import build_tensor_policy
from policies.flow.guided_sampling import GuidedChunkSampler
from policies.flow.settings import RTCConfig
from policies.inputs import example_frames, stack_frames
from policies.pi0.policy import read_pi0_policy
from policies.pi0.rtc import Pi0RealTimeChunking, serve_pi0_with_rtc
from policies.pi0.rtc_codec import Pi0RTCCodec
from policies.pi0.step import Pi0Step
from policies.tensor_policy import TensorPolicy

DATA = Path(__file__).resolve().parents[1] / "data"
FAMILIES = ("pi0", "pi05")
TRAINED_MAX_DELAY = 4


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is the faster here


@pytest.fixture(scope="module")
def policies() -> dict[str, TensorPolicy]:
    return {f: read_pi0_policy(DATA / f"{f}_lerobot_tiny", None).policy for f in FAMILIES}


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny pi0.5 as if trained with training-time RTC (its config says so)."""
    directory = tmp_path_factory.mktemp("trained") / "pi05"
    shutil.copytree(DATA / "pi05_lerobot_tiny", directory)
    config = json.loads((directory / "config.json").read_text())
    config["rtc_training_max_delay"] = TRAINED_MAX_DELAY
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def rtc_inputs(policy: TensorPolicy, delay: int, executed: int = 5) -> tuple[torch.Tensor, ...]:
    """The RTC step's batched inputs for one robot: example frames, state and prompt, and a
    previous plan of random actions (robot units) `executed` steps old, with `delay`."""
    step = policy.module
    assert isinstance(step, Pi0Step)
    codec = Pi0RTCCodec(policy.spec, step)
    rng = np.random.default_rng(delay)
    size = policy.spec.chunk_size
    center = step.action_norm.center.numpy()
    scale = step.action_norm.scale.numpy()
    raw = center + scale * rng.standard_normal((size, policy.spec.action_dim))
    context = codec.example(3)
    context = type(context)(
        step=100 + executed,
        episode_start=False,
        state_history=context.state_history,
        previous_plan=Plan(start_step=100, actions=raw.astype(np.float32)),
        inference_delay=delay,
        prompt=context.prompt,
    )
    out = [np.zeros(i.shape, i.dtype) for i in codec.inputs]
    codec.encode(context, out)
    arrays = stack_frames(policy.spec, example_frames(policy.spec, 3)) + out
    return tuple(torch.from_numpy(np.asarray(a))[None] for a in arrays)


def lerobot_weights(d: int, end: int, total: int) -> torch.Tensor:
    """LeRobot's RTCProcessor.get_prefix_weights, EXP schedule: ones for the first d rows, the
    exponential ramp over linspace(1, 0)'s inner points up to `end`, zeros after."""
    d = min(d, end)
    ramp = torch.linspace(1, 0, end - d + 2)[1:-1] if end > d else torch.zeros(0)
    ramp = ramp * torch.expm1(ramp) / (math.e - 1)
    return torch.cat([torch.ones(d), ramp, torch.zeros(total - end)])


def reference_chunk(
    rtc: Pi0RealTimeChunking,
    inputs: tuple[torch.Tensor, ...],
    mode: str,
    record: list | None = None,
) -> torch.Tensor:
    """The chunk as LeRobot computes it, in pi0's time, from the network's own `velocity`.
    `record` gets (time, correction) per step (exact and stop_grad)."""
    step, network = rtc.step, rtc.step.network
    groups = len(step.group_sizes)
    state, noise, prompt, prompt_mask, prefix, prefix_len, delay = inputs[groups:]
    images, image_masks, token_mask, pi0_state = step.prepare(inputs[:groups], state, prompt_mask)
    cache = network.encode_prefix(*network.embed_prefix(images, image_masks, prompt, token_mask))

    def velocity(x: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        if step.uses_state:
            return network.velocity(cache, pi0_state, x, time)
        return network.velocity(cache, x, time)

    normalized = (prefix - step.action_norm.center) / step.action_norm.scale
    target = F.pad(normalized, (0, network.config.max_action_dim - normalized.shape[-1]))
    d, valid = int(delay), int(prefix_len)
    total = network.config.chunk_size
    weights = lerobot_weights(d, min(valid, rtc.overlap_rows), total)[None, :, None]
    n = network.config.num_inference_steps
    dt = -1.0 / n
    hard = torch.arange(total) < min(d, valid, rtc.trained_max_delay)
    x = noise
    for k in range(n):
        time = 1.0 + k * dt
        batch_time = torch.full((1,), time)
        if mode == "trained":
            x = torch.where(hard[None, :, None], target, x)
            token_time = torch.where(hard[None], torch.zeros(1, total), batch_time[:, None])
            x = x + dt * velocity(x, token_time)
            x = torch.where(hard[None, :, None], target, x)
            continue
        if mode in ("exact", "stop_grad"):
            with torch.enable_grad():
                leaf = x.detach().requires_grad_(True)
                v = velocity(leaf if mode == "exact" else leaf.detach(), batch_time)
                predicted = leaf - time * v
                error = ((target - predicted) * weights).detach()
                (correction,) = torch.autograd.grad(predicted, leaf, error)
            tau = 1.0 - time
            weight = (
                rtc.beta
                if tau == 0
                else (1 - tau) / tau * ((1 - tau) ** 2 + tau**2) / (1 - tau) ** 2
            )
            v = v.detach() - min(weight, rtc.beta) * correction
            if record is not None:
                record.append((time, correction))
            x = x + dt * v
        else:
            x = x + dt * velocity(x, batch_time)
            if mode == "inpaint":
                t_next = 1.0 - (time + dt)
                x = x + weights * (t_next * target + (1 - t_next) * noise - x)
    return step.finish(x)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["exact", "stop_grad", "inpaint"])
def test_each_mode_is_the_reference_sampler(
    policies: dict[str, TensorPolicy], family: str, mode: str
) -> None:
    policy = policies[family]
    rtc = serve_pi0_with_rtc(policy, RTCConfig(mode=mode)).module
    assert isinstance(rtc, Pi0RealTimeChunking)
    assert (rtc.beta, rtc.overlap_rows) == (10.0, 10)  # LeRobot's defaults
    unguided = None
    for delay in (2, 6):
        inputs = rtc_inputs(policy, delay)
        with torch.no_grad():
            got = rtc(*inputs)
            unguided = policy.module(*inputs[:-3])
        expected = reference_chunk(rtc, inputs, mode)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert (got - unguided).abs().max() > 1e-2  # the guidance acted: equality means it


def exact_guidance(policy: TensorPolicy, delay: int) -> tuple[Any, ...]:
    """An exact-mode sampler of `policy` and what its guidance works on, for one observation
    with `delay`: (sampler, inputs, noise, context, target, mask)."""
    exact = Pi0RealTimeChunking(policy.module, RTCConfig(mode="exact"))
    inputs = rtc_inputs(policy, delay)
    groups = len(exact.step.group_sizes)
    state, noise, prompt, prompt_mask, prefix, prefix_len, delay_t = inputs[groups:]
    with torch.no_grad():
        context = exact.encode(inputs[:groups], state, prompt, prompt_mask)
        target = exact.guidance_target(prefix)
        mask = exact.guidance_mask(prefix_len, delay_t)
    return exact, inputs, noise, context, target, mask


@pytest.mark.parametrize("family", FAMILIES)
def test_pi0s_autograd_correction_is_the_samplers_vjp(
    policies: dict[str, TensorPolicy], family: str
) -> None:
    """pi0's exact takes its VJP with torch.autograd.grad (it runs through compiled layers);
    in FP32 it is the guided sampler's torch.func.vjp, step by step and over a whole chunk."""
    policy = policies[family]
    exact, inputs, noise, context, target, mask = exact_guidance(policy, 4)
    with torch.no_grad():
        actions = 0.3 * noise + 0.7 * target
        for step in (0, exact.n_steps - 1):
            got = exact.correction_exact(actions, step, context, target, mask)
            vjp = GuidedChunkSampler.correction_exact(exact, actions, step, context, target, mask)
            assert not got[0].requires_grad and not got[1].requires_grad
            torch.testing.assert_close(got, vjp, rtol=0, atol=1e-6)
            assert got[0].abs().max() > 1e-3  # a real correction, not zeros on both sides
        chunk = exact(*inputs)

    class VjpExact(Pi0RealTimeChunking):
        correction_exact = GuidedChunkSampler.correction_exact  # type: ignore[assignment]

    with torch.inference_mode():
        vjp_chunk = VjpExact(policy.module, RTCConfig(mode="exact"))(*inputs)
        inference_chunk = exact(*inputs)
    torch.testing.assert_close(chunk, vjp_chunk, rtol=0, atol=1e-6)
    torch.testing.assert_close(inference_chunk, chunk, rtol=0, atol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_correction_is_the_autograd_vjp_and_differs_from_stop_grad(
    policies: dict[str, TensorPolicy], family: str
) -> None:
    policy = policies[family]
    exact, inputs, noise, context, target, mask = exact_guidance(policy, 3)
    with torch.no_grad():
        actions = 0.6 * noise + 0.4 * target
        step = 4
        correction, velocity = exact.correction_exact(actions, step, context, target, mask)
    t = step / exact.n_steps
    with torch.enable_grad():
        leaf = actions.clone().requires_grad_(True)
        predicted = leaf + (1 - t) * exact.velocity(leaf, step, context)
        (expected,) = torch.autograd.grad(predicted, leaf, (mask * (target - predicted)).detach())
    torch.testing.assert_close(correction, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(velocity, exact.velocity(actions, step, context))
    stop_grad = mask * (target - (actions + (1 - t) * velocity))
    assert (correction - stop_grad).abs().max() > 1e-3  # the Jacobian is not the identity
    with torch.no_grad():
        chunks = [
            Pi0RealTimeChunking(policy.module, RTCConfig(mode=m))(*inputs)
            for m in ("exact", "stop_grad")
        ]
    assert (chunks[0] - chunks[1]).abs().max() > 1e-4


def test_trained_keeps_the_previous_chunk_with_clean_time_per_token(trained_dir: Path) -> None:
    policy = read_pi0_policy(trained_dir, None).policy
    rtc = serve_pi0_with_rtc(policy, RTCConfig(mode="trained")).module
    assert isinstance(rtc, Pi0RealTimeChunking) and rtc.trained_max_delay == TRAINED_MAX_DELAY
    network = rtc.step.network
    times: list[torch.Tensor] = []
    embed = network.embed_suffix

    def spy(x_t: torch.Tensor, time: torch.Tensor, state: Any) -> Any:
        times.append(time.clone())
        return embed(x_t, time, state)

    network.embed_suffix = spy
    try:
        for delay in (3, 7):  # 7: beyond the training's maximum, capped at 4 rows
            inputs = rtc_inputs(policy, delay, executed=5)
            prefix = inputs[-3][0]
            times.clear()
            with torch.no_grad():
                got = rtc(*inputs)[0]
            rows = min(delay, TRAINED_MAX_DELAY)
            torch.testing.assert_close(got[:rows], prefix[:rows], rtol=1e-5, atol=1e-5)
            assert (got[rows] - prefix[rows]).abs().max() > 1e-2
            steps = network.config.num_inference_steps
            assert len(times) == steps
            for k, time in enumerate(times):
                assert time.shape == (1, network.config.chunk_size)
                assert torch.all(time[0, :rows] == 0)
                assert torch.all(time[0, rows:] == torch.tensor(1.0 + k * (-1.0 / steps)))
            network.embed_suffix = embed
            expected = reference_chunk(rtc, inputs, "trained")[0]
            network.embed_suffix = spy
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    finally:
        network.embed_suffix = embed


def served_config(path: Path, mode: str) -> Any:
    return load_config(
        None,
        [
            "policy.kind=checkpoint",
            f"policy.path={path}",
            f"policy.rtc.mode={mode}",
            "execution.ensemble=newest",
        ],
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_trained_is_refused_on_a_checkpoint_not_trained_for_it(family: str) -> None:
    config = served_config(DATA / f"{family}_lerobot_tiny", "trained")
    with pytest.raises(ConfigError, match="needs a pi0.5 checkpoint trained with") as caught:
        build_tensor_policy(config.policy, config.robot)
    assert "\n" not in str(caught.value)


def test_the_catalog_serves_pi0_with_rtc_and_pi05_trained(trained_dir: Path) -> None:
    config = served_config(DATA / "pi0_lerobot_tiny", "stop_grad")
    served = build_tensor_policy(config.policy, config.robot)
    assert isinstance(served.module, Pi0RealTimeChunking)
    assert isinstance(served.codec, Pi0RTCCodec)
    assert [i.name for i in served.codec.inputs][-3:] == ["prefix", "prefix_len", "delay"]
    config = served_config(trained_dir, "trained")
    served = build_tensor_policy(config.policy, config.robot)
    assert isinstance(served.module, Pi0RealTimeChunking) and served.module.rtc.mode == "trained"


def test_flow_refuses_trained() -> None:
    from policies.flow.rtc import serve_with_rtc
    from tests.unit.test_flow_serving import small_policy

    with pytest.raises(ValueError, match="needs a pi0.5 checkpoint"):
        serve_with_rtc(small_policy(), RTCConfig(mode="trained"))


def test_the_codec_aligns_the_previous_plan_as_the_flow_codec_does(
    policies: dict[str, TensorPolicy],
) -> None:
    policy = policies["pi0"]
    inputs = rtc_inputs(policy, 2, executed=5)
    plan_start, step = 100, 105
    prefix, prefix_len, delay = (t[0] for t in inputs[-3:])
    rng = np.random.default_rng(2)
    center = policy.module.action_norm.center.numpy()
    scale = policy.module.action_norm.scale.numpy()
    raw = center + scale * rng.standard_normal((policy.spec.chunk_size, policy.spec.action_dim))
    rows = policy.spec.chunk_size - (step - plan_start)
    assert int(prefix_len) == rows and int(delay) == 2
    np.testing.assert_allclose(prefix[:rows].numpy(), raw[step - plan_start :].astype(np.float32))
    assert not prefix[rows:].any()


@pytest.mark.parametrize("mode", ["exact", "stop_grad", "inpaint"])
def test_rtc_compiles_the_steps_layers_as_without_rtc(
    policies: dict[str, TensorPolicy], mode: str
) -> None:
    """The compiled tiers' regional compile reaches through the RTC wrapper to pi0's layers in
    every mode, and the chunk is the same."""
    policy = policies["pi0"]
    rtc = Pi0RealTimeChunking(copy_sharing_tensors(policy.module), RTCConfig(mode=mode))
    inputs = rtc_inputs(policy, delay=2)
    calls: list[str] = []

    def counting(function: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls.append(function.__name__)
            return function(*args, **kwargs)

        return wrapped

    with torch.no_grad():
        expected = rtc(*inputs)
        assert rtc.compile_regions(counting)
        got = rtc(*inputs)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert "joint_layer" in calls and "run_encoder_layer" in calls
