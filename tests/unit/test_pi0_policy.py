"""pi0 and pi0.5 as Tempo serves them, on the CPU at tiny widths: a LeRobot-layout directory
read into a TensorPolicy (spec, prompt, step module, codec), the step's image preparation
against openpi's resize-with-pad written out here, the normalizations against LeRobot's and
openpi's formulas, the codec's noise and prompts, and the refusals (one sentence each)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import torch
import torch.nn.functional as F  # noqa: N812
from safetensors.torch import load_file, save_file

from controller.config import load_config
from controller.daemon.prompts import RobotPrompts
from controller.errors import CheckpointError, ConfigError
from policies.base import PolicySpec, RobotContext, first_context
from policies.catalog import build_tensor_policy
from policies.checkpoints.load import load_checkpoint
from policies.pi0.demo import PROMPT, WIDTHS, arm_statistics, write_demo_checkpoint
from policies.pi0.inspect import describe_pi0_checkpoint
from policies.pi0.norm_stats import FeatureStats
from policies.pi0.policy import affine, read_pi0_policy
from policies.pi0.prompt import PromptEmbedder
from policies.pi0.step import AffineNorm, Pi0Step, Pi0StepConfig, resize_with_pad
from policies.pi05_prompt import pi05_reference_tokens
from policies.prompt_tokens import PromptTokenizer
from policies.tensor_policy import EagerPolicy, TensorPolicy
from tests.unit.test_lerobot_import import (
    MEAN_STD,
    MEAN_STD_NAMES,
    tempo_model,
    write_processor_layout,
)

DATA = Path(__file__).resolve().parents[1] / "data"
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
FAMILIES = ("pi0", "pi05")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is the faster here


@pytest.fixture(scope="module")
def demo_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pi0demo")
    return {family: write_demo_checkpoint(root / family, family) for family in FAMILIES}


def tokenizer_of(spec: PolicySpec) -> PromptTokenizer:
    prompt = spec.prompt
    assert prompt is not None
    return PromptTokenizer(
        Path(prompt.tokenizer), prompt.max_length, prompt.vocab_size, prompt.template
    )


def context_with_task(spec: PolicySpec, state: np.ndarray, task: str, step: int = 0):
    context = first_context(spec, state, step)
    return dataclasses.replace(context, prompt=tokenizer_of(spec).encode(task))


def black_frames(spec: PolicySpec) -> dict[str, np.ndarray]:
    return {c.name: np.zeros((c.height, c.width, 3), np.uint8) for c in spec.cameras}


def encoded(policy: TensorPolicy, context: RobotContext) -> list[np.ndarray]:
    codec = policy.inputs
    out = [np.empty(i.shape, dtype=i.dtype) for i in codec.inputs]
    codec.encode(context, out)
    return out


# --- 1. a directory read as the served policy -----------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_the_demo_directory_loads_as_a_served_policy(demo_dirs, family: str) -> None:
    directory = demo_dirs[family]
    policy = load_checkpoint(directory)
    spec = policy.spec
    assert [(c.name, c.height, c.width) for c in spec.cameras] == [("front", 96, 128)]
    assert spec.state_size == 6 and spec.joint_names == tuple(f"joint_{i}" for i in range(6))
    assert spec.chunk_size == 20
    assert spec.execution is not None
    assert (spec.execution.query_period, spec.execution.ensemble) == (10, "newest")
    prompt = spec.prompt
    assert prompt is not None
    shipped = (directory / "tokenizer" / "tokenizer.model").resolve()
    assert Path(prompt.tokenizer).is_absolute() and prompt.tokenizer == str(shipped)
    vocab = sentencepiece.SentencePieceProcessor(model_file=str(shipped)).vocab_size()
    assert (
        prompt.vocab_size == vocab == PromptEmbedder.from_network(policy.module.network).vocab_size
    )
    assert (prompt.max_length, prompt.template, prompt.default_task) == (
        PROMPT[family],
        family,
        None,
    )
    assert isinstance(policy.module, Pi0Step) and policy.module.uses_state == (family == "pi0")

    context = context_with_task(spec, np.linspace(-0.2, 0.2, 6), "pick up the cube")
    frames = [torch.zeros(1, 1, 96, 128, 3, dtype=torch.uint8)]
    inputs = [torch.from_numpy(a).unsqueeze(0) for a in encoded(policy, context)]
    with torch.no_grad():
        chunk = policy.module(*frames, *inputs)
    assert chunk.shape == (1, 20, 6) and torch.isfinite(chunk).all()

    actions = EagerPolicy(policy).predict(black_frames(spec), context).actions
    assert actions.shape == (20, 6) and np.isfinite(actions).all()
    np.testing.assert_allclose(actions, chunk[0].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_lerobots_saved_tiny_directories_load_with_their_tokenizer(family: str) -> None:
    directory = DATA / f"{family}_lerobot_tiny"
    policy = load_checkpoint(directory)
    spec = policy.spec
    assert [c.name for c in spec.cameras] == ["base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"]
    assert all((c.height, c.width) == (56, 56) for c in spec.cameras)
    assert (spec.state_size, spec.action_dim, spec.chunk_size) == (14, 14, 50)
    assert spec.execution is not None and spec.execution.query_period == 50
    assert spec.prompt is not None
    assert spec.prompt.tokenizer == str((directory / "tokenizer" / "tokenizer.model").resolve())
    assert (spec.prompt.vocab_size, spec.prompt.template) == (512, family)
    assert spec.prompt.max_length == {"pi0": 48, "pi05": 200}[family]
    # The parity script's stand-in tokenizer, padded to the model's 512 rows: the pair serves.
    tokenizer = PromptTokenizer(Path(spec.prompt.tokenizer), spec.prompt.max_length, 512, family)
    context = dataclasses.replace(
        first_context(spec, np.zeros(14)), prompt=tokenizer.encode("pick up the red cube")
    )
    actions = EagerPolicy(policy).predict(black_frames(spec), context).actions
    assert actions.shape == (50, 14) and np.isfinite(actions).all()


def test_the_demos_token_tables_are_seeded_and_every_task_fits(tmp_path: Path) -> None:
    """The demo writes its vocabulary tables from its seed (they were left uninitialised, so
    prompts embedded whatever memory held), and a cached directory of another demo is
    written again."""
    from policies.pi0.demo import TASKS

    tables = []
    for name in ("a", "b"):
        directory = write_demo_checkpoint(tmp_path / name, "pi0")
        weights = load_file(str(directory / "model.safetensors"))
        table = weights["model." + EMBED]
        assert torch.isfinite(table).all() and 0 < float(table.abs().max()) < 10
        tables.append(table)
    torch.testing.assert_close(tables[0], tables[1], rtol=0, atol=0)
    spec = load_checkpoint(tmp_path / "a").spec
    assert all(not tokenizer_of(spec).truncated(task) for task in TASKS)

    stale = tmp_path / "a" / "model.safetensors"
    weights = load_file(str(stale))
    weights["model." + EMBED] = torch.full_like(weights["model." + EMBED], float("nan"))
    save_file(weights, str(stale))
    write_demo_checkpoint(tmp_path / "a", "pi0")
    torch.testing.assert_close(load_file(str(stale))["model." + EMBED], tables[0])


def test_a_network_built_without_a_checkpoint_has_zero_token_tables() -> None:
    """HostTable was torch.empty: memory freed just before came back as the table (NaN here)."""
    from policies.pi0.gemma import HostTable

    for _ in range(3):
        garbage = torch.full((66, 64), float("nan"))
        del garbage
        table = HostTable(66, 64)
        assert bool((table.weight == 0).all())


# --- 2. the step's images -------------------------------------------------------------------


def openpi_resize_with_pad(images: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """openpi's resize_with_pad_torch for float images in [-1, 1], channels last (b, h, w, c),
    written out: the ratio of the larger side, int() sizes, bilinear without corner alignment,
    clamped to [-1, 1], padded centred (the odd pixel at the end) with -1."""
    chw = images.permute(0, 3, 1, 2)
    cur_h, cur_w = chw.shape[-2:]
    ratio = max(cur_w / width, cur_h / height)
    new_h, new_w = int(cur_h / ratio), int(cur_w / ratio)
    resized = F.interpolate(chw, size=(new_h, new_w), mode="bilinear", align_corners=False)
    resized = resized.clamp(-1.0, 1.0)
    pad_h0, rem_h = divmod(height - new_h, 2)
    pad_w0, rem_w = divmod(width - new_w, 2)
    padded = F.pad(resized, (pad_w0, pad_w0 + rem_w, pad_h0, pad_h0 + rem_h), value=-1.0)
    return padded.permute(0, 2, 3, 1)


def reference_image(frame: np.ndarray, size: int) -> torch.Tensor:
    """One uint8 (h, w, 3) frame as openpi feeds it: [-1, 1], resized with padding, (3, S, S)."""
    pixels = torch.from_numpy(frame).float()[None] / 255.0 * 2.0 - 1.0
    if pixels.shape[1:3] != (size, size):
        pixels = openpi_resize_with_pad(pixels, size, size)
    return pixels[0].permute(2, 0, 1)


def step_with(camera_sizes: tuple[tuple[int, int], ...], empty: int) -> Pi0Step:
    """A Pi0Step of the demo's widths (56x56 images), on the meta device: images() reads only
    its config."""
    from policies.pi0.config import Pi0Config

    network = Pi0Config(
        chunk_size=4, n_action_steps=4, max_state_dim=8, max_action_dim=8,
        num_inference_steps=2, tokenizer_max_length=8, image_resolution=(56, 56),
        empty_cameras=empty, vocab_size=32, **WIDTHS,
    )  # fmt: skip
    config = Pi0StepConfig(network=network, state_size=3, action_size=3, camera_sizes=camera_sizes)
    with torch.device("meta"):
        return Pi0Step(config)


def random_frames(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("size", [(96, 128), (128, 96), (37, 211), (56, 56), (300, 300), (20, 30)])
def test_resize_with_pad_is_openpis(size: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(size))
    frames = random_frames(rng, (2, *size, 3))
    ours = resize_with_pad(torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 255.0, 56, 56)
    expected = torch.stack([reference_image(f, 56) for f in frames])
    torch.testing.assert_close(ours * 2.0 - 1.0, expected, rtol=0, atol=2e-6)


def test_a_wide_frame_is_padded_black_above_and_below() -> None:
    white = torch.ones(1, 3, 96, 128)
    out = resize_with_pad(white, 56, 56)
    rows = out[0, 0, :, 28]
    new_h = int(96 / (128 / 56))  # 42 (or 41: int() of a float ratio, as openpi)
    top = (56 - new_h) // 2
    assert (rows[:top] == 0).all() and (rows[top : top + new_h] == 1).all()
    assert (rows[top + new_h :] == 0).all()
    torch.testing.assert_close(out[0, :, 28, :], torch.ones(3, 56))  # full width


def test_cameras_of_two_sizes_and_empty_slots_come_out_in_spec_order() -> None:
    sizes = ((96, 128), (48, 64), (96, 128))
    step = step_with(sizes, empty=2)
    rng = np.random.default_rng(3)
    cameras = [random_frames(rng, (2, *size, 3)) for size in sizes]  # batch of 2
    # Frame groups as policies.inputs stacks them: one tensor per size, first seen first.
    big = torch.from_numpy(np.stack([cameras[0], cameras[2]], axis=1))
    small = torch.from_numpy(cameras[1][:, None])
    images, masks = step.images((big, small))
    assert images.shape == (2, 5, 3, 56, 56) and images.device.type == "cpu"
    for b in range(2):
        for slot, frames in enumerate(cameras):
            expected = reference_image(frames[b], 56)
            torch.testing.assert_close(images[b, slot], expected, rtol=0, atol=2e-6)
        assert (images[b, 3:] == -1).all()
    assert masks.tolist() == [[True, True, True, False, False]] * 2


# --- 3. normalization ------------------------------------------------------------------------


def stats(mode: str, size: int = 5) -> FeatureStats:
    gen = torch.Generator().manual_seed(1)
    low = torch.randn(size, generator=gen)
    high = low + torch.rand(size, generator=gen) * 3
    high[1] = low[1]  # an empty range: the conventions differ there
    std = torch.rand(size, generator=gen)
    std[2] = 0.0
    return FeatureStats(
        mode=mode, size=size, mean=torch.randn(size, generator=gen), std=std,
        q01=low, q99=high, min=low - 1, max=high + 1,
    )  # type: ignore[arg-type]  # fmt: skip


def lerobot_normalize(x: torch.Tensor, s: FeatureStats, eps: float) -> torch.Tensor:
    """LeRobot's NormalizerProcessorStep, written out."""
    if s.mode == "MEAN_STD":
        return (x - s.mean) / (s.std + eps)
    low, high = (s.min, s.max) if s.mode == "MIN_MAX" else (s.q01, s.q99)
    denom = high - low
    denom = torch.where(denom == 0, torch.tensor(eps), denom)
    return 2 * (x - low) / denom - 1


