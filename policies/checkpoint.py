"""Checkpoints: Tempo's own format, and the front door for LeRobot ACT directories.

A Tempo checkpoint is a directory with two files:

    config.json          {"format": "tempo", "format_version": 1, "policy_type": "act",
                          "spec": <PolicySpec>, "model": <ACTConfig>}
    model.safetensors    every parameter and persistent buffer of the module, normalization
                         statistics included, float32

Loading never runs pickle: JSON is validated with pydantic, tensors come from safetensors. Every
problem is a `CheckpointError` whose message names the file and what is wrong: a missing file,
unreadable JSON, an invalid or unsupported config field, missing / unexpected / mis-shaped
tensors, non-finite values.

`load_checkpoint` also accepts a LeRobot ACT directory (`config.json` with `"type": "act"`) and
converts it in memory; `policies.lerobot_import.import_lerobot` writes the converted form to disk.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Literal, cast

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from controller.errors import CheckpointError
from policies.act.backbone import feature_map_size
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.tensor_policy import TensorPolicy

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "tempo"
FORMAT_VERSION = 1
_MAX_CONFIG_BYTES = 4 * 1024 * 1024
_NAMES_SHOWN = 4


class CheckpointConfig(BaseModel):
    """The `config.json` of a Tempo checkpoint."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["tempo"]
    format_version: Literal[1]
    policy_type: Literal["act"]
    spec: PolicySpec
    model: ACTConfig


# ---- Saving ------------------------------------------------------------------------------------


def save_checkpoint(directory: str | Path, policy: TensorPolicy) -> Path:
    """Write `policy` as a Tempo checkpoint into `directory` (created if needed; the two files
    are replaced atomically if present). Returns the directory."""
    module = policy.module
    if not isinstance(module, ACT):
        raise CheckpointError(
            f"cannot save a {type(module).__name__} module: Tempo checkpoints hold ACT models only"
        )
    check_spec_matches(policy.spec, module.config, "the policy being saved")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy_type": module.policy_type,
        "spec": policy.spec.model_dump(mode="json"),
        "model": module.config.model_dump(mode="json"),
    }
    tensors = {
        name: tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().clone()
        for name, tensor in module.state_dict().items()
    }
    metadata = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "policy_type": "act"}
    _atomic_write(directory / WEIGHTS_FILE, lambda path: save_file(tensors, path, metadata))
    text = json.dumps(document, indent=2) + "\n"
    _atomic_write(directory / CONFIG_FILE, lambda path: Path(path).write_text(text))
    return directory


def _atomic_write(target: Path, write: Any) -> None:
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        write(str(temporary))
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


# ---- Loading -----------------------------------------------------------------------------------


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu") -> TensorPolicy:
    """Load a Tempo checkpoint, or a LeRobot ACT directory, as an FP32 module in eval mode."""
    directory = Path(directory)
    kind, raw = detect_format(directory)
    if kind == "lerobot":
        from policies.lerobot_import import read_lerobot_act

        policy = read_lerobot_act(directory).policy
    else:
        parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
        tensors = read_tensors(directory / WEIGHTS_FILE)
        module = build_module(parsed.model, tensors, directory / WEIGHTS_FILE)
        policy = TensorPolicy(spec=parsed.spec, module=module)
    policy.module.to(device).eval()
    return policy


def detect_format(directory: Path) -> tuple[Literal["tempo", "lerobot"], dict[str, Any]]:
    """Which kind of checkpoint `directory` holds, from its config.json (read once, returned)."""
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist or is not a folder")
    raw = read_json(directory / CONFIG_FILE)
    if raw.get("format") == FORMAT:
        return "tempo", raw
    if "type" in raw and "format" not in raw:
        return "lerobot", raw
    raise CheckpointError(
        f'{directory / CONFIG_FILE} is neither a Tempo checkpoint (no "format": "tempo") nor a '
        'LeRobot policy (no "type"); point Tempo at a checkpoint directory'
    )


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or a CheckpointError that says why not."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; a checkpoint directory needs it")
    if path.stat().st_size > _MAX_CONFIG_BYTES:
        raise CheckpointError(
            f"{path} is larger than {_MAX_CONFIG_BYTES} bytes; it is not a config"
        )
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); fix or regenerate it") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} must hold a JSON object, not {type(value).__name__}")
    return value


