"""The flow-matching policy: its inference path, its checkpoint, its demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from controller.errors import CheckpointError
from policies.checkpoints.load import describe_checkpoint, load_checkpoint
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_demo_flow_policy
from policies.flow.config import FlowConfig
from policies.flow.model import FlowMatchingPolicy


def small_demo() -> tuple[FlowMatchingPolicy, tuple[torch.Tensor, ...]]:
    policy = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=8, dim_model=16)
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 1, 32, 32, 3), dtype=torch.uint8, generator=gen)
    state = torch.randn(2, 1, 6, generator=gen)
    noise = torch.randn(2, 8, 6, generator=gen)
    return policy.module, (images, state, noise)  # type: ignore[return-value]


def test_forward_is_encode_once_then_n_euler_steps_of_the_expert() -> None:
    module, (images, state, noise) = small_demo()
    calls = {"backbone": 0, "expert": 0}
    module.backbone.register_forward_hook(
        lambda *_: calls.__setitem__("backbone", calls["backbone"] + 1)
    )
    module.velocity_head.register_forward_hook(
        lambda *_: calls.__setitem__("expert", calls["expert"] + 1)
    )
    with torch.no_grad():
        out = module(images, state, noise)
        # The same path by hand: x <- x + v / n from the noise, then unnormalized.
        context = module.encode(images, state)
        x = noise
        for step in range(module.config.n_steps):
            x = x + module.velocity(x, step, context) / module.config.n_steps
        by_hand = module.action_norm.unnormalize(x)
    assert calls == {"backbone": 2, "expert": 2 * module.config.n_steps}
    torch.testing.assert_close(out, by_hand)
    assert out.shape == (2, 8, 6) and out.dtype == torch.float32


def test_pure_function_of_its_inputs_row_by_row() -> None:
    module, (images, state, noise) = small_demo()
    with torch.no_grad():
        both = module(images, state, noise)
        first = module(images[:1], state[:1], noise[:1])
        other_noise = module(images, state, torch.randn_like(noise))
    torch.testing.assert_close(both[:1], first, rtol=1e-5, atol=1e-5)
    assert (other_noise - both).abs().max() > 1e-3  # the noise is what makes chunks differ


def test_normalization_is_inside_the_module() -> None:
    module, (images, state, noise) = small_demo()
    with torch.no_grad():
        out = module(images, state, noise)
        module.action_norm.mean.add_(1.0)
        shifted = module(images, state, noise)
    torch.testing.assert_close(shifted - out, torch.ones_like(out))


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    policy = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=8, dim_model=16)
    directory = save_checkpoint(tmp_path / "flow", policy)
    config = json.loads((directory / "config.json").read_text())
    assert config["policy_type"] == "flow"
    loaded = load_checkpoint(directory)
    assert isinstance(loaded.module, FlowMatchingPolicy)
    assert loaded.spec == policy.spec
    _, (images, state, noise) = small_demo()
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.module(images, state, noise), policy.module(images, state, noise)
        )
    text = describe_checkpoint(directory)
    assert "policy type flow" in text and "10 Euler steps" in text


def test_checkpoint_refuses_an_unknown_policy_type_and_a_mismatched_spec(tmp_path: Path) -> None:
    policy = make_demo_flow_policy(cameras=(("front", 32, 32),), chunk_size=8, dim_model=16)
    directory = save_checkpoint(tmp_path / "flow", policy)
    path = directory / "config.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps(raw | {"policy_type": "no_such_family"}))
    with pytest.raises(CheckpointError, match="policy_type 'no_such_family'"):
        load_checkpoint(directory)
    raw["model"]["chunk_size"] = 9
    path.write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="chunk_size 8 in spec, 9 in model"):
        load_checkpoint(directory)


def test_config_refuses_heads_that_do_not_divide_the_width() -> None:
    with pytest.raises(ValueError, match="divisible by n_heads"):
        FlowConfig(
            n_cameras=1,
            image_height=32,
            image_width=32,
            state_dim=2,
            action_dim=2,
            dim_model=30,
            n_heads=4,
        )