def lerobot_unnormalize(x: torch.Tensor, s: FeatureStats, eps: float) -> torch.Tensor:
    """LeRobot's UnnormalizerProcessorStep, written out: MEAN_STD multiplies by std itself."""
    if s.mode == "MEAN_STD":
        return x * s.std + s.mean
    low, high = (s.min, s.max) if s.mode == "MIN_MAX" else (s.q01, s.q99)
    denom = high - low
    denom = torch.where(denom == 0, torch.tensor(eps), denom)
    return (x + 1) / 2 * denom + low


def openpi_normalize(x: torch.Tensor, s: FeatureStats) -> torch.Tensor:
    """openpi's Normalize (its MIN_MAX: the quantile formula on min / max)."""
    if s.mode == "MEAN_STD":
        return (x - s.mean) / (s.std + 1e-6)
    low, high = (s.min, s.max) if s.mode == "MIN_MAX" else (s.q01, s.q99)
    return (x - low) / (high - low + 1e-6) * 2.0 - 1.0


def openpi_unnormalize(x: torch.Tensor, s: FeatureStats) -> torch.Tensor:
    if s.mode == "MEAN_STD":
        return x * (s.std + 1e-6) + s.mean
    low, high = (s.min, s.max) if s.mode == "MIN_MAX" else (s.q01, s.q99)
    return (x + 1.0) / 2.0 * (high - low + 1e-6) + low


