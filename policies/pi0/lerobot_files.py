"""A pi0 / pi0.5 directory as LeRobot's `PI0Policy` / `PI05Policy.save_pretrained` writes it,
read into `Pi0CheckpointFiles` (the layout is described in `policies.pi0.checkpoint_files`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from controller.errors import CheckpointError
from policies.act.lerobot_format import Features
from policies.checkpoints.files import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    describe_validation_error,
    read_safetensors_header,
    read_tensors,
)
from policies.pi0.checkpoint_contents import (
    PALIGEMMA_TOKENIZER,
    Family,
    Pi0CheckpointFiles,
    Shape,
    check_sizes,
    fix_keys,
)
from policies.pi0.norm_stats import (
    PREPROCESSOR_FILE,
    STATE_KEY,
    PipelineStep,
    read_lerobot_pipelines,
)

TOKENIZER_DIR = "tokenizer"
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json")  # SentencePiece, or HF's fast tokenizer


class _LeRobotPi0Options(BaseModel):
    """PI0Config's fields (LeRobot's configuration_pi0.py), with its defaults for older files
    that lack some. Options that do not shape inference (_IGNORED) are read past."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["pi0", "pi05"]
    paligemma_variant: Literal["gemma_300m", "gemma_2b"] = "gemma_2b"
    action_expert_variant: Literal["gemma_300m", "gemma_2b"] = "gemma_300m"
    dtype: Literal["bfloat16", "float32"] = "float32"
    n_obs_steps: Literal[1] = 1
    chunk_size: int = 50
    n_action_steps: int = 50
    max_state_dim: int = 32
    max_action_dim: int = 32
    num_inference_steps: int = 10
    min_period: float = 4e-3
    max_period: float = 4.0
    use_relative_actions: bool = False
    image_resolution: tuple[int, int] = (224, 224)
    empty_cameras: int = 0
    tokenizer_max_length: int = 48
    normalization_mapping: dict[str, str] = {
        "VISUAL": "IDENTITY",
        "STATE": "MEAN_STD",
        "ACTION": "MEAN_STD",
    }
    action_feature_names: list[str] | None = None


class _LeRobotPi05Options(_LeRobotPi0Options):
    """PI05Config adds observation memory (refused when on) and trained RTC (training only)."""

    tokenizer_max_length: int = 200
    normalization_mapping: dict[str, str] = {
        "VISUAL": "IDENTITY",
        "STATE": "QUANTILES",
        "ACTION": "QUANTILES",
    }
    use_visual_memory: bool = False
    use_proprioceptive_memory: bool = False


_FIELDS = (
    "chunk_size", "n_action_steps", "max_state_dim", "max_action_dim", "num_inference_steps",
    "tokenizer_max_length", "empty_cameras", "image_resolution", "paligemma_variant",
    "action_expert_variant", "dtype", "min_period", "max_period",
)  # fmt: skip
# Features (read by Features.parse) and options of training, the Hub or LeRobot's runtime.
_IGNORED = frozenset({
    "input_features", "output_features", "time_sampling_beta_alpha", "time_sampling_beta_beta",
    "time_sampling_scale", "time_sampling_offset", "relative_exclude_joints", "rtc_config",
    "gradient_checkpointing", "compile_model", "compile_mode", "device", "freeze_vision_encoder",
    "train_expert_only", "optimizer_lr", "optimizer_betas", "optimizer_eps",
    "optimizer_weight_decay", "optimizer_grad_clip_norm", "scheduler_warmup_steps",
    "scheduler_decay_steps", "scheduler_decay_lr", "use_amp", "use_peft", "push_to_hub",
    "repo_id", "private", "tags", "license", "pretrained_path", "pretrained_revision",
    # pi0.5 only: observation memory's shape (memory itself is refused), trained RTC
    "memory_frames", "memory_stride", "memory_temporal_attention_every",
    "rtc_training_max_delay",
})  # fmt: skip
_REFUSED = {  # options that change what the network reads or returns, not carried over
    "use_relative_actions": "the policy predicts actions relative to the state, which this "
    "reader does not carry over",
    "use_visual_memory": "pi0.5's observation memory is not supported",
    "use_proprioceptive_memory": "pi0.5's observation memory is not supported",
}
_OLD_LAYOUT = ("proj_width", "resize_imgs_with_padding", "num_steps")


