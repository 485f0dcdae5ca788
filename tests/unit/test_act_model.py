"""The ACT model: shapes and dtypes, layout of its weights, arithmetic of its parts."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from torch import nn

from policies.act.backbone import ResNet, feature_map_size
from policies.act.config import ACTConfig, camera_fields
from policies.act.model import ACT
from policies.act.preprocess import Normalizer, prepare_images, prepare_state
from policies.act.transformer import Attention, sinusoidal_position_embedding_2d
from policies.base import first_context
from policies.demo import make_demo_policy
from policies.inputs import example_frames, frame_groups
from policies.tensor_policy import EagerPolicy

# torchvision.models.resnet18(norm_layer=FrozenBatchNorm2d).state_dict() without fc.weight,
# fc.bias, in torchvision's order.
TORCHVISION_RESNET18_NAMES = [
    "conv1.weight",
    "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
    "layer1.0.conv1.weight",
    "layer1.0.bn1.weight", "layer1.0.bn1.bias", "layer1.0.bn1.running_mean",
    "layer1.0.bn1.running_var",
    "layer1.0.conv2.weight",
    "layer1.0.bn2.weight", "layer1.0.bn2.bias", "layer1.0.bn2.running_mean",
    "layer1.0.bn2.running_var",
    "layer1.1.conv1.weight",
    "layer1.1.bn1.weight", "layer1.1.bn1.bias", "layer1.1.bn1.running_mean",
    "layer1.1.bn1.running_var",
    "layer1.1.conv2.weight",
    "layer1.1.bn2.weight", "layer1.1.bn2.bias", "layer1.1.bn2.running_mean",
    "layer1.1.bn2.running_var",
    "layer2.0.conv1.weight",
    "layer2.0.bn1.weight", "layer2.0.bn1.bias", "layer2.0.bn1.running_mean",
    "layer2.0.bn1.running_var",
    "layer2.0.conv2.weight",
    "layer2.0.bn2.weight", "layer2.0.bn2.bias", "layer2.0.bn2.running_mean",
    "layer2.0.bn2.running_var",
    "layer2.0.downsample.0.weight",
    "layer2.0.downsample.1.weight", "layer2.0.downsample.1.bias",
    "layer2.0.downsample.1.running_mean", "layer2.0.downsample.1.running_var",
    "layer2.1.conv1.weight",
    "layer2.1.bn1.weight", "layer2.1.bn1.bias", "layer2.1.bn1.running_mean",
    "layer2.1.bn1.running_var",
    "layer2.1.conv2.weight",
    "layer2.1.bn2.weight", "layer2.1.bn2.bias", "layer2.1.bn2.running_mean",
    "layer2.1.bn2.running_var",
    "layer3.0.conv1.weight",
    "layer3.0.bn1.weight", "layer3.0.bn1.bias", "layer3.0.bn1.running_mean",
    "layer3.0.bn1.running_var",
    "layer3.0.conv2.weight",
    "layer3.0.bn2.weight", "layer3.0.bn2.bias", "layer3.0.bn2.running_mean",
    "layer3.0.bn2.running_var",
    "layer3.0.downsample.0.weight",
    "layer3.0.downsample.1.weight", "layer3.0.downsample.1.bias",
    "layer3.0.downsample.1.running_mean", "layer3.0.downsample.1.running_var",
    "layer3.1.conv1.weight",
    "layer3.1.bn1.weight", "layer3.1.bn1.bias", "layer3.1.bn1.running_mean",
    "layer3.1.bn1.running_var",
    "layer3.1.conv2.weight",
    "layer3.1.bn2.weight", "layer3.1.bn2.bias", "layer3.1.bn2.running_mean",
    "layer3.1.bn2.running_var",
    "layer4.0.conv1.weight",
    "layer4.0.bn1.weight", "layer4.0.bn1.bias", "layer4.0.bn1.running_mean",
    "layer4.0.bn1.running_var",
    "layer4.0.conv2.weight",
    "layer4.0.bn2.weight", "layer4.0.bn2.bias", "layer4.0.bn2.running_mean",
    "layer4.0.bn2.running_var",
    "layer4.0.downsample.0.weight",
    "layer4.0.downsample.1.weight", "layer4.0.downsample.1.bias",
    "layer4.0.downsample.1.running_mean", "layer4.0.downsample.1.running_var",
    "layer4.1.conv1.weight",
    "layer4.1.bn1.weight", "layer4.1.bn1.bias", "layer4.1.bn1.running_mean",
    "layer4.1.bn1.running_var",
    "layer4.1.conv2.weight",
    "layer4.1.bn2.weight", "layer4.1.bn2.bias", "layer4.1.bn2.running_mean",
    "layer4.1.bn2.running_var",
]  # fmt: skip


def tiny_config(**overrides: object) -> ACTConfig:
    values: dict[str, object] = dict(
        n_cameras=2,
        image_height=32,
        image_width=48,
        state_dim=3,
        action_dim=4,
        chunk_size=5,
        dim_model=16,
        n_heads=2,
        dim_feedforward=32,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=4,
    )
    values.update(overrides)
    return ACTConfig.model_validate(values)


@pytest.fixture(scope="module")
def model() -> ACT:
    torch.manual_seed(0)
    return ACT(tiny_config()).eval()


def inputs(config: ACTConfig, batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, config.n_cameras, config.image_height, config.image_width, 3)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    state = torch.randn(batch, config.state_history, config.state_size, generator=gen)
    return images, state


@torch.no_grad()
def test_forward_shapes_and_dtype(model: ACT) -> None:
    images, state = inputs(model.config, batch=3)
    actions = model(images, state)
    assert actions.shape == (3, 5, 4)
    assert actions.dtype == torch.float32
    assert torch.isfinite(actions).all()


@torch.no_grad()
def test_batch_items_are_independent(model: ACT) -> None:
    images, state = inputs(model.config, batch=2)
    both = model(images, state)
    first = model(images[:1], state[:1])
    torch.testing.assert_close(both[:1], first, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(both[0], both[1])


def test_backbone_names_match_torchvision_resnet18() -> None:
    assert list(ResNet("resnet18").state_dict()) == TORCHVISION_RESNET18_NAMES


def test_model_backbone_and_transformer_names(model: ACT) -> None:
    names = set(model.state_dict())
    assert {f"backbone.{n}" for n in TORCHVISION_RESNET18_NAMES} <= names
    for name in (
        "encoder.layers.0.self_attn.in_proj_weight",
        "encoder.layers.0.self_attn.out_proj.bias",
        "decoder.layers.0.multihead_attn.in_proj_bias",
        "decoder.layers.0.norm3.weight",
        "decoder.norm.weight",
        "encoder_img_feat_input_proj.weight",
        "encoder_latent_input_proj.weight",
        "encoder_robot_state_input_proj.weight",
        "encoder_1d_feature_pos_embed.weight",
        "decoder_pos_embed.weight",
        "action_head.weight",
    ):
        assert name in names
    assert "encoder.norm.weight" not in names  # post-norm encoders end without a LayerNorm
    assert not any(n.startswith("vae_encoder") for n in names)


def test_bottleneck_backbone_layout() -> None:
    with torch.device("meta"):
        names = list(ResNet("resnet50").state_dict())
    assert "layer1.0.conv3.weight" in names
    assert "layer1.0.downsample.0.weight" in names  # 64 -> 256 channels
    assert "layer4.2.bn3.running_var" in names


@pytest.mark.parametrize(
    ("name", "size", "dilate"),
    [("resnet18", (32, 48), False), ("resnet18", (97, 130), False), ("resnet50", (64, 80), True)],
)
def test_feature_map_size_matches_backbone(name: str, size: tuple[int, int], dilate: bool) -> None:
    with torch.device("meta"):
        backbone = ResNet(name, dilate_layer4=dilate)
        features = backbone(torch.empty(1, 3, *size))
    assert tuple(features.shape[2:]) == feature_map_size(*size, dilate_layer4=dilate)
    assert features.shape[1] == (512 if name == "resnet18" else 2048)


def test_num_batches_tracked_is_tolerated() -> None:
    backbone = ResNet("resnet18")
    state = backbone.state_dict()
    state["bn1.num_batches_tracked"] = torch.tensor(7)
    backbone.load_state_dict(state, strict=True)


def test_config_errors_say_what_to_change() -> None:
    with pytest.raises(ValidationError, match="divisible by n_heads"):
        tiny_config(dim_model=16, n_heads=3)
    with pytest.raises(ValidationError, match="multiple of 4"):
        tiny_config(dim_model=18, n_heads=2)
    with pytest.raises(ValidationError, match="Bottleneck backbone"):
        tiny_config(replace_final_stride_with_dilation=True)
    with pytest.raises(ValidationError, match="one flag per entry"):
        tiny_config(state_input_mask=(True, False))
    with pytest.raises(ValidationError, match="at least one camera or an environment state"):
        tiny_config(n_cameras=0)
    with pytest.raises(ValidationError, match="at least 32x32"):
        tiny_config(resize=(16, 16))
    with pytest.raises(ValidationError, match="extra"):
        ACTConfig.model_validate({**tiny_config().model_dump(), "dropout": 0.1})


def test_forward_builds_no_host_tensors(model: ACT) -> None:
    """Everything forward needs is a buffer or parameter: the model runs on the meta device,
    where mixing in a tensor built on the CPU (or calling .item()) fails."""
    with torch.device("meta"):
        meta = ACT(model.config).eval()
    images, state = inputs(model.config)
    actions = meta(images.to("meta"), state.to("meta"))
    assert actions.device.type == "meta"
    assert actions.shape == (2, 5, 4)


@torch.no_grad()
def test_forward_follows_module_dtype(model: ACT) -> None:
    double = copy.deepcopy(model).to(torch.float64)
    images, state = inputs(model.config)
    out64 = double(images, state.double())
    assert out64.dtype == torch.float64
    torch.testing.assert_close(out64.float(), model(images, state), rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_action_statistics_are_applied(model: ACT) -> None:
    images, state = inputs(model.config)
    base = model(images, state)
    normalized = (base - model.action_norm.mean) / model.action_norm.std
    changed = copy.deepcopy(model)
    changed.action_norm.mean.copy_(torch.tensor([1.0, -2.0, 3.0, 0.5]))
    changed.action_norm.std.copy_(torch.tensor([2.0, 0.5, 1.0, 4.0]))
    expected = normalized * changed.action_norm.std + changed.action_norm.mean
    torch.testing.assert_close(changed(images, state), expected, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_input_statistics_are_applied(model: ACT) -> None:
    images, state = inputs(model.config)
    base = model(images, state)
    for buffer in ("state_norm.mean", "image_norm.std"):
        changed = copy.deepcopy(model)
        changed.get_buffer(buffer).add_(0.3)
        assert not torch.allclose(changed(images, state), base), buffer
    # Shifting the state by the same amount as its mean leaves the normalized input unchanged.
    shifted = copy.deepcopy(model)
    shifted.state_norm.mean.add_(0.7)
    torch.testing.assert_close(shifted(images, state + 0.7), base, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_state_mask_hides_entries() -> None:
    torch.manual_seed(1)
    config = tiny_config(state_input_mask=(True, False, True))
    masked = ACT(config).eval()
    images, state = inputs(config)
    base = masked(images, state)
    poked = state.clone()
    poked[..., 1] += 5.0
    torch.testing.assert_close(masked(images, poked), base)
    poked[..., 0] += 5.0
    assert not torch.allclose(masked(images, poked), base)


@torch.no_grad()
def test_state_history_reads_every_step() -> None:
    torch.manual_seed(2)
    config = tiny_config(state_history=3)
    model = ACT(config).eval()
    assert model.encoder_robot_state_input_proj.in_features == 9
    images, state = inputs(config)
    base = model(images, state)
    older = state.clone()
    older[:, 0] += 1.0  # the oldest step
    assert not torch.allclose(model(images, older), base)


@torch.no_grad()
def test_environment_state_without_cameras() -> None:
    torch.manual_seed(3)
    config = tiny_config(n_cameras=0, env_state_dim=2, env_state_norm="min_max")
    model = ACT(config).eval()
    assert not hasattr(model, "backbone")
    state = torch.randn(2, 1, 5)
    images = torch.zeros(2, 0, 1, 1, 3, dtype=torch.uint8)
    actions = model(images, state)
    assert actions.shape == (2, 5, 4)
    poked = state.clone()
    poked[..., 4] += 1.0  # an environment entry
    assert not torch.allclose(model(images, poked), actions)


@pytest.mark.parametrize(
    "overrides",
    [
        {"pre_norm": True, "feedforward_activation": "gelu"},
        {"resize": (32, 32)},
        {"use_vae": True, "n_vae_encoder_layers": 1},
        {"n_decoder_layers": 2, "n_encoder_layers": 2},
        {"image_norm": "min_max", "state_norm": "identity", "action_norm": "min_max"},
    ],
)
@torch.no_grad()
def test_variants_run(overrides: dict[str, object]) -> None:
    torch.manual_seed(4)
    config = tiny_config(**overrides)
    model = ACT(config).eval()
    actions = model(*inputs(config))
    assert actions.shape == (2, 5, 4)
    assert torch.isfinite(actions).all()
    if config.pre_norm:
        assert "encoder.norm.weight" in model.state_dict()


def test_normalizer_formulas() -> None:
    x = torch.tensor([0.0, 1.0, 2.0])
    norm = Normalizer("min_max", (3,), eps=1e-8)
    norm.min.copy_(torch.tensor([0.0, 0.0, 2.0]))
    norm.max.copy_(torch.tensor([4.0, 2.0, 2.0]))  # the last has no range
    out = norm.normalize(x)
    torch.testing.assert_close(out, torch.tensor([-1.0, 0.0, -1.0]))
    torch.testing.assert_close(norm.unnormalize(out), torch.tensor([0.0, 1.0, 2.0]))
    meanstd = Normalizer("mean_std", (3,), eps=1e-8)
    meanstd.mean.fill_(1.0)
    meanstd.std.fill_(2.0)
    torch.testing.assert_close(meanstd.normalize(x), (x - 1.0) / 2.0)
    torch.testing.assert_close(meanstd.unnormalize(x), x * 2.0 + 1.0)
    assert Normalizer("identity", (3,), eps=1e-8).normalize(x) is x


def test_attention_matches_torch_multihead_attention() -> None:
    torch.manual_seed(5)
    ours = Attention(16, 4)
    reference = nn.MultiheadAttention(16, 4)
    reference.load_state_dict(ours.state_dict())
    q, k, v = torch.randn(3, 2, 7, 16).unbind(0)
    expected = reference(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))[0]
    torch.testing.assert_close(ours(q, k, v), expected.transpose(0, 1), rtol=1e-5, atol=1e-6)


def test_position_embedding_2d_values() -> None:
    height, width, dim = 3, 4, 16
    embed = sinusoidal_position_embedding_2d(height, width, dim).view(height, width, dim)
    scale = 2 * math.pi
    for row in range(height):
        for col in range(width):
            y = (row + 1) / (height + 1e-6) * scale
            x = (col + 1) / (width + 1e-6) * scale
            # Channel 0/1: sin/cos of the row at the lowest frequency; dim/2 and dim/2 + 1: column.
            expected = torch.tensor([math.sin(y), math.cos(y), math.sin(x), math.cos(x)])
            got = embed[row, col, [0, 1, dim // 2, dim // 2 + 1]]
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # Channel 2 uses the next frequency, 10000 ** (2 / (dim / 2)).
    y = 1 / (height + 1e-6) * scale
    expected_sin = math.sin(y / 10000 ** (2 / (dim // 2)))
    assert embed[0, 0, 2].item() == pytest.approx(expected_sin, rel=1e-5)


@torch.no_grad()
def test_forward_traces_as_one_graph() -> None:
    """No graph breaks (data-dependent Python branches, .item(), host tensors): dynamo traces
    the whole forward, pre- and post-processing included, as one graph."""
    torch.manual_seed(6)
    config = tiny_config(n_cameras=1, state_input_mask=(True, False, True), resize=(32, 32))
    model = ACT(config).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    images, state = inputs(config)
    assert torch.equal(compiled(images, state), model(images, state))


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(["mean_std", "min_max"]),
    low=st.floats(-10, 10),
    span=st.floats(0.01, 10),
    value=st.floats(-20, 20),
)
def test_normalizer_round_trip(mode: str, low: float, span: float, value: float) -> None:
    norm = Normalizer(mode, (1,), eps=1e-8)  # type: ignore[arg-type]
    first, second = (low, span) if mode == "mean_std" else (low, low + span)
    names = ("mean", "std") if mode == "mean_std" else ("min", "max")
    getattr(norm, names[0]).fill_(first)
    getattr(norm, names[1]).fill_(second)
    x = torch.tensor([value], dtype=torch.float64)
    norm.double()
    # Exact inverses but for mean_std's eps (LeRobot divides by std + eps, multiplies by std).
    tolerance = 1e-8 / span * (abs(value - low) + 1) + 1e-12
    torch.testing.assert_close(norm.unnormalize(norm.normalize(x)), x, rtol=0, atol=tolerance)


# ---- Cameras of different shapes -----------------------------------------------------------

MIXED = ((32, 48), (40, 40), (32, 48))  # cameras 0 and 2 share a shape: groups [0, 2], [1]


def mixed_inputs(config: ACTConfig, batch: int = 2, seed: int = 0) -> list[torch.Tensor]:
    """Per camera, uint8 (batch, H_i, W_i, 3), then the state."""
    gen = torch.Generator().manual_seed(seed)
    frames = [
        torch.randint(0, 256, (batch, h, w, 3), dtype=torch.uint8, generator=gen)
        for h, w in config.frame_sizes
    ]
    return [*frames, torch.randn(batch, config.state_history, config.state_size, generator=gen)]


def grouped(config: ACTConfig, per_camera: list[torch.Tensor]) -> list[torch.Tensor]:
    """The same observation as the model takes it: one tensor per frame shape, then the state."""
    *frames, state = per_camera
    groups = [torch.stack([frames[i] for i in cams], dim=1) for _, cams in config.frame_groups]
    return [*groups, state]


def camera_by_camera(model: ACT, per_camera: list[torch.Tensor]) -> torch.Tensor:
    """LeRobot's way: each camera alone through the backbone (its own statistics), its cells
    appended in camera order, then the rest of the network."""
    config = model.config
    *frames, state = per_camera
    tokens = []
    for i, frame in enumerate(frames):
        pixels = prepare_images(
            frame.unsqueeze(1),
            model.pixel_scale,
            model.image_norm,
            config.resize,
            config.resize_antialias,
            torch.tensor([i]),
        )
        features = model.encoder_img_feat_input_proj(model.backbone(pixels))
        tokens.append(features.flatten(2).transpose(1, 2))  # (B, h*w, D), row-major cells
    model_tokens = model._image_tokens
    try:
        model._image_tokens = lambda pixels, batch: torch.cat(tokens, dim=1)  # type: ignore[method-assign]
        robot, env = prepare_state(
            state, model.state_norm, model.env_state_norm, model.state_mask, config.state_dim
        )
        return model.action_norm.unnormalize(model.predict_normalized([frames[0]], robot, env))
    finally:
        model._image_tokens = model_tokens  # type: ignore[method-assign]


@torch.no_grad()
def test_cameras_of_different_shapes_match_camera_by_camera() -> None:
    torch.manual_seed(8)
    config = tiny_config(**camera_fields(MIXED))
    assert [cams for _, cams in config.frame_groups] == [(0, 2), (1,)]
    model = ACT(config).eval()
    with torch.no_grad():  # distinct statistics per camera, so a mix-up shows
        model.image_norm.mean.copy_(torch.rand(3, 3) * 0.5)
        model.image_norm.std.copy_(torch.rand(3, 3) + 0.5)
    per_camera = mixed_inputs(config)
    actions = model(*grouped(config, per_camera))
    assert actions.shape == (2, 5, 4)
    torch.testing.assert_close(actions, camera_by_camera(model, per_camera), rtol=1e-5, atol=1e-5)
    # Position embeddings: each camera its own feature map's, in camera order.
    expected = torch.cat(
        [sinusoidal_position_embedding_2d(*feature_map_size(h, w), 16) for h, w in MIXED]
    )
    torch.testing.assert_close(model.image_pos_embed, expected)


@torch.no_grad()
def test_the_token_order_follows_the_cameras() -> None:
    """Swapping two cameras of the same shape swaps their blocks of image tokens where the
    encoder reads them: tokens are not pooled. (The actions of a random-weight model barely
    move with the order, 2.4e-7 once, so they are no test of it.)"""
    torch.manual_seed(9)
    config = tiny_config(**camera_fields(MIXED))
    model = ACT(config).eval()
    seen: list[torch.Tensor] = []
    model.encoder.register_forward_pre_hook(lambda _, args: seen.append(args[0].detach()))
    per_camera = mixed_inputs(config)
    swapped = [per_camera[2], per_camera[1], per_camera[0], per_camera[3]]
    with torch.no_grad():
        model(*grouped(config, per_camera))
        model(*grouped(config, swapped))
    tokens, tokens_swapped = seen
    first = 2  # the latent and the state tokens come first
    a, b = (math.prod(feature_map_size(h, w)) for h, w in MIXED[:2])  # cells of cameras 0/2, 1
    blocks = [slice(first, first + a), slice(first + a, first + a + b), slice(first + a + b, None)]
    assert tokens.shape[1] == first + 2 * a + b
    assert torch.equal(tokens_swapped[:, blocks[0]], tokens[:, blocks[2]])
    assert torch.equal(tokens_swapped[:, blocks[2]], tokens[:, blocks[0]])
    assert torch.equal(tokens_swapped[:, blocks[1]], tokens[:, blocks[1]])
    assert not torch.equal(tokens[:, blocks[0]], tokens[:, blocks[2]])


def test_mixed_shapes_fit_the_default_input_codec() -> None:
    """The model's frame groups are the runner's (policies.inputs.frame_groups)."""
    policy = make_demo_policy(cameras=(("a", 32, 48), ("b", 40, 40), ("c", 32, 48)))
    groups = frame_groups(policy.spec)
    config = policy.module.config
    assert [g.cameras for g in groups] == [("a", "c"), ("b",)]
    assert [(g.height, g.width) for g in groups] == [size for size, _ in config.frame_groups]
    images = example_frames(policy.spec, seed=1)
    context = first_context(policy.spec, np.zeros(6, np.float32))
    chunk = EagerPolicy(policy).predict(images, context).actions
    assert chunk.shape == (20, 6) and np.isfinite(chunk).all()


def test_camera_sizes_must_fit_the_cameras() -> None:
    with pytest.raises(ValidationError, match="camera_sizes has 2 entries for 3 cameras"):
        tiny_config(n_cameras=3, camera_sizes=((32, 48), (40, 40)))
    with pytest.raises(ValidationError, match="first camera's size"):
        tiny_config(n_cameras=2, camera_sizes=((40, 40), (32, 48)))