def affine_norm(center: torch.Tensor, scale: torch.Tensor) -> AffineNorm:
    norm = AffineNorm(center.shape[0])
    with torch.no_grad():
        norm.center.copy_(center)
        norm.scale.copy_(scale)
    return norm


@pytest.mark.parametrize("mode", ["MEAN_STD", "MIN_MAX", "QUANTILES", "IDENTITY"])
@pytest.mark.parametrize("convention", ["lerobot", "openpi"])
def test_normalization_is_the_checkpoint_programs(mode: str, convention: str) -> None:
    s = stats(mode)
    eps = 1e-8 if convention == "lerobot" else 1e-6
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x = x.float()
    forward = affine_norm(*affine(s, eps, convention))
    inverse = affine_norm(*affine(s, eps, convention, inverse=True))
    if mode == "IDENTITY":
        expected, back = x, x
    elif convention == "lerobot":
        expected, back = lerobot_normalize(x, s, eps), lerobot_unnormalize(x, s, eps)
    else:
        expected, back = openpi_normalize(x, s), openpi_unnormalize(x, s)
    # A zero range divides by eps: normalized values of ~1e8 there, compared relatively.
    torch.testing.assert_close(forward.normalize(x), expected, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(inverse.unnormalize(x), back, rtol=2e-5, atol=2e-5)
    finite = forward.scale.abs() > 1e-3  # unnormalize(normalize(x)) where no eps dominates
    torch.testing.assert_close(
        forward.unnormalize(forward.normalize(x))[:, finite], x[:, finite], rtol=1e-5, atol=1e-5
    )


def test_the_step_unnormalizes_a_zero_std_action_to_its_mean(tmp_path: Path) -> None:
    """LeRobot's unnormalizer: x * std + mean, so a constant joint's action is its mean."""
    directory = write_demo_checkpoint(tmp_path / "d", "pi0")
    name = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    saved = load_file(str(directory / name))
    saved["action.std"][0] = 0.0
    save_file(saved, str(directory / name))
    step = read_pi0_policy(directory, None).policy.module
    assert isinstance(step, Pi0Step)
    out = step.action_norm.unnormalize(torch.full((1, 6), 3.0))
    assert float(out[0, 0]) == float(saved["action.mean"][0])


# --- 4. the codec ----------------------------------------------------------------------------


def test_the_noise_is_a_function_of_the_step(demo_dirs) -> None:
    policy = load_checkpoint(demo_dirs["pi0"])
    context = context_with_task(policy.spec, np.zeros(6), "wave", step=5)
    first, again = encoded(policy, context), encoded(policy, context)
    later = encoded(policy, dataclasses.replace(context, step=6))
    np.testing.assert_array_equal(first[1], again[1])
    assert first[1].shape == (20, 8) and np.isfinite(first[1]).all()
    assert not np.allclose(first[1], later[1])
    np.testing.assert_array_equal(first[2], later[2])  # the prompt is the same


def test_a_pi0_prompt_is_its_token_rows_times_sqrt_width(demo_dirs) -> None:
    policy = load_checkpoint(demo_dirs["pi0"])
    tokens = tokenizer_of(policy.spec).encode("wave")
    context = dataclasses.replace(first_context(policy.spec, np.zeros(6)), prompt=tokens)
    out = encoded(policy, context)
    table = policy.module.network.get_parameter(EMBED).detach()
    expected = table[torch.tensor(tokens.ids)] * 64**0.5
    np.testing.assert_allclose(out[2], expected.numpy(), rtol=1e-6)
    embedder = PromptEmbedder.from_network(policy.module.network)
    np.testing.assert_array_equal(out[2], embedder.embed(tokens.ids))
    np.testing.assert_array_equal(out[3], tokens.mask.astype(np.float32))
    assert 0 < tokens.length < PROMPT["pi0"] and out[3].sum() == tokens.length


def quantile_pi05(directory: Path) -> Path:
    """The demo's pi0.5 with its state normalized by quantiles (q01, q99), as LeRobot's pi05
    config does by default."""
    for name in ("config.json", "policy_preprocessor.json", "policy_postprocessor.json"):
        path = directory / name
        path.write_text(path.read_text().replace('"STATE": "MEAN_STD"', '"STATE": "QUANTILES"'))
    return directory


def test_pi05s_prompt_holds_the_discretized_normalized_state(tmp_path: Path) -> None:
    directory = quantile_pi05(write_demo_checkpoint(tmp_path / "d", "pi05"))
    policy = load_checkpoint(directory)
    statistics = arm_statistics()
    low, high = statistics["observation.state.q01"], statistics["observation.state.q99"]
    low, high = low.double().numpy(), high.double().numpy()
    state = low + (high - low) * np.array([-0.3, 0.0, 0.37, 0.5, 0.81, 1.3])
    normalized = 2 * (state - low) / (high - low) - 1  # LeRobot's QUANTILES
    task = "pick up the cube"
    context = context_with_task(policy.spec, state.astype(np.float32), task)
    assert context.prompt is not None
    out = encoded(policy, context)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(policy.spec.prompt.tokenizer))
    reference = pi05_reference_tokens(processor, task, normalized, PROMPT["pi05"])
    embedder = PromptEmbedder.from_network(policy.module.network)
    np.testing.assert_array_equal(out[3], reference.mask.astype(np.float32))
    np.testing.assert_array_equal(out[2], embedder.embed(reference.ids))
    # The state is in it, out-of-range values as bins -1 and 255, and the whole prompt fits.
    assert context.prompt.length < reference.length < PROMPT["pi05"]
    text = processor.decode(reference.ids[: reference.length].tolist())
    assert text.startswith(f"Task: {task}, State: -1 0 ") and text.endswith(" 255; Action:")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_context_without_a_prompt_is_refused(demo_dirs, family: str) -> None:
    policy = load_checkpoint(demo_dirs[family])
    with pytest.raises(ValueError, match="reads a prompt, and the robot's context has none"):
        encoded(policy, first_context(policy.spec, np.zeros(6)))


