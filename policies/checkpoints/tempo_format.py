"""Tempo's own checkpoint format: writing it, and reading it into a module of any registered
policy family (policies.registry: act, flow, tdmpc2, and any family added at run time).

A Tempo checkpoint is a directory with two files:

    config.json          {"format": "tempo", "format_version": 1, "policy_type": <family name>,
                          "spec": <PolicySpec>, "model": <the family's config model>}
                         e.g. "policy_type": "act" with "model": <ACTConfig>;
                         the spec's optional `execution` records how chunks are executed
                         (query period, ensembling; see policies.checkpoints.execution)
    model.safetensors    every parameter and persistent buffer of the module, normalization
                         statistics included, float32

A quantized checkpoint (`tempo quantize`) has a `"quantization"` section too, its W4A8 layers'
buffers in the same safetensors file and the FP32 model's chunks on a few observations; it is
read and written by `policies.quant.checkpoint`, a variant of the act family's checkpoints
(policies.registry.CheckpointVariant: a section some checkpoints of a family carry).

The config is validated with pydantic against the family's config model; the weights must fit
the model it describes exactly (names, shapes, floating point, finite). `build_module` is also
how a LeRobot directory's converted weights become a module (`policies.act.lerobot`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from safetensors.torch import save_file
from torch import nn

from controller.errors import CheckpointError
from policies.base import PolicySpec
from policies.checkpoints.files import (
    CONFIG_FILE,
    FORMAT,
    WEIGHTS_FILE,
    describe_validation_error,
    read_tensors,
)
from policies.checkpoints.tokenizer_file import with_tokenizer_copied, with_tokenizer_resolved
from policies.meta_device import shapes_only
from policies.registry import (
    CheckpointFamily,
    PolicyFamily,
    and_list,
    checkpoint_families,
    checkpoint_families_from,
    find_family,
    variants,
)
from policies.tensor_policy import TensorPolicy

FORMAT_VERSION = 1
_NAMES_SHOWN = 4


class TempoCheckpointConfig(BaseModel):
    """The `config.json` of a Tempo checkpoint; each family's own (`checkpoint_schema`) fixes
    policy_type to its name and `model` to its config model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["tempo"]
    format_version: Literal[1]
    policy_type: str
    spec: PolicySpec
    model: Any


@functools.cache
def checkpoint_schema(family: PolicyFamily) -> type[TempoCheckpointConfig]:
    """The config.json model of `family`'s checkpoints, with the section of each of its variants
    (optional: `quantization` for ACT)."""
    hooks = _checkpoint_part(family)
    fields: dict[str, Any] = {
        "policy_type": (Literal[family.name], ...),  # type: ignore[valid-type]
        "model": (hooks.config_model, ...),
    }
    for variant in variants(family.name):  # e.g. W4A8 layers (policies.quant.checkpoint)
        fields[variant.section] = (variant.section_model | None, None)
    return create_model(  # type: ignore[call-overload, no-any-return]
        f"{family.name}CheckpointConfig", __base__=TempoCheckpointConfig, **fields
    )


def _checkpoint_part(family: PolicyFamily) -> CheckpointFamily:
    if family.checkpoint is None:
        raise CheckpointError(f"policy family {family.name!r} has no checkpoints")
    return family.checkpoint()


def checkpoint_family(policy_type: object, where: str) -> tuple[PolicyFamily, CheckpointFamily]:
    """The family whose checkpoints have this policy_type; anything else is refused with the
    policy types this Tempo serves."""
    family = find_family(policy_type) if isinstance(policy_type, str) else None
    if family is None or family.checkpoint is None:
        known = ", ".join(f.name for f, _ in checkpoint_families())
        raise CheckpointError(
            f"{where}: policy_type {policy_type!r} is not one this Tempo serves ({known}); "
            "upgrade Tempo, or check the file"
        )
    return family, family.checkpoint()


def family_of_module(module: nn.Module) -> tuple[PolicyFamily, CheckpointFamily] | None:
    """The family whose checkpoints hold modules like `module`, or None."""
    return next(
        (
            (f, c)
            for f, c in checkpoint_families()
            if isinstance(module, c.module_type) and (c.holds is None or c.holds(module))
        ),
        None,
    )


