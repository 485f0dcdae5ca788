"""A pi0 / pi0.5 directory as openpi's `examples/convert_jax_model_to_pytorch.py` writes it, read
into `Pi0CheckpointFiles` (the layout is described in `policies.pi0.checkpoint_files`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from controller.errors import CheckpointError
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
    check_sizes,
    fix_keys,
)
from policies.pi0.norm_stats import find_openpi_norm_stats, read_openpi_norm_stats

OPENPI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")  # openpi IMAGE_KEYS
OPENPI_IMAGE_SIZE = (224, 224)  # openpi IMAGE_RESOLUTION
OPENPI_DENOISING_STEPS = 10  # PI0Pytorch.sample_actions(num_steps=10)


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


def read_openpi_pi0(
    src: Path, raw: dict[str, Any], asset_id: str | None, *, tensors: bool
) -> Pi0CheckpointFiles:
    """The openpi PyTorch directory `src` whose config.json holds `raw`, with the norm stats of
    `asset_id` (needed only when assets/ holds several); its weights are loaded only when
    `tensors` (their shapes always, from the header)."""
    config_path = src / CONFIG_FILE
    try:
        options = _OpenpiOptions.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(f"{config_path}: {describe_validation_error(exc)}") from None
    header = read_safetensors_header(src / WEIGHTS_FILE)
    family = _family(header, src / WEIGHTS_FILE)
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
    check_sizes(fields, config_path)
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
    shapes = fix_keys({key: shape for key, (_, shape) in header.items()}, family, notes)
    weights = fix_keys(read_tensors(src / WEIGHTS_FILE), family, []) if tensors else {}
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
        tensors=weights,
        norm=norm,
        tokenizer=None,
        tokenizer_name=PALIGEMMA_TOKENIZER,
        notes=tuple(notes),
        shapes=shapes,
    )


def _family(header: dict[str, Any], path: Path) -> Family:
    """openpi's config.json does not say pi0 or pi0.5; the weights do."""
    if "time_mlp_in.weight" in header:
        return "pi05"
    if "state_proj.weight" in header and "action_time_mlp_in.weight" in header:
        return "pi0"
    raise CheckpointError(
        f"{path} has neither pi0.5's time_mlp_in nor pi0's state_proj and action_time_mlp_in; "
        "it is not an openpi PI0Pytorch state dict"
    )
