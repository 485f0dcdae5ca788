"""Read a LeRobot Diffusion Policy directory (as `DiffusionPolicy.save_pretrained` and its
processor pipelines write it, LeRobot 0.6) into Tempo.

What LeRobot writes, and where Tempo takes each part from:

    config.json          `"type": "diffusion"`, the architecture and scheduler options (same
                         names as Tempo's DiffusionConfig), `input_features` /
                         `output_features` with shapes, `normalization_mapping`.
    model.safetensors    the network under `diffusion.` (`diffusion.unet.mid_modules.0...`,
                         `diffusion.rgb_encoder.0.backbone.4.0.conv1.weight`, ...).
    policy_preprocessor.json / policy_postprocessor.json and their normalizer state files:
                         the statistics, read as for ACT (policies.act.lerobot_format; LeRobot's
                         older layout, buffers inside model.safetensors, too).

Renaming (LeRobot -> Tempo): `diffusion.` is dropped; the backbone, a torchvision ResNet cut
into an nn.Sequential in LeRobot, gets torchvision's own names back: `backbone.0` -> conv1,
`backbone.1` -> bn1, `backbone.4` .. `backbone.7` -> layer1 .. layer4. Statistics as ACT's
(`observation.state.min` -> `state_norm.min`, ...).

Options: the scheduler (noise_scheduler_type DDPM or DDIM, num_train_timesteps, beta_schedule
linear / scaled_linear / squaredcos_cap_v2, prediction_type epsilon or sample, clip_sample,
num_inference_steps), the vision options (resize_shape, crop_ratio -> crop_shape as LeRobot
derives it, crop_shape, use_group_norm, keypoints, one encoder per camera or one shared) and the
U-Net's are taken as they are; training-only ones are read past. Refused, each with a sentence
naming it: another policy type, a scheduler or option value Tempo does not serve, cameras of
different shapes, input features other than cameras / `observation.state` /
`observation.environment_state`, a missing normalizer file, and options Tempo does not know
(unless `allow_unknown_options`).

Serving: the chunk is the U-Net's actions from the current observation step on (horizon -
n_obs_steps + 1; LeRobot plays the first n_action_steps of them: the spec's execution says
so). Joint names as for ACT (policies.act.lerobot.resolve_joint_names).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from controller.errors import CheckpointError
from policies.act.lerobot import resolve_joint_names
from policies.act.lerobot_format import (
    POSTPROCESSOR_FILE,
    PREPROCESSOR_FILE,
    Features,
    open_lerobot_dir,
    refuse_unknown_options,
    stats_from_buffers,
    stats_from_processors,
)
from policies.base import CameraSpec, PolicySpec
from policies.checkpoints.execution import lerobot_execution
from policies.checkpoints.files import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    describe_validation_error,
    read_tensors,
)
from policies.checkpoints.tempo_format import build_module
from policies.diffusion.codec import diffusion_policy
from policies.diffusion.config import (
    BETA_SCHEDULES,
    PREDICTION_TYPES,
    SCHEDULER_TYPES,
    DiffusionConfig,
)
from policies.diffusion.model import DiffusionPolicy
from policies.tensor_policy import TensorPolicy

LEROBOT_TYPE = "diffusion"
# LeRobot 0.6's DiffusionConfig defaults, used only where a config.json leaves a field out.
_DEFAULTS: dict[str, Any] = {
    "n_obs_steps": 2,
    "horizon": 64,
    "n_action_steps": 32,
    "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ACTION": "MIN_MAX"},
    "vision_backbone": "resnet18",
    "resize_shape": None,
    "crop_ratio": 1.0,
    "crop_shape": None,
    "use_group_norm": False,
    "spatial_softmax_num_keypoints": 32,
    "use_separate_rgb_encoder_per_camera": True,
    "down_dims": [512, 1024, 2048],
    "kernel_size": 5,
    "n_groups": 8,
    "diffusion_step_embed_dim": 128,
    "use_film_scale_modulation": True,
    "noise_scheduler_type": "DDPM",
    "num_train_timesteps": 100,
    "beta_schedule": "squaredcos_cap_v2",
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "prediction_type": "epsilon",
    "clip_sample": True,
    "clip_sample_range": 1.0,
    "num_inference_steps": None,
}
# Options that only concern training, the Hub or LeRobot's runtime: read past.
_IGNORED = {
    "type", "input_features", "output_features", "device", "use_amp", "use_peft",
    "push_to_hub", "repo_id", "private", "tags", "license", "pretrained_path",
    "pretrained_revision", "pretrained_backbone_weights", "crop_is_random", "drop_n_last_frames",
    "gradient_checkpointing", "compile_model", "compile_mode", "do_mask_loss_for_padding",
    "optimizer_lr", "optimizer_betas", "optimizer_eps", "optimizer_weight_decay",
    "scheduler_name", "scheduler_warmup_steps",
}  # fmt: skip
_CONFIG_FIELDS = (
    "n_obs_steps", "horizon", "n_action_steps", "vision_backbone", "resize_shape",
    "use_group_norm", "spatial_softmax_num_keypoints", "use_separate_rgb_encoder_per_camera",
    "down_dims", "kernel_size", "n_groups", "diffusion_step_embed_dim",
    "use_film_scale_modulation", "noise_scheduler_type", "num_train_timesteps", "beta_schedule",
    "beta_start", "beta_end", "prediction_type", "clip_sample", "clip_sample_range",
    "num_inference_steps",
)  # fmt: skip
# LeRobot's nn.Sequential of torchvision's ResNet children -> their names.
_BACKBONE_NAMES = {
    "0": "conv1",
    "1": "bn1",
    "4": "layer1",
    "5": "layer2",
    "6": "layer3",
    "7": "layer4",
}
_BACKBONE_KEY = re.compile(r"^(rgb_encoder\.(?:\d+\.)?backbone\.)(\d+)\.(.*)$")


@dataclass
class LeRobotDiffusion:
    """A LeRobot Diffusion Policy directory read into Tempo's terms."""

    policy: TensorPolicy
    layout: str
    notes: list[str] = field(default_factory=list)