def module_config(module: nn.Module) -> BaseModel:
    """The config a family's module was built from (every family's module keeps it as
    `config`)."""
    config = getattr(module, "config", None)
    if not isinstance(config, BaseModel):
        raise CheckpointError(f"a {type(module).__name__} module has no config to save")
    return config


def _family_of_config(config: BaseModel) -> CheckpointFamily:
    # Stops at the match: another family's import can cost seconds (checkpoint_families_from).
    for _, hooks in checkpoint_families_from(None):
        if isinstance(config, hooks.config_model):
            return hooks
    raise CheckpointError(f"no policy family has the model config {type(config).__name__}")


# ---- Saving ------------------------------------------------------------------------------------


def save_checkpoint(directory: str | Path, policy: TensorPolicy) -> Path:
    """Write `policy` as a Tempo checkpoint into `directory` (created if needed; the two files
    are replaced atomically if present). Returns the directory."""
    module = policy.module
    if family_of_module(module) is None:
        known = and_list([f.title for f, _ in checkpoint_families()])
        raise CheckpointError(
            f"cannot save a {type(module).__name__} module: Tempo checkpoints hold {known} "
            "policies (save a served wrapper's inner policy)"
        )
    check_spec_matches(policy.spec, module_config(module), "the policy being saved")
    tensors = {
        name: tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().clone()
        for name, tensor in module.state_dict().items()
    }
    return write_checkpoint_files(directory, policy, tensors)


def write_checkpoint_files(
    directory: str | Path,
    policy: TensorPolicy,
    tensors: dict[str, torch.Tensor],
    config_extra: dict[str, Any] | None = None,
    metadata_extra: dict[str, str] | None = None,
    policy_type: str | None = None,  # when families share a module type (pi0's and pi0.5's)
) -> Path:
    """Write config.json (format, spec, the module's config, `config_extra`) and the weights
    with their header metadata, each replaced atomically; shared by every Tempo checkpoint
    writer (plain and quantized). Returns the directory."""
    module = policy.module
    found = family_of_module(module)
    if found is None:
        raise CheckpointError(f"cannot save a {type(module).__name__} module: no family holds it")
    policy_type = policy_type or found[0].name
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec = with_tokenizer_copied(policy.spec, directory)
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy_type": policy_type,
        "spec": spec.model_dump(mode="json"),
        "model": module_config(module).model_dump(mode="json"),
        **(config_extra or {}),
    }
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "policy_type": policy_type,
        **(metadata_extra or {}),
    }
    _atomic_write(directory / WEIGHTS_FILE, lambda path: save_file(tensors, path, metadata))
    text = json.dumps(document, indent=2) + "\n"
    _atomic_write(directory / CONFIG_FILE, lambda path: Path(path).write_text(text))
    return directory