def parse_tempo_config(raw: dict[str, Any], path: Path) -> CheckpointConfig:
    """Validate a Tempo config.json; the error names the first invalid field."""
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {version!r}; this Tempo reads version {FORMAT_VERSION} "
            "(upgrade Tempo, or re-export the checkpoint)"
        )
    try:
        parsed = CheckpointConfig.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(f"{path}: {describe_validation_error(exc)}") from None
    check_spec_matches(parsed.spec, parsed.model, str(path))
    return parsed


def describe_validation_error(exc: ValidationError) -> str:
    """One sentence about the first problem pydantic found, naming the field."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "missing":
        return f"field '{field}' is missing"
    if first["type"] == "extra_forbidden":
        return f"field '{field}' is not a known option"
    if field:
        return f"field '{field}' is invalid: {message}"
    return f"invalid: {message}"


def check_spec_matches(spec: PolicySpec, config: ACTConfig, where: str) -> None:
    """The PolicySpec and the model config must describe the same interface."""
    problems = []
    if len(spec.cameras) != config.n_cameras:
        problems.append(f"{len(spec.cameras)} cameras in spec, {config.n_cameras} in model")
    for camera in spec.cameras:
        if (camera.height, camera.width) != (config.image_height, config.image_width):
            problems.append(
                f"camera '{camera.name}' is {camera.height}x{camera.width} in spec, the model "
                f"reads {config.image_height}x{config.image_width}"
            )
    pairs = [
        ("state_size", spec.state_size, config.state_size),
        ("state_history", spec.state_history, config.state_history),
        ("chunk_size", spec.chunk_size, config.chunk_size),
        ("action size (joint_names)", spec.action_dim, config.action_dim),
    ]
    problems += [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]
    if problems:
        raise CheckpointError(f"{where}: spec and model disagree: {'; '.join(problems)}")


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file, or a CheckpointError (missing, truncated, corrupt)."""
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; a checkpoint directory needs it")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error type, or OSError
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({exc}); it may be truncated or "
            "corrupt: copy it again"
        ) from None


def build_module(config: ACTConfig, tensors: dict[str, torch.Tensor], source: Path) -> ACT:
    """An ACT module for `config` holding `tensors`, which must fit it exactly."""
    tensors = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    with torch.no_grad():
        module = ACT(config)
    load_weights(module, tensors, source)
    return module.eval()


