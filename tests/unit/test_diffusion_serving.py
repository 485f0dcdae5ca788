"""Diffusion Policy as the runner serves it: the codec's inputs from a robot's context (the past
observations' frames, fixed or fresh noise), the model reading every observation step's frames,
the sampler the checkpoint's scheduler config asks for, and the whole step traceable as one
graph (no host read, no branch on a tensor's value: what a CUDA graph needs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from controller.errors import ConfigError
from policies.base import RobotContext
from policies.diffusion.codec import FIXED_NOISE, DiffusionCodec, with_fixed_noise
from policies.diffusion.config import DiffusionConfig
from policies.diffusion.demo import TINY_WIDTHS, make_demo_diffusion_policy, make_diffusion_policy
from policies.diffusion.family import serve_noise_setting
from policies.diffusion.model import DiffusionPolicy
from policies.diffusion.scheduler import Sampler
from policies.inputs import example_frames
from policies.tensor_policy import EagerPolicy, TensorPolicy

CAMERAS = (("left", 64, 96), ("right", 64, 96))  # a 2x3 feature map


@pytest.fixture(scope="module")
def policy() -> TensorPolicy:
    torch.set_num_threads(1)
    return make_demo_diffusion_policy(
        cameras=CAMERAS, joint_names=("a", "b", "c"), state_size=3, scheduler="DDIM", steps=4
    )


def context(past: dict[str, np.ndarray] | None, fixed: bool = True) -> RobotContext:
    state = np.linspace(-0.5, 0.5, 6, dtype=np.float32).reshape(2, 3)
    memory = {FIXED_NOISE: np.ones(1, np.float32)} if fixed else {}
    return RobotContext(step=3, episode_start=False, state_history=state, memory=memory,
                        past_frames=past)  # fmt: skip


def test_the_spec_asks_the_session_for_every_observation_steps_frames(policy) -> None:
    assert policy.spec.frame_history == 2 and policy.spec.state_history == 2
    names = [i.name for i in policy.inputs.inputs]
    assert names == ["state", "past_frames", "has_past", "fixed_noise"]
    assert policy.inputs.inputs[1].shape == (1, 2, 64, 96, 3)
    assert policy.inputs.inputs[1].dtype == "uint8"


def test_the_codec_writes_past_frames_in_camera_order(policy) -> None:
    codec = policy.inputs
    out = [np.zeros(i.shape, i.dtype) for i in codec.inputs]
    past = {
        name: np.full((1, 64, 96, 3), i + 1, np.uint8) for i, (name, _, _) in enumerate(CAMERAS)
    }
    codec.encode(context(past), out)
    assert out[1][0, 0].max() == 1 and out[1][0, 1].min() == 2
    assert out[2][0] == 1.0 and out[3][0] == 1.0
    codec.encode(context(None, fixed=False), out)
    assert out[2][0] == 0.0 and out[3][0] == 0.0
    with pytest.raises(ValueError, match="lack camera 'right'"):
        codec.encode(context({"left": past["left"]}), out)
    with pytest.raises(ValueError, match="expected uint8"):
        codec.encode(context({**past, "right": past["right"][:, :8]}), out)


def test_the_past_frames_change_the_chunk_and_none_means_this_ones(policy) -> None:
    eager = EagerPolicy(policy)
    images = example_frames(policy.spec, 1)
    copies = {name: frame[None] for name, frame in images.items()}
    other = {name: 255 - frame[None] for name, frame in images.items()}
    without = eager.predict(images, context(None)).actions
    np.testing.assert_array_equal(eager.predict(images, context(copies)).actions, without)
    assert not np.allclose(eager.predict(images, context(other)).actions, without, atol=1e-4)


def test_fresh_noise_differs_per_chunk_fixed_noise_and_the_setting_do_not(policy) -> None:
    eager = EagerPolicy(policy)
    images = example_frames(policy.spec, 2)
    fresh = [eager.predict(images, context(None, fixed=False)).actions for _ in range(2)]
    assert not np.allclose(fresh[0], fresh[1])
    fixed = eager.predict(images, context(None)).actions
    served = EagerPolicy(with_fixed_noise(policy))
    np.testing.assert_array_equal(served.predict(images, context(None, fixed=False)).actions, fixed)


def test_the_noise_setting_is_refused_for_another_family() -> None:
    from policies.tiny.family import FAMILY as TINY  # noqa: F401 - any non-diffusion policy

    class Settings:
        path = "elsewhere"

        def section(self, name: str) -> object:
            return type("S", (), {"noise": "fixed"})()

    other = replace(make_flow_like(), codec=None)
    with pytest.raises(ConfigError, match="policy.diffusion applies to Diffusion Policy"):
        serve_noise_setting(other, Settings())  # type: ignore[arg-type]


def make_flow_like() -> TensorPolicy:
    from policies.flow.demo import make_demo_flow_policy

    return make_demo_flow_policy(dim_model=16, chunk_size=4, n_steps=2)


@pytest.mark.parametrize(
    ("scheduler", "steps", "expected_steps", "draws"),
    [("DDPM", None, 100, 100), ("DDIM", 10, 10, 1), ("DDPM", 25, 25, 25)],
)
def test_the_sampler_runs_what_the_scheduler_config_says(scheduler, steps, expected_steps, draws):
    config = DiffusionConfig(
        n_cameras=1, image_height=8, image_width=8, state_dim=2, action_dim=2,
        noise_scheduler_type=scheduler, num_inference_steps=steps, **TINY_WIDTHS,
    )  # fmt: skip
    sampler = Sampler(config)
    assert sampler.steps == expected_steps and sampler.draws == draws
    assert sampler.step_t.tolist()[0] == (expected_steps - 1) * (100 // expected_steps)
    assert sampler.step_t.tolist()[-1] == 0


def test_a_scheduler_type_tempo_does_not_serve_is_one_sentence() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="'DDPM' or 'DDIM'"):
        DiffusionConfig(
            n_cameras=1, image_height=8, image_width=8, state_dim=2, action_dim=2,
            noise_scheduler_type="DPMSolver",  # type: ignore[arg-type]
        )  # fmt: skip


@pytest.mark.parametrize("scheduler", ["DDPM", "DDIM"])
def test_the_whole_step_traces_as_one_graph(scheduler: str) -> None:
    """fullgraph: a graph break (a .item(), a branch on a tensor's value, a host copy) fails."""
    config = DiffusionConfig(
        n_cameras=1, image_height=16, image_width=16, state_dim=2, action_dim=2,
        n_obs_steps=2, noise_scheduler_type=scheduler, num_train_timesteps=20,
        num_inference_steps=5, **TINY_WIDTHS,
    )  # fmt: skip
    module = make_diffusion_policy(config, ["cam"]).module
    assert isinstance(module, DiffusionPolicy)
    frames = torch.randint(0, 256, (2, 1, 16, 16, 3), dtype=torch.uint8)
    past = torch.randint(0, 256, (2, 1, 1, 16, 16, 3), dtype=torch.uint8)
    inputs = (frames, torch.randn(2, 2, 2), past, torch.tensor([[1.0], [0.0]]), torch.ones(2, 1))
    torch._dynamo.reset()
    regions: list[int] = []

    def backend(graph: torch.fx.GraphModule, example: object) -> object:
        regions.append(len(list(graph.named_children())))  # nested compile regions
        return graph.forward

    traced = torch.compile(module, backend=backend, fullgraph=True)
    with torch.no_grad():
        np.testing.assert_allclose(traced(*inputs).numpy(), module(*inputs).numpy(), atol=1e-5)
        fresh = (*inputs[:-1], torch.zeros(2, 1))
        assert not torch.allclose(traced(*fresh), traced(*fresh))  # drawn inside the graph
    # One graph; the denoising step traced once as a region that every step calls (DDPM's
    # last step draws no noise but reads zeros of the same shape: the same region).
    assert regions == [1], regions


def test_codec_examples_cover_both_kinds_of_context(policy) -> None:
    codec = policy.inputs
    assert isinstance(codec, DiffusionCodec)
    examples = [codec.example(seed) for seed in range(2)]
    assert examples[0].past_frames is None and examples[1].past_frames is not None
    assert all(FIXED_NOISE in e.memory for e in examples)
