"""Check that Tempo's Diffusion Policy computes what LeRobot's own DiffusionPolicy computes, on
weights LeRobot made and saved itself.

Needs LeRobot 0.6.1 (Python >= 3.12, torch < 2.12) and diffusers importable beside Tempo; Tempo
does not depend on either. For each case it builds LeRobot's DiffusionPolicy at reduced widths
with random weights (random batch-norm statistics too) and random normalization statistics,
saves it with `save_pretrained` and its pre/post-processor pipelines, reads the directory with
Tempo's `load_checkpoint`, and feeds both the same frames, states and noise:

    LeRobot: frames / 255 -> preprocessor -> predict_action_chunk -> postprocessor
    Tempo:   module(frames (B, n, H, W, 3) uint8, state (B, n_obs_steps, S), past frames
             (B, n_obs_steps - 1, n, H, W, 3), has_past, fixed_noise = 1)

The noise is Tempo's fixed noise bank: LeRobot gets its draws, in order, through a patched
`torch.randn` (the start in LeRobot's conditional_sample, then diffusers' DDPM steps). Tempo's
fresh-noise path is run under the same patch and must give the same chunk, which checks that it
draws in LeRobot's order. Then the executed stream: LeRobot's `select_action` over
`steps` control steps (its observation and action queues) against Tempo's policy asked every
n_action_steps steps with the session's state window and the previous control steps' frames
(every step's, not only the asked ones').

It prints the relative error max|tempo - lerobot| / max|lerobot| and exits 1 if any exceeds the
tolerance (FP32, 1e-4 by default).

    PYTHONPATH=. /work/venvs/lerobot/bin/python -m scripts.parity.check_diffusion_parity
    ... -m scripts.parity.check_diffusion_parity --save-reference tests/data

`--save-reference DIR` writes the last case's directory (no camera: a ResNet-18 is 45 MB) as
`DIR/diffusion_lerobot_tiny/` with the inputs and LeRobot's chunk (`reference.safetensors`):
tests/unit/test_diffusion_reference.py checks Tempo against them in CI, without LeRobot.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import save_file

from policies.base import RobotContext
from policies.checkpoints.load import load_checkpoint
from policies.diffusion.model import DiffusionPolicy
from policies.tensor_policy import EagerPolicy

TINY = dict(
    down_dims=(16, 32), n_groups=4, kernel_size=3, diffusion_step_embed_dim=16,
    spatial_softmax_num_keypoints=4, horizon=16, n_action_steps=8,
)  # fmt: skip


@dataclass
class Case:
    name: str
    cameras: int = 2
    height: int = 48
    width: int = 56
    state_dim: int = 4
    env_dim: int = 0
    action_dim: int = 3
    options: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case(
        "DDPM 100 steps, epsilon, 2 cameras cropped, one encoder each, batch norm, 2 obs steps",
        options={**TINY, "crop_shape": (40, 48), "n_obs_steps": 2},
    ),
    Case(
        "DDIM 10 steps, sample, resize + crop_ratio, shared encoder, group norm, env state",
        cameras=1,
        env_dim=2,
        options={
            **TINY,
            "noise_scheduler_type": "DDIM",
            "num_inference_steps": 10,
            "prediction_type": "sample",
            "resize_shape": (40, 44),
            "crop_ratio": 0.9,
            "use_group_norm": True,
            "use_separate_rgb_encoder_per_camera": False,
            "n_obs_steps": 3,
            "beta_schedule": "linear",
            "clip_sample_range": 1.5,
        },
    ),  # fmt: skip
    Case(
        "DDPM 25 of 50 steps, environment state only, no clipping",
        cameras=0,
        env_dim=5,
        options={
            **TINY,
            "num_train_timesteps": 50,
            "num_inference_steps": 25,
            "clip_sample": False,
            "n_obs_steps": 2,
            "beta_schedule": "scaled_linear",
        },
    ),  # fmt: skip
]


def build_lerobot(case: Case, seed: int) -> tuple[Any, Any, dict[str, Any]]:
    """A LeRobot DiffusionPolicy with random weights and statistics, and its processors."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.diffusion.processor_diffusion import (
        make_diffusion_pre_post_processors,
    )

    torch.manual_seed(seed)
    shape = (3, case.height, case.width)
    inputs = {
        f"observation.images.cam{i}": PolicyFeature(type=FeatureType.VISUAL, shape=shape)
        for i in range(case.cameras)
    }
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(case.state_dim,))
    if case.env_dim:
        inputs["observation.environment_state"] = PolicyFeature(
            type=FeatureType.ENV, shape=(case.env_dim,)
        )
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(case.action_dim,))}
    mapping = {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ENV": "MEAN_STD", "ACTION": "MIN_MAX"}
    config = DiffusionConfig(
        input_features=inputs,
        output_features=outputs,
        normalization_mapping={k: NormalizationMode(v) for k, v in mapping.items()},
        device="cpu",
        pretrained_backbone_weights=None,
        push_to_hub=False,
        **case.options,
    )
    stats = {key: random_stats(feature.shape) for key, feature in {**inputs, **outputs}.items()}
    policy = DiffusionPolicy(config)
    with torch.no_grad():  # batch norm statistics that do something
        for name, buffer in policy.named_buffers():
            if name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
            elif name.endswith("running_mean"):
                buffer.normal_(0.0, 0.1)
    processors = make_diffusion_pre_post_processors(config, dataset_stats=stats)
    return policy.eval(), processors, stats


def random_stats(shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    size = shape[0]
    view = (size, 1, 1) if len(shape) == 3 else (size,)
    low = torch.rand(size) * -2.0 if len(shape) == 1 else torch.rand(size) * 0.1
    high = low + 0.5 + torch.rand(size) * (2.0 if len(shape) == 1 else 0.8)
    mean = (low + high) / 2 + torch.randn(size) * 0.05
    std = (high - low) / 4
    return {
        "mean": mean.view(view), "std": std.view(view), "min": low.view(view),
        "max": high.view(view),
    }  # fmt: skip


@contextmanager
def replayed_randn(draws: torch.Tensor, batch: int) -> Iterator[list[int]]:
    """torch.randn returns the bank's draws in order (each repeated over the batch); the list
    yielded counts the calls."""
    original = torch.randn
    calls: list[int] = []

    def randn(*size: Any, **kwargs: Any) -> torch.Tensor:
        shape = tuple(kwargs.get("size") or (size[0] if len(size) == 1 else size))
        draw = draws[len(calls)]
        if shape != (batch, *draw.shape):
            raise AssertionError(f"randn call {len(calls)} asked for {shape}")
        calls.append(1)
        return draw.expand(shape).clone().to(kwargs.get("dtype") or torch.float32)

    torch.randn = randn  # type: ignore[assignment]
    try:
        yield calls
    finally:
        torch.randn = original


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return float((ours - reference).abs().max() / reference.abs().max())


def lerobot_batch(case: Case, frames: torch.Tensor, state: torch.Tensor) -> dict[str, Any]:
    """LeRobot's batch of raw observations: frames uint8 (B, [T,] n, H, W, 3) -> float images
    per camera (B, [T,] 3, H, W) in [0, 1]; state (B, [T,] S + E) split in its two features."""
    batch: dict[str, Any] = {"observation.state": state[..., : case.state_dim].clone()}
    if case.env_dim:
        batch["observation.environment_state"] = state[..., case.state_dim :].clone()
    for i in range(case.cameras):
        image = frames[..., i, :, :, :].movedim(-1, -3).float() / 255
        batch[f"observation.images.cam{i}"] = image.contiguous()
    return batch


@torch.no_grad()
def run_case(case: Case, seed: int, save: Path | None, steps: int) -> dict[str, float]:
    policy, (preprocessor, postprocessor), stats = build_lerobot(case, seed)
    work = Path(tempfile.mkdtemp(prefix="tempo_diffusion_parity_"))
    policy.save_pretrained(work)
    preprocessor.save_pretrained(work)
    postprocessor.save_pretrained(work)
    tempo = load_checkpoint(work)
    module = cast(DiffusionPolicy, tempo.module)
    n_obs = policy.config.n_obs_steps
    n_act = policy.config.n_action_steps

    gen = torch.Generator().manual_seed(seed + 1)
    batch = 2
    total = steps + n_obs
    frames = torch.randint(
        0, 256, (batch, total, max(case.cameras, 1), case.height, case.width, 3), generator=gen
    ).to(torch.uint8)
    if not case.cameras:
        frames = frames[:, :, :0, :1, :1]
    low, high = stats["observation.state"]["min"], stats["observation.state"]["max"]
    robot = low + (high - low) * torch.rand(batch, total, case.state_dim, generator=gen)
    env = torch.randn(batch, total, case.env_dim, generator=gen)
    states = torch.cat([robot, env], dim=-1)
    bank = module.noise_bank

    # 1. One chunk from a full observation history (LeRobot's offline path: no queues).
    window = slice(0, n_obs)
    with replayed_randn(bank, batch):
        normalized = policy.predict_action_chunk(
            preprocessor(lerobot_batch(case, frames[:, window], states[:, window]))
        )
        reference = postprocessor(normalized)
    extra = [frames[:, : n_obs - 1], torch.ones(batch, 1)] if module.reads_past_frames else []
    args = (frames[:, n_obs - 1], states[:, window], *extra)
    ours = module(*args, torch.ones(batch, 1))
    errors = {"chunk": relative_error(ours[:, :n_act], reference)}
    with replayed_randn(bank, batch) as calls:
        fresh = module(*args, torch.zeros(batch, 1))
    errors["fresh-noise path"] = relative_error(fresh, ours)
    if len(calls) != module.sampler.draws:
        raise AssertionError(f"Tempo drew noise {len(calls)} times, LeRobot {module.sampler.draws}")
    if save is not None:
        save_reference(save, work, frames[:, :n_obs], states[:, window], bank, reference)

    # 2. The executed stream: LeRobot's queues against Tempo asked every n_action_steps steps.
    errors["stream"] = stream_error(case, policy, (preprocessor, postprocessor), tempo, frames,
                                    states, steps)  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return errors


def stream_error(
    case: Case,
    policy: Any,
    processors: tuple[Any, Any],
    tempo: Any,
    frames: torch.Tensor,
    states: torch.Tensor,
    steps: int,
) -> float:
    """Relative error of `steps` executed actions of robot 0: LeRobot's select_action, Tempo's
    EagerPolicy with the context a session would build (state window filled with the first
    state at the episode start; the frames of the previous control steps, every one of them,
    the first standing for the steps before the episode)."""
    preprocessor, postprocessor = processors
    module = cast(DiffusionPolicy, tempo.module)
    n_obs, n_act = policy.config.n_obs_steps, policy.config.n_action_steps
    eager = EagerPolicy(tempo)
    policy.reset()
    bank = module.noise_bank
    theirs, ours = [], []
    plan: np.ndarray | None = None
    for t in range(steps):
        with replayed_randn(bank, 1):
            raw = lerobot_batch(case, frames[:1, t], states[:1, t])
            theirs.append(postprocessor(policy.select_action(preprocessor(raw)))[0])
        if t % n_act == 0:
            first = [max(s, 0) for s in range(t - n_obs + 1, t + 1)]  # the episode's first fills
            past = None
            if module.reads_past_frames:
                cameras = tempo.spec.camera_names
                past = {name: frames[0, first[:-1], i].numpy() for i, name in enumerate(cameras)}
            context = RobotContext(
                step=t,
                episode_start=t == 0,
                state_history=states[0, first].numpy().astype(np.float32),
                memory={"fixed_noise": np.ones(1, dtype=np.float32)},
                past_frames=past,
            )
            images = {
                camera.name: frames[0, t, i].numpy() for i, camera in enumerate(tempo.spec.cameras)
            }
            plan = eager.predict(images, context).actions
        if plan is None:  # step 0 always asks
            raise AssertionError("no plan")
        ours.append(torch.from_numpy(plan[t % n_act]))
    return relative_error(torch.stack(ours), torch.stack(theirs))


def save_reference(
    root: Path,
    work: Path,
    frames: torch.Tensor,
    states: torch.Tensor,
    bank: torch.Tensor,
    chunk: torch.Tensor,
) -> None:
    """The LeRobot directory, the inputs and LeRobot's chunk, for tests/unit."""
    target = root / "diffusion_lerobot_tiny"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(work, target)
    save_file(
        {
            "frames": frames.contiguous(),  # (B, n_obs_steps, n_cameras, H, W, 3) uint8
            "states": states.contiguous(),  # (B, n_obs_steps, state_size)
            "noise": bank.contiguous(),  # the draws LeRobot was given, in order
            "lerobot_actions": chunk.contiguous(),  # (B, n_action_steps, action_dim)
        },
        str(target / "reference.safetensors"),
    )
    print(f"saved the reference to {target}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=24, help="control steps of the stream")
    parser.add_argument("--save-reference", type=Path, help="write the last case's files here")
    args = parser.parse_args(argv)
    try:
        import lerobot
    except ImportError:
        print("lerobot is not importable; install lerobot==0.6.1 and diffusers to run this check")
        return 2
    print(f"lerobot {getattr(lerobot, '__version__', '?')}, torch {torch.__version__}")
    worst = 0.0
    for index, case in enumerate(CASES):
        save = args.save_reference if index == len(CASES) - 1 else None
        errors = run_case(case, args.seed + 10 * index, save, args.steps)
        worst = max(worst, *errors.values())
        figures = ", ".join(f"{name} {value:.2e}" for name, value in errors.items())
        print(f"{case.name}: {figures}", flush=True)
    verdict = "PASS" if worst <= args.tolerance else "FAIL"
    print(f"{verdict}: worst relative error {worst:.2e} (tolerance {args.tolerance:.0e})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
