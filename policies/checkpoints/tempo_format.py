"""Tempo's own checkpoint format: writing it, and reading it into a module (ACT, flow, TD-MPC2).

A Tempo checkpoint is a directory with two files:

    config.json          {"format": "tempo", "format_version": 1, "policy_type": "act",
                          "spec": <PolicySpec>, "model": <ACTConfig>}
                         or "policy_type": "flow" with "model": <FlowConfig>
                         or "policy_type": "tdmpc2" with "model": <TDMPC2Config>;
                         the spec's optional `execution` records how chunks are executed
                         (query period, ensembling; see policies.checkpoints.execution)
    model.safetensors    every parameter and persistent buffer of the module, normalization
                         statistics included, float32

A quantized checkpoint (`tempo quantize`) has a `"quantization"` section too, its W4A8 layers'
buffers in the same safetensors file and the FP32 model's chunks on a few observations; it is
read and written by `policies.checkpoints.quantized`.

The config is validated with pydantic; the weights must fit the model it describes exactly
(names, shapes, floating point, finite). `build_module` is also how a LeRobot directory's
converted weights become a module (`policies.checkpoints.lerobot`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, Union

import torch
from pydantic import BaseModel, ConfigDict, ValidationError
from safetensors.torch import save_file
from torch import nn

from controller.errors import CheckpointError
from policies.act.config import ACTConfig
from policies.act.model import ACT
from policies.base import PolicySpec
from policies.checkpoints.execution import lerobot_execution
from policies.checkpoints.files import (
    CONFIG_FILE,
    FORMAT,
    WEIGHTS_FILE,
    describe_validation_error,
    read_tensors,
)
from policies.flow.codec import FlowCodec
from policies.flow.config import FlowConfig
from policies.flow.model import FlowMatchingPolicy
from policies.quant.config import Quantization
from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.planner import TDMPC2Policy
from policies.tdmpc2.serving import tdmpc2_policy
from policies.tensor_policy import TensorPolicy

FORMAT_VERSION = 1
_NAMES_SHOWN = 4


class CheckpointConfig(BaseModel):
    """The `config.json` of a Tempo checkpoint of an ACT policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["tempo"]
    format_version: Literal[1]
    policy_type: Literal["act"]
    spec: PolicySpec
    model: ACTConfig
    quantization: Quantization | None = None  # W4A8 layers (policies.checkpoints.quantized)


class FlowCheckpointConfig(BaseModel):
    """The `config.json` of a Tempo checkpoint of a flow-matching policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["tempo"]
    format_version: Literal[1]
    policy_type: Literal["flow"]
    spec: PolicySpec
    model: FlowConfig


class TDMPC2CheckpointConfig(BaseModel):
    """The `config.json` of a Tempo checkpoint of a TD-MPC2 agent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["tempo"]
    format_version: Literal[1]
    policy_type: Literal["tdmpc2"]
    spec: PolicySpec
    model: TDMPC2Config


AnyCheckpointConfig = Union[CheckpointConfig, FlowCheckpointConfig, TDMPC2CheckpointConfig]  # noqa: UP007
ModelConfig = Union[ACTConfig, FlowConfig, TDMPC2Config]  # noqa: UP007
_BY_TYPE: dict[str, type[AnyCheckpointConfig]] = {
    "act": CheckpointConfig,
    "flow": FlowCheckpointConfig,
    "tdmpc2": TDMPC2CheckpointConfig,
}
SAVED_MODULES = (ACT, FlowMatchingPolicy, TDMPC2Policy)


# ---- Saving ------------------------------------------------------------------------------------


def save_checkpoint(directory: str | Path, policy: TensorPolicy) -> Path:
    """Write `policy` as a Tempo checkpoint into `directory` (created if needed; the two files
    are replaced atomically if present). Returns the directory."""
    module = policy.module
    if not isinstance(module, SAVED_MODULES):
        raise CheckpointError(
            f"cannot save a {type(module).__name__} module: Tempo checkpoints hold ACT, flow "
            "and TD-MPC2 policies (save a served wrapper's inner policy)"
        )
    check_spec_matches(policy.spec, module.config, "the policy being saved")
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
) -> Path:
    """Write config.json (format, spec, the module's config, `config_extra`) and the weights
    with their header metadata, each replaced atomically; shared by every Tempo checkpoint
    writer (plain and quantized). Returns the directory."""
    module = policy.module
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy_type": module.policy_type,
        "spec": policy.spec.model_dump(mode="json"),
        "model": module.config.model_dump(mode="json"),
        **(config_extra or {}),
    }
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "policy_type": module.policy_type,
        **(metadata_extra or {}),
    }
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


