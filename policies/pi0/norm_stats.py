"""The normalization statistics of a pi0 / pi0.5 checkpoint, from either writer, in one form.

LeRobot (>= 0.4) keeps them in the state files of its processor pipelines:

    policy_preprocessor.json     {"name": "policy_preprocessor", "steps": [{"registry_name":
                                 "normalizer_processor", "config": {"eps", "features",
                                 "norm_map", ["normalize_observation_keys"]}, "state_file":
                                 "policy_preprocessor_step_6_normalizer_processor.safetensors"},
                                 ...]} (the step index is the step's place in the pipeline)
    policy_postprocessor.json    the same with an "unnormalizer_processor" step
                                 (policy_postprocessor_step_0_unnormalizer_processor.safetensors)
    state file keys              "<feature>.<stat>": "observation.state.mean", "action.q01", ...

openpi keeps them in `assets/<asset_id>/norm_stats.json`:
`{"norm_stats": {"state": {"mean": [...], "std": [...], "q01": [...], "q99": [...]},
"actions": {...}}}` (q01 / q99 may be null).

The formulas differ slightly: LeRobot adds eps to std and replaces a zero range by eps
(eps from the step, 1e-8 by default); openpi always adds 1e-6 to std and to q99 - q01.
`NormStats.convention` says which applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from controller.errors import CheckpointError
from policies.checkpoints.files import describe_validation_error, read_json, read_tensors

NormMode = Literal["IDENTITY", "MEAN_STD", "MIN_MAX", "QUANTILES"]
STAT_NAMES = ("mean", "std", "q01", "q99", "min", "max")
_NEEDS: dict[str, tuple[str, ...]] = {
    "IDENTITY": (),
    "MEAN_STD": ("mean", "std"),
    "MIN_MAX": ("min", "max"),
    "QUANTILES": ("q01", "q99"),
}
OPENPI_EPS = 1e-6  # openpi's transforms.Normalize / Unnormalize hard-code it
LEROBOT_EPS = 1e-8  # LeRobot's normalizer default

PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
STATE_KEY = "observation.state"
ACTION_KEY = "action"
NORM_STATS_FILE = "norm_stats.json"
ASSETS_DIR = "assets"


@dataclass(frozen=True)
class FeatureStats:
    """How one vector (the state or the action) is normalized: its mode and the statistics the
    checkpoint holds for it (float32, shape (size,); None where absent)."""

    mode: NormMode
    size: int
    mean: torch.Tensor | None = None
    std: torch.Tensor | None = None
    q01: torch.Tensor | None = None
    q99: torch.Tensor | None = None
    min: torch.Tensor | None = None
    max: torch.Tensor | None = None


@dataclass(frozen=True)
class NormStats:
    """The state's and the action's normalization, and whose formulas (eps) apply."""

    state: FeatureStats
    action: FeatureStats
    eps: float
    convention: Literal["lerobot", "openpi"]


def feature_stats(
    mode: str,
    size: int,
    found: dict[str, torch.Tensor],
    what: str,
    where: Path | str,
    remedy: str,
) -> FeatureStats:
    """FeatureStats of `what` from the statistics `found` (name -> tensor), checked: the mode is
    known, the stats it needs are there, every stat has `size` values."""
    if mode not in _NEEDS:
        raise CheckpointError(
            f"{where}: normalization mode {mode!r} for {what} is not supported for pi0 "
            f"({', '.join(_NEEDS)})"
        )
    missing = [name for name in _NEEDS[mode] if name not in found]
    if missing:
        raise CheckpointError(
            f"{where} has no '{missing[0]}' statistic for {what}, which its mode {mode} needs; "
            f"{remedy}"
        )
    values: dict[str, torch.Tensor] = {}
    for name in STAT_NAMES:
        if name not in found:
            continue
        tensor = found[name]
        if tensor.numel() != size:
            raise CheckpointError(
                f"{where}: statistic '{name}' of {what} has {tensor.numel()} values but {what} "
                f"has {size}; the statistics come from another dataset or robot"
            )
        values[name] = tensor.reshape(size).to(torch.float32)
    return FeatureStats(mode=mode, size=size, **values)  # type: ignore[arg-type]


# --- LeRobot: processor pipeline files ---------------------------------------------------


@dataclass(frozen=True)
class PipelineStep:
    """One step of a LeRobot pipeline file: its config and its state file's tensors."""

    name: str
    config: dict[str, Any]
    state: dict[str, torch.Tensor]


