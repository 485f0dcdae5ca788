"""A checkpoint directory's files read safely without torch: where the policy is, its
format, its config.json and its safetensors header (the tools answer from these at once).

Every format keeps a `config.json` and a `model.safetensors`. Nothing here runs pickle: JSON is
read with a size limit, tensors come from safetensors. Every problem is a `CheckpointError` whose
message names the file and what is wrong. `detect_format` tells the formats (Tempo, LeRobot,
openpi's PyTorch pi0 / pi0.5) apart from the config alone, so that each reader can refuse the
others' directories.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from controller.bounded_file import (
    MAX_JSON_BYTES,
    decode,
    parse_nested,
    read_bytes,
    read_text,
)
from controller.errors import CheckpointError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "tempo"  # the "format" marker of a Tempo config.json
MAX_HEADER_BYTES = 16 * 1024 * 1024  # a safetensors header (JSON: names, dtypes, shapes)


# LeRobot's training output: RUN/checkpoints/<step or last>/pretrained_model/ holds the policy.
PRETRAINED_DIR = "pretrained_model"
CHECKPOINTS_DIR = "checkpoints"

# The config.json openpi's examples/convert_jax_model_to_pytorch.py writes: these fields, and
# nothing else but an optional "pi05" (its Pi0Config's flag, which some copies carry).
OPENPI_CONFIG_FIELDS = frozenset(
    {"action_dim", "action_horizon", "paligemma_variant", "action_expert_variant", "precision"}
)
OPENPI_OPTIONAL_FIELDS = frozenset({"pi05"})
CheckpointKind = Literal["tempo", "lerobot", "openpi"]
# How a message names a directory of each kind: "{path} is {KIND_NAMES[kind]}".
KIND_NAMES: dict[CheckpointKind, str] = {
    "tempo": "a Tempo checkpoint",
    "lerobot": "a LeRobot policy",
    "openpi": "an openpi PyTorch checkpoint",
}


def locate_checkpoint(directory: str | Path) -> Path:
    """The policy directory `directory` points at: itself, or the `pretrained_model/` inside a
    LeRobot training checkpoint folder (RUN/checkpoints/last). A training run's own folder is
    refused with the path to use."""
    directory = Path(directory)
    if (directory / CONFIG_FILE).is_file() or not directory.is_dir():
        return directory
    if (directory / PRETRAINED_DIR / CONFIG_FILE).is_file():
        return directory / PRETRAINED_DIR
    last = directory / CHECKPOINTS_DIR / "last" / PRETRAINED_DIR
    if (directory / CHECKPOINTS_DIR).is_dir():
        raise CheckpointError(
            f"{directory} is a LeRobot training run, not a policy directory; point at one of "
            f"its checkpoints, e.g. {last}"
        )
    return directory


def detect_format(directory: Path) -> tuple[CheckpointKind, dict[str, Any]]:
    """Which kind of checkpoint `directory` holds, from its config.json (read once, returned)."""
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist or is not a folder")
    raw = read_json(directory / CONFIG_FILE)
    if raw.get("format") == FORMAT:
        return "tempo", raw
    if "type" in raw and "format" not in raw:
        return "lerobot", raw
    if OPENPI_CONFIG_FIELDS <= raw.keys() <= OPENPI_CONFIG_FIELDS | OPENPI_OPTIONAL_FIELDS:
        return "openpi", raw
    raise CheckpointError(
        f'{directory / CONFIG_FILE} is neither a Tempo checkpoint (no "format": "tempo"), a '
        'LeRobot policy (no "type") nor an openpi PyTorch checkpoint (not exactly '
        f"{', '.join(sorted(OPENPI_CONFIG_FIELDS))}); point Tempo at a checkpoint directory"
    )


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`, or a CheckpointError that says why not."""
    if not path.exists():
        raise CheckpointError(f"{path} is missing; a checkpoint directory needs it")
    text = read_text(path, MAX_JSON_BYTES, CheckpointError, "a checkpoint's JSON file")
    try:
        value = parse_nested(json.loads, text, path, CheckpointError)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc}); fix or regenerate it") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} must hold a JSON object, not {type(value).__name__}")
    return value


def read_safetensors_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{name: (dtype, shape)} of every tensor in a safetensors file, from its header alone (read
    with limits, no tensor loaded), or a CheckpointError."""
    if not path.exists():
        raise CheckpointError(f"{path} is missing; a checkpoint directory needs it")
    what = "a safetensors file"
    head = read_bytes(path, 8, CheckpointError, what, whole=False)
    size = int.from_bytes(head, "little") if len(head) == 8 else -1
    if not 0 <= size <= MAX_HEADER_BYTES:
        raise CheckpointError(
            f"{path} is not a readable safetensors file (its header length is {size}, not 0 to "
            f"{MAX_HEADER_BYTES}); it may be truncated or corrupt: copy it again"
        )
    data = read_bytes(path, size, CheckpointError, what, offset=8, whole=False)
    try:
        text = decode(data, path, CheckpointError, what) if len(data) == size else ""
        header = parse_nested(json.loads, text, path, CheckpointError)
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict):
        raise CheckpointError(
            f"{path} is not a readable safetensors file (its header is not a JSON object); it "
            "may be truncated or corrupt: copy it again"
        )
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if not (isinstance(dtype, str) and isinstance(shape, list)):
            raise CheckpointError(
                f"{path}: the header entry of tensor {name!r} has no dtype and shape; the file "
                "is corrupt: copy it again"
            )
        if not all(isinstance(n, int) and n >= 0 for n in shape):
            raise CheckpointError(f"{path}: tensor {name!r} has an invalid shape {shape}")
        tensors[name] = (dtype, tuple(shape))
    return tensors
