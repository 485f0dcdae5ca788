"""Diffusion Policy on a GPU: the whole step, its denoising loop and the noise it draws
included, captured as one CUDA graph (DDPM's 100 steps and DDIM's 10, as the checkpoint's
scheduler config says); every tier checked against eager FP32 on the fixed noise bank; fresh
noise from the device's generator on every replay; a robot's past frames served without
recompiles or demotions."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from controller.inference.runner import Runner  # noqa: E402
from controller.runner_config import RunnerConfig  # noqa: E402
from policies.base import RobotContext  # noqa: E402
from policies.diffusion.codec import FIXED_NOISE  # noqa: E402
from policies.diffusion.config import DiffusionConfig  # noqa: E402
from policies.diffusion.demo import make_diffusion_policy  # noqa: E402
from policies.inputs import example_frames  # noqa: E402

pytestmark = pytest.mark.gpu

# PushT's shapes (one camera 96x96 cropped to 84x84, 2 obs steps, horizon 16) at reduced U-Net
# widths, so the suite compiles in minutes; the loop is the real one.
SMALL = dict(
    n_cameras=1, image_height=96, image_width=96, crop_shape=(84, 84), use_group_norm=True,
    state_dim=2, action_dim=2, n_obs_steps=2, horizon=16, n_action_steps=8,
    down_dims=(64, 128, 256),
)  # fmt: skip


def start(cache_dir, scheduler: str, steps: int | None) -> Runner:  # type: ignore[no-untyped-def]
    config = DiffusionConfig(
        **SMALL,  # type: ignore[arg-type]
        noise_scheduler_type=scheduler,  # type: ignore[arg-type]
        num_inference_steps=steps,
    )
    policy = make_diffusion_policy(config, ["top"])
    runner_config = RunnerConfig(cache_dir=cache_dir, step_budget_ms=None, parity_observations=4)
    runner = Runner(policy, runner_config, device="cuda")
    runner.start()
    return runner


@pytest.fixture(scope="module", params=[("DDPM", None), ("DDIM", 10)], ids=["ddpm100", "ddim10"])
def runner(request, gpu_cache_dir) -> Runner:  # type: ignore[no-untyped-def]
    return start(gpu_cache_dir, *request.param)


def context(step: int, past: dict | None, fixed: bool) -> RobotContext:
    state = np.random.default_rng(step).uniform(-1, 1, (2, 2)).astype(np.float32)
    memory = {FIXED_NOISE: np.ones(1, np.float32)} if fixed else {}
    return RobotContext(step=step, episode_start=past is None, state_history=state,
                        memory=memory, past_frames=past)  # fmt: skip


def test_every_tier_passes_parity_and_the_graph_serves(runner: Runner) -> None:
    assert runner.tier == "graph"
    assert runner.ready_tiers == ["graph", "compiled", "eager_half", "eager_fp32"]
    for tier in runner.status()["tiers"]:  # type: ignore[union-attr]
        assert tier["state"] == "ready", tier


def test_replays_draw_fresh_noise_and_fixed_noise_matches_eager(runner: Runner) -> None:
    images = example_frames(runner.spec, 3)
    past = {"top": example_frames(runner.spec, 4)["top"][None]}
    runner.use_tier("graph")
    a = runner.predict(images, context(1, past, fixed=False)).actions
    b = runner.predict(images, context(1, past, fixed=False)).actions
    assert not np.array_equal(a, b)  # the device generator advances inside the graph
    graph = runner.predict(images, context(2, past, fixed=True)).actions
    runner.use_tier("eager_fp32")
    eager = runner.predict(images, context(2, past, fixed=True)).actions
    runner.use_tier("graph")
    scale = float(np.abs(eager).max())
    assert float(np.abs(graph - eager).max()) <= 2e-2 * scale  # FP16 against FP32


def test_steps_with_past_frames_serve_from_the_graph_without_demotion(runner: Runner) -> None:
    runner.use_tier("graph")
    past = None
    for step in range(30):
        images = example_frames(runner.spec, step)
        prediction = runner.predict(images, context(step, past, fixed=step % 2 == 0))
        assert prediction.actions.shape == (15, 2) and np.isfinite(prediction.actions).all()
        past = {"top": images["top"][None]}
    assert runner.tier == "graph" and not runner.demotions