def read_lerobot_diffusion(
    src: str | Path,
    *,
    joint_names: Sequence[str] | None = None,
    allow_unknown_options: bool = False,
) -> LeRobotDiffusion:
    """Read a LeRobot Diffusion Policy directory into an FP32 TensorPolicy in eval mode (CPU)."""
    src, raw, config_path = open_lerobot_dir(src)
    options = _read_options(raw, config_path, allow_unknown_options)
    features = Features.parse(raw, config_path, family="Diffusion Policy")
    if len(set(features.sizes)) > 1:
        raise CheckpointError(
            f"{config_path}: the cameras have different shapes ({features.sizes}); Diffusion "
            "Policy reads cameras of one shape"
        )
    if features.state_dim == 0:
        raise CheckpointError(
            f"{config_path}: Diffusion Policy needs the robot state (observation.state) as input"
        )
    tensors = read_tensors(src / WEIGHTS_FILE)
    mapping = options["normalization_mapping"]
    if (src / PREPROCESSOR_FILE).exists() or (src / POSTPROCESSOR_FILE).exists():
        layout = f"processor files {PREPROCESSOR_FILE}, {POSTPROCESSOR_FILE}"
        norm = stats_from_processors(src, mapping, features)
    else:
        layout = "normalization buffers inside model.safetensors"
        norm = stats_from_buffers(tensors, mapping, features)
    weights = {}
    for key, tensor in tensors.items():
        if not key.startswith("diffusion."):
            raise CheckpointError(
                f"{src / WEIGHTS_FILE} has tensor '{key}', which is neither a model weight "
                "(diffusion.*) nor a normalization buffer Tempo knows; this is not a LeRobot "
                "Diffusion Policy checkpoint it can read"
            )
        weights[_tempo_name(key.removeprefix("diffusion."))] = tensor
    weights.update(norm.tensors)
    config = _diffusion_config(options, features, norm.modes, norm.eps, config_path)

    notes = list(norm.notes)
    joint_names = resolve_joint_names(
        src, joint_names, features.action_dim, notes, "set policy.joint_names"
    )
    execution = lerobot_execution(
        options["n_action_steps"],
        None,
        f"LeRobot {CONFIG_FILE}" + ("" if "n_action_steps" in raw else " (LeRobot's defaults)"),
    )
    try:
        spec = PolicySpec(
            cameras=tuple(
                CameraSpec(name=name, height=height, width=width)
                for name, (height, width) in zip(features.camera_names, features.sizes, strict=True)
            ),
            state_size=config.state_size,
            joint_names=tuple(joint_names),
            chunk_size=config.chunk_size,
            state_history=config.state_history,
            frame_history=config.frame_history,
            execution=execution,
        )
    except ValidationError as exc:
        raise CheckpointError(f"{config_path}: spec {describe_validation_error(exc)}") from None
    module = cast(DiffusionPolicy, build_module(config, weights, src / WEIGHTS_FILE))
    return LeRobotDiffusion(policy=diffusion_policy(module, spec), layout=layout, notes=notes)


