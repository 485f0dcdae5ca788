"""The front door for checkpoint directories: load one, or describe it, whatever its format.

    policy = load_checkpoint("ckpt/", device="cuda")   # a TensorPolicy, FP32 (or W4A8), eval
    print(describe_checkpoint("ckpt/"))                # spec, architecture, weights file

A directory is a Tempo checkpoint (`config.json` with `"format": "tempo"`,
`policies.checkpoints.tempo_format`), a LeRobot directory (`config.json` with a `"type"` some
family reads, e.g. "act", converted in memory by `policies.act.lerobot`, whose `import_lerobot`
writes the converted form to disk) or an openpi PyTorch checkpoint (pi0 / pi0.5, read by the
family that declares `read_openpi`). Which family reads it is looked up in policies.registry.
Every problem is a `CheckpointError` naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from controller.errors import CheckpointError
from policies.checkpoints.files import (
    CONFIG_FILE,
    KIND_NAMES,
    WEIGHTS_FILE,
    CheckpointKind,
    detect_format,
    locate_checkpoint,
)
from policies.checkpoints.tempo_format import (
    FORMAT_VERSION,
    checkpoint_family,
    parse_tempo_config,
    read_tempo_checkpoint,
)
from policies.registry import (
    CheckpointVariant,
    ConvertedPolicy,
    PolicyFamily,
    checkpoint_families,
    checkpoint_families_from,
    variants,
)
from policies.tensor_policy import TensorPolicy

ReadForeign = Callable[[Path, Sequence[str] | None], ConvertedPolicy]  # LeRobot, openpi
_SOURCES = {"lerobot": "LeRobot", "openpi": "openpi"}  # how `inspect` names the other formats


def load_checkpoint(
    directory: str | Path,
    device: str | torch.device = "cpu",
    joint_names: Sequence[str] | None = None,
) -> TensorPolicy:
    """Load a Tempo checkpoint, a LeRobot directory or an openpi one, as an FP32 module in eval
    mode. `joint_names` names the action entries (policy.joint_names): a LeRobot or openpi
    directory takes them as its names, a Tempo checkpoint (which records its own) must agree
    with them."""
    directory = locate_checkpoint(directory)
    kind, raw = detect_format(directory)
    if kind != "tempo":
        policy = _foreign_reader(directory, kind, raw)[1](directory, joint_names).policy
    elif (variant := _variant(raw)) is not None:  # e.g. quantized (policies.quant.checkpoint)
        policy = variant.read(directory, raw)
    else:
        policy = read_tempo_checkpoint(directory, raw)
    if kind == "tempo" and joint_names is not None:
        if tuple(joint_names) != policy.spec.joint_names:
            raise CheckpointError(
                f"policy.joint_names ({', '.join(joint_names)}) differ from the names "
                f"{directory / CONFIG_FILE} records ({', '.join(policy.spec.joint_names)}); "
                "unset policy.joint_names, or re-export the checkpoint with the new names"
            )
    policy.module.to(device).eval()
    return policy


def _variant(raw: dict[str, Any]) -> CheckpointVariant | None:
    """The variant whose section the checkpoint carries (a quantized ACT), if any."""
    policy_type = raw.get("policy_type")
    if not isinstance(policy_type, str):
        return None
    return next((v for v in variants(policy_type) if raw.get(v.section) is not None), None)


def _foreign_reader(
    directory: Path, kind: CheckpointKind, raw: dict[str, Any]
) -> tuple[PolicyFamily, ReadForeign]:
    """(family, its reader) for a LeRobot or an openpi directory."""
    if kind == "lerobot":
        return _lerobot_reader(directory, raw)
    families = checkpoint_families_from("pi0")
    reader = next(((f, c.read_openpi) for f, c in families if c.read_openpi is not None), None)
    if reader is None:
        raise CheckpointError(
            f"{directory} is {KIND_NAMES[kind]} (pi0 / pi0.5), and no policy family this Tempo "
            "serves reads openpi checkpoints"
        )
    return reader


def _lerobot_reader(directory: Path, raw: dict[str, Any]) -> tuple[PolicyFamily, ReadForeign]:
    """(family, its LeRobot reader) for the directory's LeRobot `type`."""
    for family, hooks in checkpoint_families_from(raw.get("type")):  # a LeRobot type: a name
        if hooks.read_lerobot is not None and hooks.lerobot_type == raw.get("type"):
            return family, hooks.read_lerobot
    known = ", ".join(
        str(c.lerobot_type) for _, c in checkpoint_families() if c.read_lerobot is not None
    )
    raise CheckpointError(
        f"{directory / CONFIG_FILE} describes a LeRobot '{raw.get('type')}' policy; Tempo imports "
        f"LeRobot policies of type {known} only"
    )