def read_pipeline(path: Path, known: frozenset[str]) -> dict[str, PipelineStep]:
    """The steps of pipeline file `path` by registry name; a step not in `known` (one that would
    change values in a way Tempo does not reproduce) is refused."""
    pipeline = read_json(path)
    steps = pipeline.get("steps")
    if not isinstance(steps, list):
        raise CheckpointError(f"{path} has no list of steps; it is not a LeRobot pipeline file")
    found: dict[str, PipelineStep] = {}
    for step in steps:
        name = step.get("registry_name") if isinstance(step, dict) else None
        if not isinstance(name, str) or name not in known:
            label = name or (step.get("class") if isinstance(step, dict) else step)
            raise CheckpointError(
                f"{path}: pipeline step '{label}' is not one Tempo knows for pi0 "
                f"({', '.join(sorted(known))})"
            )
        if name in found and name != "device_processor":  # device: once to GPU, once to CPU
            raise CheckpointError(f"{path} has the step '{name}' twice; LeRobot writes it once")
        config = step.get("config") or {}
        if not isinstance(config, dict):
            raise CheckpointError(f"{path}: the config of step '{name}' must be an object")
        state_file = step.get("state_file")
        state: dict[str, torch.Tensor] = {}
        if state_file is not None:
            if not isinstance(state_file, str) or Path(state_file).name != state_file:
                raise CheckpointError(
                    f"{path}: state_file {state_file!r} must be a plain file name"
                )
            state = read_tensors(path.parent / state_file)
        found[name] = PipelineStep(name=name, config=config, state=state)
    return found


def lerobot_feature_stats(
    step: PipelineStep,
    key: str,
    kind: str,
    size: int,
    mapping: dict[str, Any],
    where: Path,
) -> FeatureStats:
    """FeatureStats of feature `key` (of type `kind`: STATE, ACTION) from a (un)normalizer
    step: its mode from the step's norm_map (else config.json's normalization_mapping); a
    feature the step leaves out is IDENTITY."""
    norm_map = step.config.get("norm_map") or mapping
    listed = step.config.get("features")
    only = step.config.get("normalize_observation_keys")
    skipped = (isinstance(listed, dict) and key not in listed) or (
        kind != "ACTION" and only is not None and key not in only
    )
    mode = "IDENTITY" if skipped else norm_map.get(kind, "IDENTITY")
    found = {
        name.removeprefix(f"{key}."): tensor
        for name, tensor in step.state.items()
        if name.startswith(f"{key}.")
    }
    remedy = "a base model must be fine-tuned on a dataset (which writes the statistics) first"
    return feature_stats(mode, size, found, f"'{key}'", where, remedy)


PREPROCESSOR_STEPS = frozenset({
    "rename_observations_processor", "to_batch_processor", "pi0_new_line_processor",
    "tokenizer_processor", "device_processor", "relative_actions_processor",
    "normalizer_processor", "pi05_prepare_state_tokenizer_processor_step",
})  # fmt: skip
POSTPROCESSOR_STEPS = frozenset(
    {"unnormalizer_processor", "absolute_actions_processor", "device_processor"}
)


def read_lerobot_pipelines(
    src: Path, state_size: int, action_size: int, mapping: dict[str, Any], notes: list[str]
) -> tuple[NormStats, dict[str, PipelineStep]]:
    """The normalization from a LeRobot pi0 directory's processor files, and the preprocessor's
    steps (its tokenizer step is read by the caller). Steps that change values in ways not
    carried over (relative actions, a state left out of the prompt) are refused."""
    pre_path, post_path = src / PREPROCESSOR_FILE, src / POSTPROCESSOR_FILE
    for path in (pre_path, post_path):
        if not path.exists():
            raise CheckpointError(
                f"{path} is missing; a LeRobot pi0 policy keeps its normalization statistics "
                "in its processor files"
            )
    pre = read_pipeline(pre_path, PREPROCESSOR_STEPS)
    post = read_pipeline(post_path, POSTPROCESSOR_STEPS)
    for steps, name, path in (
        (pre, "relative_actions_processor", pre_path),
        (post, "absolute_actions_processor", post_path),
    ):
        if name in steps and steps[name].config.get("enabled"):
            raise CheckpointError(
                f"{path}: the policy predicts actions relative to the state ({name} is on), "
                "which this reader does not carry over"
            )
    renames = pre.get("rename_observations_processor")
    if renames is not None and renames.config.get("rename_map"):
        notes.append(f"{PREPROCESSOR_FILE} renames incoming keys {renames.config['rename_map']}")
    state_prompt = pre.get("pi05_prepare_state_tokenizer_processor_step")
    if state_prompt is not None and state_prompt.config.get("include_state_in_prompt") is False:
        raise CheckpointError(
            f"{pre_path}: the state is left out of the prompt (observation memory), which "
            "this reader does not support"
        )
    normalizer = pre.get("normalizer_processor")
    unnormalizer = post.get("unnormalizer_processor")
    if normalizer is None or unnormalizer is None:
        where = pre_path if normalizer is None else post_path
        raise CheckpointError(f"{where} has no (un)normalizer step; the checkpoint is incomplete")
    state = lerobot_feature_stats(normalizer, STATE_KEY, "STATE", state_size, mapping, pre_path)
    action = lerobot_feature_stats(
        unnormalizer, ACTION_KEY, "ACTION", action_size, mapping, post_path
    )
    eps = step_eps(normalizer, pre_path)
    if step_eps(unnormalizer, post_path) != eps:
        raise CheckpointError(f"{src}: the normalizer and unnormalizer use different eps")
    return NormStats(state=state, action=action, eps=eps, convention="lerobot"), pre