# --- 5. refusals -----------------------------------------------------------------------------


def one_sentence(message: str) -> str:
    assert "\n" not in message and "Traceback" not in message
    return message


def test_an_act_directory_is_refused_by_the_pi0_reader(tmp_path: Path) -> None:
    act = write_processor_layout(tmp_path / "act", tempo_model(), MEAN_STD, MEAN_STD_NAMES)
    with pytest.raises(CheckpointError) as caught:
        read_pi0_policy(act, None)
    assert "LeRobot 'act' policy; this reader takes pi0 and pi05" in one_sentence(str(caught.value))


def test_other_families_checkpoints_are_served_untouched_by_the_prompt_settings(
    tmp_path: Path,
) -> None:
    """The catalog hands every checkpoint to every family's serve_settings: pi0's leaves an
    ACT policy as it is, and refuses policy.prompt.tokenizer / default_task for it."""
    act = write_processor_layout(tmp_path / "act", tempo_model(), MEAN_STD, MEAN_STD_NAMES)
    config = load_config(None, [f"policy.path={act}"])
    policy = build_tensor_policy(config.policy, config.robot)
    assert type(policy.module).__name__ == "ACT" and policy.spec.prompt is None
    config = load_config(None, [f"policy.path={act}", "policy.prompt.default_task=wave"])
    with pytest.raises(ConfigError) as caught:
        build_tensor_policy(config.policy, config.robot)
    assert "apply to pi0 / pi0.5 checkpoints" in one_sentence(str(caught.value))