# ---- Reading -----------------------------------------------------------------------------------


def read_tempo_checkpoint(directory: Path, raw: dict[str, Any]) -> TensorPolicy:
    """The policy of the Tempo checkpoint in `directory`, whose config.json holds `raw`: an FP32
    module in eval mode, on the CPU."""
    parsed = parse_tempo_config(raw, directory / CONFIG_FILE)
    if getattr(parsed, "quantization", None) is not None:
        raise CheckpointError(
            f"{directory} holds a quantized policy; load it with "
            "policies.checkpoints.load.load_checkpoint"
        )
    tensors = read_tensors(directory / WEIGHTS_FILE)
    module = build_module(parsed.model, tensors, directory / WEIGHTS_FILE)
    if isinstance(module, TDMPC2Policy):
        return tdmpc2_policy(module, parsed.spec)
    codec = FlowCodec(parsed.spec) if isinstance(module, FlowMatchingPolicy) else None
    return TensorPolicy(spec=parsed.spec, module=module, codec=codec)


def parse_tempo_config(raw: dict[str, Any], path: Path) -> AnyCheckpointConfig:
    """Validate a Tempo config.json; the error names the first invalid field."""
    version = raw.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {version!r}; this Tempo reads version {FORMAT_VERSION} "
            "(upgrade Tempo, or re-export the checkpoint)"
        )
    policy_type = raw.get("policy_type")
    schema = _BY_TYPE.get(policy_type) if isinstance(policy_type, str) else None
    if schema is None:
        raise CheckpointError(
            f"{path}: policy_type {policy_type!r} is not one this Tempo serves "
            f"({', '.join(_BY_TYPE)}); upgrade Tempo, or check the file"
        )
    try:
        parsed = schema.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(f"{path}: {describe_validation_error(exc)}") from None
    check_spec_matches(parsed.spec, parsed.model, str(path))
    model = parsed.model
    if (
        isinstance(model, ACTConfig)
        and parsed.spec.execution is None
        and (model.n_action_steps is not None or model.temporal_ensemble_coeff is not None)
    ):  # written before the spec recorded execution: the model config's LeRobot values say it
        execution = lerobot_execution(
            model.n_action_steps, model.temporal_ensemble_coeff, f"{path} model"
        )
        parsed = parsed.model_copy(
            update={"spec": parsed.spec.model_copy(update={"execution": execution})}
        )
    return parsed


def check_spec_matches(spec: PolicySpec, config: ModelConfig, where: str) -> None:
    """The PolicySpec and the model config must describe the same interface."""
    if isinstance(config, TDMPC2Config):
        _check_tdmpc2_spec(spec, config, where)
        return
    problems = []
    if len(spec.cameras) != config.n_cameras:
        problems.append(f"{len(spec.cameras)} cameras in spec, {config.n_cameras} in model")
    if isinstance(config, ACTConfig):
        sizes = config.frame_sizes  # ACT's cameras may differ in shape
    else:
        sizes = ((config.image_height, config.image_width),) * config.n_cameras
    for camera, (height, width) in zip(spec.cameras, sizes, strict=False):
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
    problems += [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]
    if problems:
        raise CheckpointError(f"{where}: spec and model disagree: {'; '.join(problems)}")


def _check_tdmpc2_spec(spec: PolicySpec, config: TDMPC2Config, where: str) -> None:
    pairs = [
        ("cameras", len(spec.cameras), 0),
        ("state_size (obs_dim)", spec.state_size, config.obs_dim),
        ("state_history", spec.state_history, 1),
        ("chunk_size (horizon)", spec.chunk_size, config.horizon),
        ("action size (joint_names)", spec.action_dim, config.action_dim),
    ]
    problems = [f"{name} {a} in spec, {b} in model" for name, a, b in pairs if a != b]
    if problems:
        raise CheckpointError(f"{where}: spec and model disagree: {'; '.join(problems)}")


def build_module(
    config: ModelConfig, tensors: dict[str, torch.Tensor], source: Path
) -> ACT | FlowMatchingPolicy | TDMPC2Policy:
    """The module (ACT, flow policy or TD-MPC2) for `config` holding `tensors`, which must fit
    it exactly."""
    tensors = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    module: ACT | FlowMatchingPolicy | TDMPC2Policy
    with torch.no_grad():
        if isinstance(config, ACTConfig):
            module = ACT(config)
        elif isinstance(config, FlowConfig):
            module = FlowMatchingPolicy(config)
        else:
            module = TDMPC2Policy(config)
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


def _few(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown + (f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else "")
