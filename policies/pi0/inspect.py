"""What `tempo checkpoint inspect` says about a pi0 / pi0.5 directory (LeRobot or openpi), read
from its config, its normalization files and its safetensors header: no weight is loaded and no
model is built, so it stays fast on a multi-gigabyte checkpoint.

    print("\\n".join(describe_pi0_checkpoint("~/ckpt/pi05_droid_pytorch")))
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from policies.checkpoints.files import read_json
from policies.pi0.checkpoint_contents import (
    EMBED_TOKENS,
    LM_HEAD,
    WIDTHS_FILE,
    Pi0CheckpointFiles,
    Shape,
)
from policies.pi0.checkpoint_files import read_pi0_checkpoint

FAMILY_TITLES = {"pi0": "pi0", "pi05": "pi0.5"}
SOURCE_TITLES = {"lerobot": "LeRobot", "openpi": "openpi (PyTorch converter)"}
CONVENTION_TITLES = {"lerobot": "LeRobot", "openpi": "openpi"}
BYTES = {"FP32": 4, "BF16": 2}


def describe_pi0_checkpoint(path: str | Path, *, asset_id: str | None = None) -> list[str]:
    """One line per fact of the pi0 / pi0.5 checkpoint at `path` (for openpi, with the norm
    stats of `asset_id` when assets/ holds several); a CheckpointError if it cannot be read."""
    files = read_pi0_checkpoint(path, asset_id=asset_id, tensors=False)
    fields = files.config_fields
    parameters = parameter_count(files.shapes)
    memory = ", ".join(f"{name} {parameters * size / 1e9:.2f} GB" for name, size in BYTES.items())
    lines = [
        f"family: {FAMILY_TITLES[files.family]} ({files.family})",
        f"source layout: {SOURCE_TITLES[files.source]}",
        f"cameras: {_cameras(files)}",
        f"state: {files.state_size} values (padded to {fields['max_state_dim']}); action: "
        f"{files.action_size} values (padded to {fields['max_action_dim']})",
        f"prompt: up to {fields['tokenizer_max_length']} tokens (tokenizer_max_length)",
        f"chunk_size: {fields['chunk_size']}, n_action_steps: {fields['n_action_steps']}, "
        f"num_inference_steps: {fields['num_inference_steps']}",
        f"model: {_model(files)}, run in {fields['dtype']}",
        f"parameters: {parameters:,} (tied token embedding counted once); weights in memory: "
        f"{memory}",
        f"tokenizer: {_tokenizer(files)}",
        f"normalization: state {files.norm.state.mode}, action {files.norm.action.mode} "
        f"({CONVENTION_TITLES[files.norm.convention]}'s formulas, eps {files.norm.eps:g})",
    ]
    return lines + [f"note: {note}" for note in files.notes]


def parameter_count(shapes: dict[str, Shape]) -> int:
    """The network's parameters from its weights' shapes; PaliGemma ties the token embedding to
    the language model head, so it is counted once."""
    tied = EMBED_TOKENS in shapes and LM_HEAD in shapes
    return sum(math.prod(shape) for key, shape in shapes.items() if not (tied and key == LM_HEAD))


def _cameras(files: Pi0CheckpointFiles) -> str:
    cameras = [
        f"{name} {height}x{width}"
        for name, (height, width) in zip(files.camera_names, files.image_sizes, strict=True)
    ]
    side = files.config_fields["image_resolution"][0]
    empty = files.config_fields["empty_cameras"]
    slots = f"; {empty} empty camera slot{'s' if empty != 1 else ''}" if empty else ""
    return f"{', '.join(cameras) or 'none'}{slots} (each resized to {side}x{side})"


def _model(files: Pi0CheckpointFiles) -> str:
    """The towers: the variants config.json names, or the reduced widths a widths file beside
    it sets (the reader builds those; the variants' names then say nothing of the sizes)."""
    fields = files.config_fields
    language, expert = fields["paligemma_variant"], fields["action_expert_variant"]
    widths_path = files.path / WIDTHS_FILE
    if not widths_path.is_file():
        return f"PaliGemma {language} with a {expert} action expert"
    widths = read_json(widths_path)
    towers = ", ".join(
        f"{name} {_width(widths, name)}" for name in ("vision", "language", "expert")
    )
    return (
        f"reduced widths from {WIDTHS_FILE}: {towers} (width x depth; config.json's {language} "
        f"/ {expert} are not built)"
    )


def _width(widths: dict[str, Any], tower: str) -> str:
    sizes = widths.get(tower)
    if not isinstance(sizes, dict):
        return "at its variant's size"
    return f"{sizes.get('width', '?')}x{sizes.get('depth', '?')}"


def _tokenizer(files: Pi0CheckpointFiles) -> str:
    if files.tokenizer is None:
        return f"not shipped; {files.tokenizer_name} must be fetched"
    if not files.tokenizer.is_relative_to(files.path):
        return f"{files.tokenizer_name} from the local Hugging Face cache ({files.tokenizer})"
    return f"shipped in {files.tokenizer.relative_to(files.path)}/"