def write_openpi_demo(directory: Path, vocab: int) -> Path:
    """An openpi PyTorch pi0 checkpoint at tiny widths (openpi's 224x224 images, 56-pixel
    patches), as its converter writes it: no tokenizer ships with it."""
    from policies.pi0.config import Pi0Config
    from policies.pi0.network import Pi0Network

    widths = json.loads(json.dumps(WIDTHS))
    widths["vision"].update(image_size=224, patch_size=56)
    config = Pi0Config(
        chunk_size=10, n_action_steps=10, max_state_dim=8, max_action_dim=8,
        num_inference_steps=10, tokenizer_max_length=48, image_resolution=(224, 224),
        vocab_size=vocab, **widths,
    )  # fmt: skip
    torch.manual_seed(0)
    network = Pi0Network(config)
    table = network.get_parameter(EMBED)
    with torch.no_grad():
        table.normal_(0.0, 0.1)  # as a trained table: every token its own row
    directory.mkdir(parents=True)
    weights = {k: v.detach().contiguous() for k, v in network.state_dict().items()}
    save_file(weights, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({
        "action_dim": 8, "action_horizon": 10, "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m", "precision": "float32",
    }))  # fmt: skip
    (directory / "tempo_widths.json").write_text(json.dumps(widths))
    one = {"mean": [0.0] * 6, "std": [1.0] * 6, "q01": [-1.0] * 6, "q99": [1.0] * 6}
    (directory / "assets" / "arm").mkdir(parents=True)
    norm = {"norm_stats": {"state": one, "actions": one}}
    (directory / "assets" / "arm" / "norm_stats.json").write_text(json.dumps(norm))
    return directory