def _umask() -> int:
    """The process's umask (reading it means setting it: set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_write(target: Path, write: Any) -> None:
    temporary = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        write(str(temporary))
        # safetensors creates its file 0600; a checkpoint is data, readable as any file is.
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


# ---- Reading -----------------------------------------------------------------------------------


def read_tempo_checkpoint(directory: Path, raw: dict[str, Any]) -> TensorPolicy:
    """The policy of the Tempo checkpoint in `directory`, whose config.json holds `raw`: an FP32
    module in eval mode, on the CPU."""
    parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
    if any(getattr(parsed, v.section, None) is not None for v in variants(parsed.policy_type)):
        raise CheckpointError(
            f"{directory} holds a quantized or otherwise extended policy; load it with "
            "policies.checkpoints.load.load_checkpoint"
        )
    tensors = read_tensors(directory / WEIGHTS_FILE)
    hooks = checkpoint_family(parsed.policy_type, str(directory / CONFIG_FILE))[1]
    module = build_module(parsed.model, tensors, directory / WEIGHTS_FILE, hooks)
    if hooks.to_policy is not None:
        return hooks.to_policy(module, parsed.spec)
    return TensorPolicy(spec=parsed.spec, module=module)


def parse_tempo_config(raw: dict[str, Any], path: Path) -> TempoCheckpointConfig:
    """Validate a Tempo config.json against its family's schema; the error names the first
    invalid field."""
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {version!r}; this Tempo reads version {FORMAT_VERSION} "
            "(upgrade Tempo, or re-export the checkpoint)"
        )
    family, hooks = checkpoint_family(raw.get("policy_type"), str(path))
    try:
        parsed = checkpoint_schema(family).model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(f"{path}: {describe_validation_error(exc)}") from None
    check_spec_matches(parsed.spec, parsed.model, str(path), hooks)
    resolved = with_tokenizer_resolved(parsed.spec, path.parent)
    if resolved is not parsed.spec:
        parsed = parsed.model_copy(update={"spec": resolved})
    if hooks.upgrade_spec is not None:
        spec = hooks.upgrade_spec(parsed.spec, parsed.model, str(path))
        if spec is not parsed.spec:
            parsed = parsed.model_copy(update={"spec": spec})
    return parsed


def check_spec_matches(
    spec: PolicySpec, config: BaseModel, where: str, hooks: CheckpointFamily | None = None
) -> None:
    """The PolicySpec and the model config (of the family `hooks`, when known) must describe
    the same interface."""
    problems = (hooks or _family_of_config(config)).spec_problems(spec, config)
    if problems:
        raise CheckpointError(f"{where}: spec and model disagree: {'; '.join(problems)}")


def interface_problems(
    spec: PolicySpec, config: Any, frame_sizes: Sequence[tuple[int, int]]
) -> list[str]:
    """Where a camera policy's spec and config disagree: cameras (`frame_sizes`, one per camera
    the model reads), state size and history, chunk size, action size. The config names them
    n_cameras, state_size, state_history, chunk_size and action_dim."""
    problems = []
    if len(spec.cameras) != config.n_cameras:
        problems.append(f"{len(spec.cameras)} cameras in spec, {config.n_cameras} in model")
    for camera, (height, width) in zip(spec.cameras, frame_sizes, strict=False):
        if (camera.height, camera.width) != (height, width):
            problems.append(
                f"camera '{camera.name}' is {camera.height}x{camera.width} in spec, the model "
                f"reads {height}x{width}"
            )
    pairs = [
        ("state_size", spec.state_size, config.state_size),
        ("state_history", spec.state_history, config.state_history),
        ("chunk_size", spec.chunk_size, config.chunk_size),
        ("action size (joint_names)", spec.action_dim, config.action_dim),
    ]
    return problems + [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]


def build_module(
    config: BaseModel,
    tensors: dict[str, torch.Tensor],
    source: Path,
    hooks: CheckpointFamily | None = None,
) -> nn.Module:
    """The module of the family whose config model `config` is (`hooks`, when known), holding
    `tensors`, which must fit it exactly."""
    tensors = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    hooks = hooks or _family_of_config(config)
    with torch.no_grad():
        # Shapes first, on the meta device (nothing allocated): a config.json claiming a huge
        # model next to small weights is refused before the real build runs out of memory.
        with shapes_only():
            shell = hooks.module_type(config)
        check_fit(shell.state_dict(), tensors, source)
        del shell
        module = hooks.module_type(config)
    load_weights(module, tensors, source)
    return module.eval()


def load_weights(module: nn.Module, tensors: dict[str, torch.Tensor], source: Path) -> None:
    """Check names, shapes, dtypes and finiteness, then copy `tensors` into `module`."""
    expected = module.state_dict()
    check_fit(expected, tensors, source)
    # A tensor must be floating point where the model holds floats (integers only where it
    # holds integers: a quantized layer's codes and permutation).
    not_float = [
        name
        for name, t in tensors.items()
        if t.is_floating_point() != expected[name].is_floating_point()
    ]
    if not_float:
        raise CheckpointError(
            f"{source}: tensors must be floating point, not {_few(not_float)}"
            if all(expected[n].is_floating_point() for n in not_float)
            else f"{source}: wrong kind of number (integer or floating point) in {_few(not_float)}"
        )
    non_finite = [
        name
        for name, t in tensors.items()
        if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if non_finite:
        raise CheckpointError(
            f"{source} has NaN or infinite values in {_few(non_finite)}; this checkpoint cannot "
            "be served"
        )
    fp32 = {
        name: t.to(torch.float32) if t.is_floating_point() else t.to(expected[name].dtype)
        for name, t in tensors.items()
    }
    module.load_state_dict(fp32, strict=True)


def check_fit(
    expected: Mapping[str, torch.Tensor], tensors: Mapping[str, torch.Tensor], source: Path
) -> None:
    """The names and shapes of `tensors` are exactly the `expected` state dict's (which may
    live on the meta device); CheckpointError naming the first mismatches otherwise."""
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


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")