def load_weights(module: nn.Module, tensors: dict[str, torch.Tensor], source: Path) -> None:
    """Check names, shapes, dtypes and finiteness, then copy `tensors` into `module`."""
    expected = module.state_dict()
    missing = [name for name in expected if name not in tensors]
    unexpected = [name for name in tensors if name not in expected]
    wrong = [
        f"{name} {tuple(tensors[name].shape)} (expected {tuple(expected[name].shape)})"
        for name in expected
        if name in tensors and tensors[name].shape != expected[name].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing {len(missing)} tensor(s): {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected {len(unexpected)} tensor(s): {_few(unexpected)}")
    if wrong:
        problems.append(f"wrong shape: {_few(wrong)}")
    if problems:
        raise CheckpointError(
            f"{source} does not fit the model its config describes ({'; '.join(problems)}); "
            "the weights and config.json come from different models"
        )
    not_float = [name for name, t in tensors.items() if not t.is_floating_point()]
    if not_float:
        raise CheckpointError(f"{source}: tensors must be floating point, not {_few(not_float)}")
    non_finite = [name for name, t in tensors.items() if not bool(torch.isfinite(t).all())]
    if non_finite:
        raise CheckpointError(
            f"{source} has NaN or infinite values in {_few(non_finite)}; this checkpoint cannot "
            "be served"
        )
    fp32 = {name: t.to(torch.float32) for name, t in tensors.items()}
    module.load_state_dict(fp32, strict=True)


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")


# ---- Describing --------------------------------------------------------------------------------


def describe_checkpoint(directory: str | Path) -> str:
    """A human-readable summary of a Tempo checkpoint or a LeRobot ACT directory.

    A Tempo checkpoint is described from its config and the safetensors header, without loading
    weights; a LeRobot directory is read in full, since converting it is how it is checked.
    """
    directory = Path(directory)
    kind, raw = detect_format(directory)
    if kind == "lerobot":
        from policies.lerobot_import import read_lerobot_act

        imported = read_lerobot_act(directory)
        header = [f"format: LeRobot ACT ({imported.layout})"] + [
            f"note: {note}" for note in imported.notes
        ]
        spec, config = imported.policy.spec, cast(ACT, imported.policy.module).config
    else:
        parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
        header = [f"format: Tempo checkpoint (format_version {FORMAT_VERSION}), policy type act"]
        spec, config = parsed.spec, parsed.model
    return "\n".join(header + summarize(spec, config, directory / WEIGHTS_FILE)) + "\n"


def summarize(spec: PolicySpec, config: ACTConfig, weights: Path) -> list[str]:
    """Lines describing an ACT policy's interface, architecture and weights file."""
    cameras = ", ".join(f"{c.name} {c.height}x{c.width}" for c in spec.cameras) or "none"
    lines = [f"cameras ({len(spec.cameras)}): {cameras}"]
    if config.n_cameras:
        height, width = config.backbone_input_size
        rows, cols = feature_map_size(height, width, config.replace_final_stride_with_dilation)
        dilated = ", layer4 dilated" if config.replace_final_stride_with_dilation else ""
        lines.append(
            f"backbone: {config.vision_backbone}{dilated}, frames fed at {height}x{width}, "
            f"feature map {rows}x{cols} ({rows * cols * config.n_cameras} image tokens)"
        )
    hidden = config.state_input_mask.count(False) if config.state_input_mask else 0
    lines += [
        f"state: {spec.state_size} entries (robot {config.state_dim}, environment "
        f"{config.env_state_dim}) x history {spec.state_history}"
        + (f", {hidden} hidden by the input mask" if hidden else ""),
        f"joints ({spec.action_dim}): {', '.join(spec.joint_names)}",
        f"chunk size: {spec.chunk_size}",
        f"transformer: dim_model {config.dim_model}, {config.n_heads} heads, feedforward "
        f"{config.dim_feedforward} ({config.feedforward_activation}), "
        f"{config.n_encoder_layers} encoder / {config.n_decoder_layers} decoder layer(s), "
        f"{'pre' if config.pre_norm else 'post'}-norm, latent {config.latent_dim}"
        + (
            f", VAE encoder kept ({config.n_vae_encoder_layers} layers, unused)"
            if config.use_vae
            else ""
        ),
        f"normalization: images {config.image_norm}, state {config.state_norm}, environment "
        f"{config.env_state_norm}, actions {config.action_norm}",
    ]
    if config.n_action_steps is not None or config.temporal_ensemble_coeff is not None:
        lines.append(
            f"execution hints: n_action_steps {config.n_action_steps}, temporal_ensemble_coeff "
            f"{config.temporal_ensemble_coeff}"
        )
    with torch.device("meta"):
        module = ACT(config)
    n_params = sum(p.numel() for p in module.parameters())
    n_serving = n_params - sum(
        p.numel() for name, p in module.named_parameters() if name.startswith("vae_encoder")
    )
    lines.append(f"parameters: {n_params:,} ({n_serving:,} used when serving)")
    if weights.is_file():
        try:
            with safe_open(str(weights), framework="pt") as handle:
                count = len(list(handle.keys()))
            size_mb = weights.stat().st_size / 1e6
            lines.append(f"weights: {weights.name}, {size_mb:.1f} MB, {count} tensors")
        except Exception as exc:  # describe a bad header rather than fail
            lines.append(f"weights: {weights.name} is unreadable ({exc})")
    else:
        lines.append(f"weights: {weights.name} is missing")
    return lines