def test_an_openpi_directory_reads_paligemmas_tokenizer_from_the_hub_cache(
    tmp_path: Path, demo_dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As LeRobot 0.6 does for the pi0 directories it saves without a tokenizer: the name the
    checkpoint gives, looked up offline in the local Hugging Face cache."""
    tokenizer = demo_dirs["pi0"] / "tokenizer" / "tokenizer.model"
    vocab = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer)).vocab_size()
    openpi = write_openpi_demo(tmp_path / "openpi", vocab)
    cache = tmp_path / "hub"
    repo = cache / "models--google--paligemma-3b-pt-224"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    (repo / "blobs" / "5a1e").write_bytes(tokenizer.read_bytes())
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "tokenizer.model").symlink_to("../../blobs/5a1e")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    policy = build_tensor_policy(load_config(None, [f"policy.path={openpi}"]).policy)
    assert policy.spec.prompt is not None
    assert policy.spec.prompt.tokenizer == str(repo / "blobs" / "5a1e")  # resolved
    lines = describe_pi0_checkpoint(openpi)
    cached = "tokenizer: google/paligemma-3b-pt-224 from the local Hugging Face cache"
    assert any(line.startswith(cached) for line in lines)


def test_an_openpi_directory_needs_policy_tokenizer(tmp_path: Path, demo_dirs) -> None:
    tokenizer = demo_dirs["pi0"] / "tokenizer" / "tokenizer.model"
    vocab = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer)).vocab_size()
    openpi = write_openpi_demo(tmp_path / "openpi", vocab)
    config = load_config(None, [f"policy.path={openpi}"])
    with pytest.raises(CheckpointError) as caught:
        build_tensor_policy(config.policy, config.robot)
    message = one_sentence(str(caught.value))
    assert "ships no tokenizer" in message and "set policy.prompt.tokenizer" in message

    missing = tmp_path / "absent" / "tokenizer.model"
    config = load_config(None, [f"policy.path={openpi}", f"policy.prompt.tokenizer={missing}"])
    with pytest.raises(CheckpointError) as caught:
        build_tensor_policy(config.policy, config.robot)
    assert f"policy.prompt.tokenizer: {missing} is not a file" == one_sentence(str(caught.value))

    config = load_config(None, [f"policy.path={openpi}", f"policy.prompt.tokenizer={tokenizer}"])
    policy = build_tensor_policy(config.policy, config.robot)
    assert policy.spec.prompt is not None
    assert policy.spec.prompt.tokenizer == str(tokenizer.resolve())
    assert [c.name for c in policy.spec.cameras] == [
        "base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"
    ]  # fmt: skip
    context = context_with_task(policy.spec, np.zeros(6), "wave")
    actions = EagerPolicy(policy).predict(black_frames(policy.spec), context).actions
    assert actions.shape == (10, 6) and np.isfinite(actions).all()


def test_a_tokenizer_of_another_vocabulary_is_refused_naming_both_sizes(
    tmp_path: Path, demo_dirs
) -> None:
    """policy.prompt.tokenizer pointing at another SentencePiece model: the control process's
    tokenizer (RobotPrompts, built when the daemon starts) refuses it."""
    other = DATA / "pi0_lerobot_tiny" / "tokenizer" / "tokenizer.model"  # 512 pieces
    overrides = [f"policy.path={demo_dirs['pi0']}", f"policy.prompt.tokenizer={other}"]
    config = load_config(None, overrides)
    policy = build_tensor_policy(config.policy, config.robot)
    prompt = policy.spec.prompt
    assert prompt is not None and prompt.tokenizer == str(other) and prompt.vocab_size != 512
    with pytest.raises(CheckpointError) as caught:
        RobotPrompts(policy.spec)
    message = one_sentence(str(caught.value))
    assert (
        f"a vocabulary of 512 tokens but the checkpoint's model has {prompt.vocab_size};" in message
    )


def test_a_long_task_keeps_the_first_tokenizer_max_length_ids(demo_dirs) -> None:
    policy = load_checkpoint(demo_dirs["pi0"])
    prompts = RobotPrompts(policy.spec)
    task = " ".join(["pick up the cube and put the cube in the bin"] * 3)
    prompt = prompts.for_hello(task)
    assert prompt is not None and prompt.truncated
    full = prompts.tokenizer.ids(task)
    assert prompt.full_length == len(full) > PROMPT["pi0"]
    assert prompt.tokens.ids.tolist() == full[: PROMPT["pi0"]] and prompt.tokens.mask.all()
    out = encoded(
        policy, dataclasses.replace(first_context(policy.spec, np.zeros(6)), prompt=prompt.tokens)
    )
    assert out[3].sum() == PROMPT["pi0"]


# --- 7. inspect --------------------------------------------------------------------------------


def test_inspect_names_the_reduced_widths_when_a_widths_file_is_present(demo_dirs) -> None:
    lines = describe_pi0_checkpoint(demo_dirs["pi0"])
    model = next(line for line in lines if line.startswith("model: "))
    assert model == (
        "model: reduced widths from tempo_widths.json: vision 32x2, language 64x2, expert 32x2 "
        "(width x depth; config.json's gemma_2b / gemma_300m are not built), run in float32"
    )


def test_weights_that_do_not_fit_the_config_are_a_checkpoint_error_naming_the_folder(
    tmp_path: Path,
) -> None:
    """tempo_widths.json (or config.json) describing another model than the weights: one
    sentence naming the directory and the keys, as a CheckpointError (was a bare ValueError)."""
    directory = tmp_path / "pi0"
    directory.mkdir()
    source = DATA / "pi0_lerobot_tiny"
    for item in source.rglob("*"):
        if item.is_file():
            target = directory / item.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.read_bytes())
    widths = json.loads((directory / "tempo_widths.json").read_text())
    widths["expert"]["mlp_dim"] = 80
    (directory / "tempo_widths.json").write_text(json.dumps(widths))
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(directory)
    message = str(caught.value)
    assert message.startswith(f"{directory}: the weights do not fit this Pi0Network")
    assert "of the wrong shape" in message and "come from different models" in message
    assert "\n" not in message