def step_eps(step: PipelineStep, where: Path) -> float:
    eps = step.config.get("eps", LEROBOT_EPS)
    if not isinstance(eps, int | float) or isinstance(eps, bool) or eps < 0:
        raise CheckpointError(f"{where}: the normalizer's eps must be a number >= 0, not {eps!r}")
    return float(eps)


# --- openpi: assets/<asset_id>/norm_stats.json -------------------------------------------


class _OpenpiStats(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mean: list[float]
    std: list[float]
    q01: list[float] | None = None
    q99: list[float] | None = None


class _OpenpiStatsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    norm_stats: dict[str, _OpenpiStats]


def find_openpi_norm_stats(directory: Path, asset_id: str | None) -> Path:
    """The norm_stats.json of `asset_id` under `directory`/assets, or of its only asset."""
    assets = directory / ASSETS_DIR
    if asset_id is not None:
        if Path(asset_id).name != asset_id or asset_id in ("", ".", ".."):
            raise CheckpointError(f"asset id {asset_id!r} must be a plain folder name")
        path = assets / asset_id / NORM_STATS_FILE
        if not path.is_file():
            raise CheckpointError(f"{path} is missing; the checkpoint has no statistics for it")
        return path
    found = sorted(p.parent.name for p in assets.glob(f"*/{NORM_STATS_FILE}") if p.is_file())
    if not found:
        raise CheckpointError(
            f"{directory} has no {ASSETS_DIR}/<asset_id>/{NORM_STATS_FILE}; an openpi checkpoint "
            "needs its normalization statistics (openpi's converter copies the assets folder)"
        )
    if len(found) > 1:
        raise CheckpointError(
            f"{assets} holds statistics for several robots ({', '.join(found)}); name the one "
            "to use (asset_id)"
        )
    return assets / found[0] / NORM_STATS_FILE


def read_openpi_norm_stats(path: Path, mode: NormMode, max_dim: int) -> NormStats:
    """The "state" and "actions" statistics of an openpi norm_stats.json, normalized in `mode`
    (openpi: MEAN_STD for pi0, QUANTILES for pi0.5); each has at most `max_dim` values."""
    raw = read_json(path)
    try:
        parsed = _OpenpiStatsFile.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(
            f"{path} is not an openpi norm_stats.json: {describe_validation_error(exc)}"
        ) from None
    missing = next((k for k in ("state", "actions") if k not in parsed.norm_stats), None)
    if missing is not None:
        raise CheckpointError(f"{path} has no '{missing}' statistics; openpi writes both")
    result = {}
    for key in ("state", "actions"):
        stats = parsed.norm_stats[key]
        size = len(stats.mean)
        if not 0 < size <= max_dim:
            raise CheckpointError(
                f"{path}: '{key}' has {size} values; the model takes 1 to {max_dim} (action_dim)"
            )
        found = {
            name: torch.tensor(values, dtype=torch.float32)
            for name, values in stats.model_dump().items()
            if values is not None
        }
        remedy = "recompute them with openpi's scripts/compute_norm_stats.py"
        result[key] = feature_stats(mode, size, found, f"'{key}'", path, remedy)
    return NormStats(
        state=result["state"], action=result["actions"], eps=OPENPI_EPS, convention="openpi"
    )
