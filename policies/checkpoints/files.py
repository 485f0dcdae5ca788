"""The files of a checkpoint directory, read safely, and what every format shares.

Every format keeps a `config.json` and a `model.safetensors`. Nothing here runs pickle: JSON is
read with a size limit, tensors come from safetensors. Every problem is a `CheckpointError` whose
message names the file and what is wrong. What needs no torch (the directory, its format, its
config and safetensors header) is `policies.checkpoints.checkpoint_dir`'s, named here too.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from controller.errors import CheckpointError
from policies.checkpoints.checkpoint_dir import CHECKPOINTS_DIR as CHECKPOINTS_DIR
from policies.checkpoints.checkpoint_dir import CONFIG_FILE as CONFIG_FILE
from policies.checkpoints.checkpoint_dir import FORMAT as FORMAT
from policies.checkpoints.checkpoint_dir import KIND_NAMES as KIND_NAMES
from policies.checkpoints.checkpoint_dir import MAX_HEADER_BYTES as MAX_HEADER_BYTES
from policies.checkpoints.checkpoint_dir import OPENPI_CONFIG_FIELDS as OPENPI_CONFIG_FIELDS
from policies.checkpoints.checkpoint_dir import OPENPI_OPTIONAL_FIELDS as OPENPI_OPTIONAL_FIELDS
from policies.checkpoints.checkpoint_dir import PRETRAINED_DIR as PRETRAINED_DIR
from policies.checkpoints.checkpoint_dir import WEIGHTS_FILE as WEIGHTS_FILE
from policies.checkpoints.checkpoint_dir import CheckpointKind as CheckpointKind
from policies.checkpoints.checkpoint_dir import detect_format as detect_format
from policies.checkpoints.checkpoint_dir import locate_checkpoint as locate_checkpoint
from policies.checkpoints.checkpoint_dir import read_json as read_json
from policies.checkpoints.checkpoint_dir import read_safetensors_header as read_safetensors_header


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a safetensors file, or a CheckpointError (missing, truncated, corrupt)."""
    read_safetensors_header(path)  # its limits first: a hostile header is refused unread
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error type, or OSError
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({exc}); it may be truncated or "
            "corrupt: copy it again"
        ) from None


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