def read_lerobot_pi0(src: Path, raw: dict[str, Any], *, tensors: bool) -> Pi0CheckpointFiles:
    """The LeRobot pi0 / pi05 directory `src` whose config.json holds `raw`; its weights are
    loaded only when `tensors` (their shapes always, from the header)."""
    config_path = src / CONFIG_FILE
    if raw.get("type") not in ("pi0", "pi05"):
        raise CheckpointError(
            f"{config_path} describes a LeRobot '{raw.get('type')}' policy; this reader takes "
            "pi0 and pi05"
        )
    old = [name for name in _OLD_LAYOUT if name in raw]
    if old:
        raise CheckpointError(
            f"{config_path} uses LeRobot's pre-openpi pi0 layout ({old[0]}); load and re-save it "
            "with a current LeRobot first"
        )
    refused = next((name for name in _REFUSED if raw.get(name)), None)
    if refused is not None:
        raise CheckpointError(f"{config_path}: {refused} is on; {_REFUSED[refused]}")
    model = _LeRobotPi05Options if raw["type"] == "pi05" else _LeRobotPi0Options
    try:
        options = model.model_validate({k: v for k, v in raw.items() if k not in _IGNORED})
    except ValidationError as exc:
        raise CheckpointError(f"{config_path}: {describe_validation_error(exc)}") from None
    family = options.type
    fields = {name: getattr(options, name) for name in _FIELDS}
    if family == "pi05":  # training-time RTC: allows policy.rtc.mode trained
        fields["rtc_training_max_delay"] = int(raw.get("rtc_training_max_delay") or 0)
    check_sizes(fields, config_path)
    notes: list[str] = []

    features = Features.parse(raw, config_path, family="pi0", env_state=False)
    if not features.state_dim:
        raise CheckpointError(
            f"{config_path}: pi0 reads cameras and {STATE_KEY}, and this policy has no {STATE_KEY}"
        )
    if features.state_dim > options.max_state_dim or features.action_dim > options.max_action_dim:
        raise CheckpointError(
            f"{config_path}: the state ({features.state_dim}) or action ({features.action_dim}) "
            f"is longer than max_state_dim / max_action_dim ({options.max_state_dim} / "
            f"{options.max_action_dim})"
        )
    empty = {f"observation.images.empty_camera_{i}" for i in range(options.empty_cameras)}
    cameras = [
        (name, size)
        for key, name, size in zip(
            features.camera_keys, features.camera_names, features.sizes, strict=True
        )
        if key not in empty
    ]
    if not cameras and not options.empty_cameras:
        raise CheckpointError(f"{config_path} declares no camera; pi0 needs at least one image")

    mapping = options.normalization_mapping
    if mapping.get("VISUAL", "IDENTITY") != "IDENTITY":
        raise CheckpointError(
            f"{config_path}: images are normalized with {mapping['VISUAL']}; pi0 scales them "
            "itself and reads them un-normalized (VISUAL: IDENTITY)"
        )
    names = options.action_feature_names
    if names is not None and len(names) != features.action_dim:
        raise CheckpointError(
            f"{config_path}: action_feature_names has {len(names)} names for "
            f"{features.action_dim} actions"
        )
    norm, pre = read_lerobot_pipelines(src, features.state_dim, features.action_dim, mapping, notes)
    tokenizer, tokenizer_name = _tokenizer(pre.get("tokenizer_processor"), src, fields, notes)
    shapes, weights = _lerobot_weights(src / WEIGHTS_FILE, family, notes, tensors)
    return Pi0CheckpointFiles(
        path=src,
        family=family,
        source="lerobot",
        config_fields=fields,
        camera_names=tuple(name for name, _ in cameras),
        image_sizes=tuple(size for _, size in cameras),
        state_size=features.state_dim,
        action_size=features.action_dim,
        action_names=tuple(names) if names is not None else None,
        tensors=weights,
        norm=norm,
        tokenizer=tokenizer,
        tokenizer_name=tokenizer_name,
        notes=tuple(notes),
        shapes=shapes,
    )


def _tokenizer(
    step: PipelineStep | None, src: Path, fields: dict[str, Any], notes: list[str]
) -> tuple[Path | None, str]:
    """The tokenizer folder shipped with a LeRobot checkpoint (the tokenizer step saves it as
    an artifact, `tokenizer/`, and names it), else None, and the name the step gives."""
    if step is None:
        raise CheckpointError(f"{src / PREPROCESSOR_FILE} has no tokenizer_processor step")
    name = step.config.get("tokenizer_name") or PALIGEMMA_TOKENIZER
    if not isinstance(name, str):
        raise CheckpointError(f"{src / PREPROCESSOR_FILE}: tokenizer_name must be a string")
    max_length = step.config.get("max_length")
    if isinstance(max_length, int) and max_length != fields["tokenizer_max_length"]:
        notes.append(
            f"the tokenizer step pads to {max_length} tokens, config.json says "
            f"{fields['tokenizer_max_length']}; LeRobot runs the step's value, so it is used"
        )
        fields["tokenizer_max_length"] = max_length
    candidates = (
        [src / TOKENIZER_DIR] if Path(name).is_absolute() else [src / name, src / TOKENIZER_DIR]
    )
    for folder in candidates:
        inside = folder.resolve().is_relative_to(src.resolve())
        if inside and any((folder / file).is_file() for file in TOKENIZER_FILES):
            return folder, name
    notes.append(f"no tokenizer ships with the checkpoint; it names {name}")
    return None, name


def _lerobot_weights(
    path: Path, family: Family, notes: list[str], tensors: bool
) -> tuple[dict[str, Shape], dict[str, torch.Tensor]]:
    """(shapes, tensors) of the weights in PI0Pytorch's key space (no `model.` prefix, renamed);
    tensors is empty unless `tensors`. The keys are checked on the header, before any load."""
    header = read_safetensors_header(path)
    stray = next((key for key in header if not key.startswith("model.")), None)
    if stray is not None:
        raise CheckpointError(
            f"{path} has tensor '{stray}' outside the model (model.*); it is not a LeRobot pi0 "
            "checkpoint of the current layout"
        )
    shapes = {key.removeprefix("model."): shape for key, (_, shape) in header.items()}
    fixed_shapes = fix_keys(shapes, family, notes)
    if not tensors:
        return fixed_shapes, {}
    loaded = {key.removeprefix("model."): t for key, t in read_tensors(path).items()}
    return fixed_shapes, fix_keys(loaded, family, [])  # its notes are the shapes' ones
