"""Read a pi0 / pi0.5 checkpoint, as LeRobot or openpi writes it, into one neutral form.

    files = read_pi0_checkpoint("~/ckpt/pi05_droid_pytorch")
    files.family, files.source, files.config_fields["chunk_size"], files.tensors, files.norm

LeRobot (`PI0Policy` / `PI05Policy.save_pretrained`):

    config.json          `"type": "pi0"` / `"pi05"` and every PI0Config / PI05Config field
                         (draccus), `input_features` / `output_features` with shapes.
    model.safetensors    PI0Pytorch's state dict under `model.` (`model.state_proj.weight`,
                         `model.paligemma_with_expert.paligemma.model.vision_tower...`).
    policy_preprocessor.json, policy_postprocessor.json and their normalizer state files
                         (see `policies.pi0.norm_stats`); a `tokenizer/` folder where the
                         tokenizer step saved its tokenizer.

openpi (`examples/convert_jax_model_to_pytorch.py`):

    config.json          {"action_dim", "action_horizon", "paligemma_variant",
                         "action_expert_variant", "precision"}; nothing says pi0 or pi0.5,
                         so the weights do (pi0.5 has `time_mlp_in`, pi0 `state_proj`).
    model.safetensors    PI0Pytorch's state dict, no prefix; `save_model` drops the tied
                         `...paligemma.model.language_model.embed_tokens.weight` (kept:
                         `...paligemma.lm_head.weight`).
    assets/<asset_id>/norm_stats.json

`tensors` are in PI0Pytorch's key space without the `model.` prefix, renamed the way LeRobot's
`_fix_pytorch_state_dict_keys` does. No pickle is read: a directory with only .bin / .pt /
.pth weights is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from controller.errors import CheckpointError
from policies.act.lerobot_format import Features
from policies.checkpoints.files import (
    CONFIG_FILE,
    FORMAT,
    WEIGHTS_FILE,
    describe_validation_error,
    locate_checkpoint,
    read_json,
    read_safetensors_header,
    read_tensors,
)
from policies.pi0.norm_stats import (
    PREPROCESSOR_FILE,
    STATE_KEY,
    NormStats,
    PipelineStep,
    find_openpi_norm_stats,
    read_lerobot_pipelines,
    read_openpi_norm_stats,
)

Family = Literal["pi0", "pi05"]
Source = Literal["lerobot", "openpi"]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
OPENPI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")  # openpi IMAGE_KEYS
OPENPI_IMAGE_SIZE = (224, 224)  # openpi IMAGE_RESOLUTION
OPENPI_DENOISING_STEPS = 10  # PI0Pytorch.sample_actions(num_steps=10)
TOKENIZER_DIR = "tokenizer"
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json")  # SentencePiece, or HF's fast tokenizer
PALIGEMMA_TOKENIZER = "google/paligemma-3b-pt-224"

_LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
_EMBED_TOKENS = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
_EXPERT = "paligemma_with_expert.gemma_expert.model."


@dataclass(frozen=True)
class Pi0CheckpointFiles:
    """A pi0 / pi0.5 checkpoint directory read into one form, whichever program wrote it.

    config_fields uses LeRobot's PI0Config names: chunk_size, n_action_steps, max_state_dim,
    max_action_dim, num_inference_steps, tokenizer_max_length, empty_cameras, image_resolution
    ((h, w)), paligemma_variant, action_expert_variant, dtype, min_period, max_period.
    camera_names / image_sizes: the real cameras in model order (LeRobot's empty cameras are
    counted by config_fields["empty_cameras"], not listed). tokenizer: the folder shipped with
    the checkpoint that holds tokenizer.model and / or tokenizer.json (as a HF tokenizer's
    save_pretrained writes them), else None (then tokenizer_name names the Hub tokenizer).
    """

    path: Path
    family: Family
    source: Source
    config_fields: dict[str, Any]
    camera_names: tuple[str, ...]
    image_sizes: tuple[tuple[int, int], ...]
    state_size: int
    action_size: int
    action_names: tuple[str, ...] | None
    tensors: dict[str, torch.Tensor]
    norm: NormStats
    tokenizer: Path | None
    tokenizer_name: str
    notes: tuple[str, ...]


def read_pi0_checkpoint(path: str | Path, *, asset_id: str | None = None) -> Pi0CheckpointFiles:
    """Read the LeRobot or openpi pi0 / pi0.5 directory `path` (for openpi, the norm stats of
    `asset_id`, needed only when assets/ holds several), or a CheckpointError saying why not."""
    src = locate_checkpoint(Path(path).expanduser())
    if not src.is_dir():
        raise CheckpointError(f"checkpoint directory {src} does not exist or is not a folder")
    if not (src / CONFIG_FILE).exists() and (src / "params").is_dir():
        raise CheckpointError(
            f"{src} is an openpi JAX checkpoint (params/); convert it to PyTorch with openpi's "
            "examples/convert_jax_model_to_pytorch.py first"
        )
    raw = read_json(src / CONFIG_FILE)
    _require_safetensors(src)
    if "type" in raw and "format" not in raw:
        return _read_lerobot(src, raw)
    if raw.get("format") == FORMAT:
        raise CheckpointError(f"{src} is a Tempo checkpoint, not a pi0 one; load it directly")
    if "action_horizon" in raw and "action_dim" in raw:
        return _read_openpi(src, raw, asset_id)
    raise CheckpointError(
        f'{src / CONFIG_FILE} is neither a LeRobot policy config (no "type") nor an openpi '
        "PyTorch config (no action_horizon and action_dim); point at a pi0 or pi0.5 checkpoint"
    )


def _require_safetensors(src: Path) -> None:
    if (src / WEIGHTS_FILE).exists():
        return
    pickled = sorted(p.name for p in src.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickled:
        raise CheckpointError(
            f"{src} holds its weights as {pickled[0]}, a pickle file Tempo does not load; "
            f"convert them to {WEIGHTS_FILE}"
        )
    raise CheckpointError(f"{src / WEIGHTS_FILE} is missing; a pi0 checkpoint needs its weights")


# --- LeRobot ------------------------------------------------------------------------------


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


def _read_lerobot(src: Path, raw: dict[str, Any]) -> Pi0CheckpointFiles:
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
    _check_sizes(fields, config_path)
    notes: list[str] = []

    features = Features.parse(raw, config_path)
    if features.env_state_dim or not features.state_dim:
        raise CheckpointError(
            f"{config_path}: pi0 reads cameras and {STATE_KEY} only (it has "
            f"{'an environment state' if features.env_state_dim else f'no {STATE_KEY}'})"
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
    tensors = _lerobot_tensors(src / WEIGHTS_FILE)
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
        tensors=_fix_keys(tensors, family, notes),
        norm=norm,
        tokenizer=tokenizer,
        tokenizer_name=tokenizer_name,
        notes=tuple(notes),
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


def _lerobot_tensors(path: Path) -> dict[str, torch.Tensor]:
    tensors = read_tensors(path)
    stray = next((key for key in tensors if not key.startswith("model.")), None)
    if stray is not None:
        raise CheckpointError(
            f"{path} has tensor '{stray}' outside the model (model.*); it is not a LeRobot pi0 "
            "checkpoint of the current layout"
        )
    return {key.removeprefix("model."): tensor for key, tensor in tensors.items()}


# --- openpi -------------------------------------------------------------------------------


class _OpenpiOptions(BaseModel):
    """The config.json openpi's convert_jax_model_to_pytorch.py writes (all five fields);
    `pi05` is not written by it but accepted, and then checked against the weights."""

    model_config = ConfigDict(extra="forbid")
    action_dim: int
    action_horizon: int
    paligemma_variant: Literal["gemma_300m", "gemma_2b"]
    action_expert_variant: Literal["gemma_300m", "gemma_2b"]
    precision: Literal["bfloat16", "float32"]
    pi05: bool | None = None


def _read_openpi(src: Path, raw: dict[str, Any], asset_id: str | None) -> Pi0CheckpointFiles:
    config_path = src / CONFIG_FILE
    try:
        options = _OpenpiOptions.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(f"{config_path}: {describe_validation_error(exc)}") from None
    header = read_safetensors_header(src / WEIGHTS_FILE)
    if "time_mlp_in.weight" in header:
        family: Family = "pi05"
    elif "state_proj.weight" in header and "action_time_mlp_in.weight" in header:
        family = "pi0"
    else:
        raise CheckpointError(
            f"{src / WEIGHTS_FILE} has neither pi0.5's time_mlp_in nor pi0's state_proj and "
            "action_time_mlp_in; it is not an openpi PI0Pytorch state dict"
        )
    if options.pi05 is not None and options.pi05 != (family == "pi05"):
        raise CheckpointError(
            f"{config_path} says pi05 is {options.pi05} but the weights are {family}'s"
        )
    fields: dict[str, Any] = {
        "chunk_size": options.action_horizon,
        "n_action_steps": options.action_horizon,
        "max_state_dim": options.action_dim,  # openpi pads the state to action_dim too
        "max_action_dim": options.action_dim,
        "num_inference_steps": OPENPI_DENOISING_STEPS,
        "tokenizer_max_length": 200 if family == "pi05" else 48,  # Pi0Config.__post_init__
        "empty_cameras": 0,
        "image_resolution": OPENPI_IMAGE_SIZE,
        "paligemma_variant": options.paligemma_variant,
        "action_expert_variant": options.action_expert_variant,
        "dtype": options.precision,
        "min_period": 4e-3,
        "max_period": 4.0,
    }
    _check_sizes(fields, config_path)
    stats_path = find_openpi_norm_stats(src, asset_id)
    # openpi's data config: use_quantile_norm = model_type != PI0
    norm = read_openpi_norm_stats(
        stats_path, "QUANTILES" if family == "pi05" else "MEAN_STD", options.action_dim
    )
    notes = [
        f"normalization statistics from {stats_path.relative_to(src)}",
        f"state and action sizes ({norm.state.size}, {norm.action.size}) come from the "
        "statistics; openpi's config.json does not record them",
        f"cameras are openpi's model slots {', '.join(OPENPI_CAMERAS)}; which robot camera "
        "feeds each was set by the training config's data transforms, not in the checkpoint",
        f"n_action_steps is the whole chunk ({options.action_horizon}); openpi leaves replanning "
        f"to the client, num_inference_steps is PI0Pytorch's default "
        f"({OPENPI_DENOISING_STEPS})",
        f"no tokenizer ships with an openpi checkpoint; openpi uses {PALIGEMMA_TOKENIZER}'s "
        "SentencePiece model",
    ]
    tensors = _fix_keys(read_tensors(src / WEIGHTS_FILE), family, notes)
    return Pi0CheckpointFiles(
        path=src,
        family=family,
        source="openpi",
        config_fields=fields,
        camera_names=OPENPI_CAMERAS,
        image_sizes=(OPENPI_IMAGE_SIZE,) * len(OPENPI_CAMERAS),
        state_size=norm.state.size,
        action_size=norm.action.size,
        action_names=None,
        tensors=tensors,
        norm=norm,
        tokenizer=None,
        tokenizer_name=PALIGEMMA_TOKENIZER,
        notes=tuple(notes),
    )


# --- shared -------------------------------------------------------------------------------


def _check_sizes(fields: dict[str, Any], path: Path) -> None:
    for name in ("chunk_size", "n_action_steps", "max_state_dim", "max_action_dim"):
        if fields[name] < 1:
            raise CheckpointError(f"{path}: {name} must be at least 1, not {fields[name]}")
    if fields["num_inference_steps"] < 1 or fields["tokenizer_max_length"] < 1:
        raise CheckpointError(
            f"{path}: num_inference_steps and tokenizer_max_length must be at least 1"
        )
    if fields["n_action_steps"] > fields["chunk_size"]:
        raise CheckpointError(
            f"{path}: n_action_steps ({fields['n_action_steps']}) exceeds chunk_size "
            f"({fields['chunk_size']})"
        )
    height, width = fields["image_resolution"]
    if height != width or height < 1:
        raise CheckpointError(
            f"{path}: image_resolution {height}x{width} is not square; PaliGemma needs a square"
        )


def _fix_keys(
    tensors: dict[str, torch.Tensor], family: Family, notes: list[str]
) -> dict[str, torch.Tensor]:
    """The renames of LeRobot's `_fix_pytorch_state_dict_keys` (modeling_pi0.py / _pi05.py),
    applied to keys without the `model.` prefix."""
    fixed: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    old_mlp, new_mlp = ("time_mlp_", "action_time_mlp_")
    if family == "pi05":
        old_mlp, new_mlp = new_mlp, old_mlp
    for key, tensor in tensors.items():
        if family == "pi05" and (key.startswith("state_proj.") or _plain_expert_norm(key)):
            dropped.append(key)  # pi0.5 feeds the state as text; its expert norms are adaRMS
            continue
        if key.startswith(f"{old_mlp}in.") or key.startswith(f"{old_mlp}out."):
            key = new_mlp + key.removeprefix(old_mlp)
        fixed[key] = tensor
    if dropped:
        notes.append(f"dropped {len(dropped)} tensors pi0.5 has no use for ({dropped[0]}, ...)")
    if _LM_HEAD in fixed and _EMBED_TOKENS not in fixed:
        fixed[_EMBED_TOKENS] = fixed[_LM_HEAD]  # tied weights: safetensors kept one name
        notes.append("the token embedding is the language model head (tied weights, one tensor)")
    return fixed


def _plain_expert_norm(key: str) -> bool:
    if not key.startswith(_EXPERT):
        return False
    rest = key.removeprefix(_EXPERT)
    if rest == "norm.weight":
        return True
    parts = rest.split(".")
    return (
        len(parts) == 4
        and parts[0] == "layers"
        and parts[1].isdigit()
        and parts[2] in ("input_layernorm", "post_attention_layernorm")
        and parts[3] == "weight"
    )