def describe_checkpoint(directory: str | Path, problems: list[str] | None = None) -> str:
    """A human-readable summary of a Tempo checkpoint, a LeRobot or an openpi directory.

    A Tempo checkpoint is described from its config and the safetensors header, without loading
    weights; a LeRobot or openpi directory is read in full, since converting it is how it is
    checked.
    What would stop the checkpoint from being served (unreadable or missing weights) is also
    appended to `problems` when given.
    """
    directory = locate_checkpoint(directory)
    kind, raw = detect_format(directory)
    if kind != "tempo":
        family, read = _foreign_reader(directory, kind, raw)
        describe_directory = checkpoint_family(family.name, str(directory))[1].describe_directory
        if describe_directory is not None:  # from the files alone, no model built
            lines = describe_directory(directory)
            return "\n".join(lines + describe_weights(directory / WEIGHTS_FILE, problems)) + "\n"
        imported = read(directory, None)
        header = [f"format: {_SOURCES[kind]} {family.title} ({imported.layout})"] + [
            f"note: {note}" for note in imported.notes
        ]
        spec = imported.policy.spec
        config: Any = getattr(imported.policy.module, "config")  # noqa: B009
    else:
        parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
        family = checkpoint_family(parsed.policy_type, str(directory / CONFIG_FILE))[0]
        header = [
            f"format: Tempo checkpoint (format_version {FORMAT_VERSION}), policy type "
            f"{parsed.policy_type}"
        ]
        for variant in variants(parsed.policy_type):
            section = getattr(parsed, variant.section, None)
            if section is not None:
                header += variant.describe(section)
        spec, config = parsed.spec, parsed.model
    describe = checkpoint_family(family.name, str(directory / CONFIG_FILE))[1].describe
    lines = describe(spec, config) + describe_weights(directory / WEIGHTS_FILE, problems)
    return "\n".join(header + lines) + "\n"


def describe_weights(weights: Path, problems: list[str] | None = None) -> list[str]:
    """One line about the safetensors file: size and tensor count, or why it is unreadable;
    a file missing or unreadable (the checkpoint cannot be served) is also appended to
    `problems` when given."""
    lines: list[str] = []
    if weights.is_file():
        try:
            # The header only: shapes, no tensor read (inspect stays fast on a big model).
            with safe_open(str(weights), framework="pt") as handle:
                shapes = [handle.get_slice(name).get_shape() for name in handle.keys()]
            values = sum(math.prod(shape) for shape in shapes)
            size_mb = weights.stat().st_size / 1e6
            lines.append(
                f"weights: {weights.name}, {size_mb:.1f} MB, {len(shapes)} tensors, {values:,} "
                "values (parameters and buffers)"
            )
        except Exception as exc:  # describe a bad header rather than fail
            lines.append(f"weights: {weights.name} is unreadable ({exc})")
            if problems is not None:
                problems.append(f"{weights} is unreadable ({exc}); it cannot be served")
    else:
        lines.append(f"weights: {weights.name} is missing")
        if problems is not None:
            problems.append(f"{weights} is missing; this checkpoint cannot be served")
    return lines