def _tempo_name(name: str) -> str:
    """LeRobot's module name of a weight -> Tempo's (the backbone's children get names)."""
    match = _BACKBONE_KEY.match(name)
    if match is None:
        return name
    prefix, child, rest = match.groups()
    return f"{prefix}{_BACKBONE_NAMES.get(child, child)}.{rest}"


def _read_options(raw: dict[str, Any], path: Path, allow_unknown: bool) -> dict[str, Any]:
    policy_type = raw.get("type")
    if policy_type != LEROBOT_TYPE:
        raise CheckpointError(
            f"{path} describes a LeRobot '{policy_type}' policy, not a Diffusion Policy "
            f"(type '{LEROBOT_TYPE}')"
        )
    refuse_unknown_options(raw, path, _DEFAULTS, allow_unknown, ignored=_IGNORED)
    options = {name: raw.get(name, default) for name, default in _DEFAULTS.items()}
    for name, served in (
        ("noise_scheduler_type", SCHEDULER_TYPES),
        ("beta_schedule", BETA_SCHEDULES),
        ("prediction_type", PREDICTION_TYPES),
    ):
        if options[name] not in served:
            raise CheckpointError(
                f"{path}: {name} {options[name]!r} is not one Tempo serves ({', '.join(served)})"
            )
    if not isinstance(options["normalization_mapping"], dict):
        raise CheckpointError(f"{path}: normalization_mapping must be an object")
    return options


def _crop_shape(options: dict[str, Any]) -> Any:
    """The crop LeRobot's config arrives at: with a resize, crop_ratio decides it."""
    resize, ratio = options["resize_shape"], options["crop_ratio"]
    if resize is None:
        return options["crop_shape"]
    if not isinstance(ratio, int | float) or not 0 < ratio <= 1:
        raise CheckpointError(f"crop_ratio must be in (0, 1], got {ratio!r}")
    return None if ratio >= 1.0 else (int(resize[0] * ratio), int(resize[1] * ratio))


def _diffusion_config(
    options: dict[str, Any],
    features: Features,
    modes: dict[str, str],
    eps: float,
    path: Path,
) -> DiffusionConfig:
    values = {name: options[name] for name in _CONFIG_FIELDS}
    height, width = features.sizes[0] if features.sizes else (1, 1)
    try:
        values.update(
            modes,
            crop_shape=_crop_shape(options),
            n_cameras=len(features.sizes),
            image_height=height,
            image_width=width,
            state_dim=features.state_dim,
            env_state_dim=features.env_state_dim,
            action_dim=features.action_dim,
            norm_eps=eps,
        )
        return DiffusionConfig.model_validate(values)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    except ValidationError as exc:
        raise CheckpointError(f"{path}: {describe_validation_error(exc)}") from None
