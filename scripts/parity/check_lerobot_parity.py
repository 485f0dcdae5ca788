"""Check that Tempo's ACT computes what LeRobot's ACTPolicy computes, on the same inputs.

Needs `lerobot` (and its torchvision) importable; Tempo itself does not depend on either. For each
case it builds a LeRobot ACTPolicy with random weights (random frozen batch-norm statistics too)
and random normalization statistics, saves it with LeRobot's own `save_pretrained` (and, with
LeRobot >= 0.4, its pre/post-processor pipelines), loads the directory with Tempo's
`load_checkpoint`, and feeds both the same uint8 frames and states:

    LeRobot: frames / 255 -> preprocessor -> predict_action_chunk -> postprocessor
    Tempo:   module(*frames, state (B, 1, S)), frames uint8 (B, n, H, W, 3) per camera shape

It prints the relative error max|tempo - lerobot| / max|lerobot| of the actions in robot units
and of the normalized actions (the network alone), and exits 1 if any exceeds the tolerance.

    python -m scripts.parity.check_lerobot_parity          # small cases, seconds on a CPU
    python -m scripts.parity.check_lerobot_parity --aloha  # also LeRobot's default ALOHA-sized
                                                           # ACT (3 cameras 480x640, 14 joints)
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from policies.act.preprocess import prepare_images, prepare_state
from policies.checkpoints.load import load_checkpoint
from scripts.measure import max_relative_error


@dataclass
class Case:
    name: str
    cameras: int = 2
    height: int = 64
    width: int = 80
    state_dim: int = 6
    env_dim: int = 0
    action_dim: int = 6
    options: dict[str, Any] = field(default_factory=dict)
    modes: dict[str, str] = field(default_factory=dict)
    sizes: tuple[tuple[int, int], ...] | None = None  # per camera, when the shapes differ

    @property
    def frame_sizes(self) -> tuple[tuple[int, int], ...]:
        return self.sizes or ((self.height, self.width),) * self.cameras


SMALL_OPTIONS = dict(
    dim_model=64, n_heads=4, dim_feedforward=128, n_encoder_layers=2, n_decoder_layers=1,
    n_vae_encoder_layers=1, chunk_size=10, n_action_steps=10,
)  # fmt: skip

CASES = [
    Case("small, post-norm relu, VAE weights present", options=SMALL_OPTIONS),
    Case(
        "small, pre-norm gelu, 2 decoder layers, env state, MIN_MAX state/env",
        env_dim=3,
        options={
            **SMALL_OPTIONS,
            "pre_norm": True,
            "feedforward_activation": "gelu",
            "n_decoder_layers": 2,
            "use_vae": False,
        },
        modes={"STATE": "MIN_MAX", "ENV": "MIN_MAX"},
    ),  # fmt: skip
    Case(
        "resnet50 with a dilated layer4, one camera, MIN_MAX images",
        cameras=1,
        options={
            **SMALL_OPTIONS,
            "vision_backbone": "resnet50",
            "replace_final_stride_with_dilation": True,
        },
        modes={"VISUAL": "MIN_MAX"},
    ),  # fmt: skip
]
CASES.append(
    Case(
        "cameras of different shapes (64x80, 48x64, 64x80): one backbone batch per shape",
        cameras=3,
        sizes=((64, 80), (48, 64), (64, 80)),
        options=SMALL_OPTIONS,
    )
)
ALOHA = Case(
    "LeRobot default (ALOHA): resnet18, 3 cameras 480x640, 14 joints, chunk 100",
    cameras=3, height=480, width=640, state_dim=14, action_dim=14, options={},
)  # fmt: skip


def build_lerobot(case: Case, seed: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    """A LeRobot ACTPolicy with random weights and statistics, and its processors (or None)."""
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    torch.manual_seed(seed)
    inputs = {
        f"observation.images.cam{i}": PolicyFeature(type=FeatureType.VISUAL, shape=(3, h, w))
        for i, (h, w) in enumerate(case.frame_sizes)
    }
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(case.state_dim,))
    if case.env_dim:
        inputs["observation.environment_state"] = PolicyFeature(
            type=FeatureType.ENV, shape=(case.env_dim,)
        )
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(case.action_dim,))}
    mapping = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD", **case.modes}
    config = ACTConfig(
        input_features=inputs,
        output_features=outputs,
        normalization_mapping={k: NormalizationMode(v) for k, v in mapping.items()},
        device="cpu",
        pretrained_backbone_weights=None,
        push_to_hub=False,
        **case.options,
    )
    stats = {key: random_stats(feature.shape) for key, feature in {**inputs, **outputs}.items()}
    policy = ACTPolicy(config, dataset_stats=stats)
    processors = None
    if not hasattr(policy, "normalize_inputs"):  # LeRobot >= 0.4: stats live in processors
        from lerobot.policies.act.processor_act import make_act_pre_post_processors

        processors = make_act_pre_post_processors(config, dataset_stats=stats)
    with torch.no_grad():
        for name, buffer in policy.model.backbone.named_buffers():
            if name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
            elif name.endswith("weight"):
                buffer.uniform_(0.5, 1.5)
            elif name.endswith(("bias", "running_mean")):
                buffer.normal_(0.0, 0.1)
    return policy.eval(), processors, config, stats


def random_stats(shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    size = shape[0]
    view = (size, 1, 1) if len(shape) == 3 else (size,)
    low = torch.rand(size) * -2.0 if len(shape) == 1 else torch.rand(size) * 0.1
    high = low + 0.5 + torch.rand(size) * (2.0 if len(shape) == 1 else 0.8)
    mean = (low + high) / 2 + torch.randn(size) * 0.05
    std = (high - low) / 4
    return {
        "mean": mean.view(view), "std": std.view(view), "min": low.view(view),
        "max": high.view(view), "q01": low.view(view), "q99": high.view(view),
    }  # fmt: skip


@torch.no_grad()
def run_case(case: Case, seed: int, keep: Path | None) -> tuple[dict[str, float], float]:
    policy, processors, config, stats = build_lerobot(case, seed)
    work = keep / f"case_{seed}" if keep else Path(tempfile.mkdtemp(prefix="tempo_parity_"))
    policy.save_pretrained(work)
    if processors is not None:
        for pipeline in processors:
            pipeline.save_pretrained(work)
    tempo: Any = load_checkpoint(work).module  # Tempo's ACT: its config, norms and layouts

    gen = torch.Generator().manual_seed(seed + 1)
    batch_size = 2
    per_camera = [
        torch.randint(0, 256, (batch_size, h, w, 3), generator=gen).to(torch.uint8)
        for h, w in case.frame_sizes
    ]
    groups = tempo.config.frame_groups  # Tempo takes one tensor per camera shape
    frames = [torch.stack([per_camera[i] for i in cams], dim=1) for _, cams in groups]
    state_stats = stats["observation.state"]
    state = state_stats["mean"] + state_stats["std"] * torch.randn(
        batch_size, case.state_dim, generator=gen
    )
    env = torch.randn(batch_size, case.env_dim, generator=gen)
    full_state = torch.cat([state, env], dim=1)

    def lerobot(channels_last: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        batch = {"observation.state": state.clone()}
        if case.env_dim:
            batch["observation.environment_state"] = env.clone()
        for i in range(case.cameras):
            image = per_camera[i].permute(0, 3, 1, 2).float() / 255
            batch[f"observation.images.cam{i}"] = image.contiguous(memory_format=memory_format)
        if processors is None:
            return policy.predict_action_chunk(batch), None
        preprocessor, postprocessor = processors
        normalized = policy.predict_action_chunk(preprocessor(batch))
        return postprocessor(normalized), normalized

    # Convolutions pick different kernels for NCHW and channels-last tensors, so each Tempo
    # layout is compared with LeRobot fed the same layout; LeRobot against itself across the
    # two layouts shows the size of that kernel noise.
    reference, normalized_ref = lerobot(channels_last=False)
    reference_cl, _ = lerobot(channels_last=True)
    tempo_in = (*frames, full_state.unsqueeze(1))
    errors = {"actions": max_relative_error(tempo(*tempo_in), reference)}
    cl = copy.deepcopy(tempo).use_channels_last()
    errors["actions, channels-last"] = max_relative_error(cl(*tempo_in), reference_cl)
    if normalized_ref is not None:
        pixels = [
            prepare_images(
                group, tempo.pixel_scale, tempo.image_norm, None, True, torch.tensor(cams)
            ).contiguous()
            for group, (_, cams) in zip(frames, groups, strict=True)
        ]
        robot, env_state = prepare_state(
            full_state.unsqueeze(1), tempo.state_norm, tempo.env_state_norm, None, case.state_dim
        )
        normalized = tempo.predict_normalized(pixels, robot, env_state)
        errors["normalized actions"] = max_relative_error(normalized, normalized_ref)
    noise = max_relative_error(reference_cl, reference)
    return errors, noise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aloha", action="store_true", help="also run the ALOHA-sized model")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="write the LeRobot directories here")
    args = parser.parse_args(argv)
    try:
        import lerobot
    except ImportError:
        print("lerobot is not importable; install it (with torchvision) to run this check")
        return 2
    print(f"lerobot {getattr(lerobot, '__version__', '?')}, torch {torch.__version__}")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    worst = 0.0
    for index, case in enumerate([*CASES, *([ALOHA] if args.aloha else [])]):
        errors, noise = run_case(case, args.seed + 10 * index, args.keep)
        worst = max(worst, *errors.values())
        figures = ", ".join(f"{name} {value:.2e}" for name, value in errors.items())
        print(f"{case.name}: {figures} (LeRobot NCHW vs channels-last: {noise:.2e})")
    verdict = "PASS" if worst <= args.tolerance else "FAIL"
    print(f"{verdict}: worst relative error {worst:.2e} (tolerance {args.tolerance:.0e})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
