"""The files of a LeRobot ACT directory: the features its config.json declares, and its
normalization statistics in either of LeRobot's two layouts (see `policies.act.lerobot`
for the whole picture and the renaming table)."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from controller.errors import CheckpointError
from policies.checkpoints.files import (
    CONFIG_FILE,
    KIND_NAMES,
    WEIGHTS_FILE,
    detect_format,
    locate_checkpoint,
    read_json,
    read_tensors,
)

PREPROCESSOR_FILE = "policy_preprocessor.json"
POSTPROCESSOR_FILE = "policy_postprocessor.json"
STATE_KEY = "observation.state"
ENV_KEY = "observation.environment_state"
ACTION_KEY = "action"
OLD_LAYOUT_EPS = 1e-8  # LeRobot < 0.4 hard-coded it

# Pipeline steps that do not change values (the normalizers are handled separately).
_PASSIVE_STEPS = {"rename_observations_processor", "to_batch_processor", "device_processor"}
_MODES: dict[str, tuple[str, tuple[str, ...]]] = {  # LeRobot mode -> (Tempo mode, stats read)
    "IDENTITY": ("identity", ()),
    "MEAN_STD": ("mean_std", ("mean", "std")),
    "MIN_MAX": ("min_max", ("min", "max")),
    "QUANTILES": ("min_max", ("q01", "q99")),
    "QUANTILE10": ("min_max", ("q10", "q90")),
}


def open_lerobot_dir(src: str | Path) -> tuple[Path, dict[str, Any], Path]:
    """The directory, its config.json as read and that file's path; another format (a Tempo or
    openpi checkpoint) is refused in one sentence. The start of every LeRobot family's reader."""
    directory = locate_checkpoint(src)
    kind, raw = detect_format(directory)
    if kind != "lerobot":
        raise CheckpointError(
            f"{directory} is {KIND_NAMES[kind]}, not a LeRobot one; load it directly"
        )
    return directory, raw, directory / CONFIG_FILE


def refuse_unknown_options(
    raw: Mapping[str, Any],
    path: Path,
    known: Mapping[str, Any] | Set[str],
    allow_unknown: bool,
    *,
    ignored: Set[str] = frozenset(),
) -> None:
    """Refuse config options the reader does not know (it could not serve them as trained),
    unless the caller allows them because they only affect training."""
    unknown = sorted(set(raw) - set(known) - set(ignored))
    if unknown and not allow_unknown:
        raise CheckpointError(
            f"{path} has option(s) Tempo does not know: {', '.join(unknown)}; if they only "
            "affect training, read it with allow_unknown_options, else this variant is unsupported"
        )


@dataclass
class Normalization:
    """Tempo's normalization buffers (`state_norm.mean`, ...), modes (`state_norm` ->
    `mean_std`, ...) and eps, read from a LeRobot directory; notes say what was left out."""

    tensors: dict[str, torch.Tensor]
    modes: dict[str, str]
    eps: float
    notes: list[str]


@dataclass
class Features:
    """The inputs and output a LeRobot policy config (ACT, pi0) declares, in Tempo's terms."""

    camera_keys: list[str]
    camera_names: list[str]
    sizes: list[tuple[int, int]]  # (height, width) per camera, in camera order
    state_dim: int
    env_state_dim: int
    action_dim: int

    @classmethod
    def parse(
        cls, raw: dict[str, Any], path: Path, *, family: str = "ACT", env_state: bool = True
    ) -> Features:
        """The features of config.json `raw` (read from `path`), as Tempo's `family` reads them:
        cameras, observation.state and (when `env_state`) observation.environment_state."""
        reads = f"cameras, {STATE_KEY} and {ENV_KEY}" if env_state else f"cameras and {STATE_KEY}"
        inputs = raw.get("input_features")
        outputs = raw.get("output_features")
        if not isinstance(inputs, dict) or not isinstance(outputs, dict):
            raise CheckpointError(
                f"{path} needs input_features and output_features objects (LeRobot fills them "
                "from the dataset when training)"
            )
        camera_keys: list[str] = []
        sizes: list[tuple[int, int]] = []
        state_dim = env_dim = 0
        for key, feature in inputs.items():
            kind, shape = _feature(key, feature, path)
            if kind == "VISUAL":
                if len(shape) != 3 or shape[0] != 3:
                    raise CheckpointError(
                        f"{path}: image feature '{key}' has shape {shape}; Tempo reads 3-channel "
                        "(3, height, width) images"
                    )
                camera_keys.append(key)
                sizes.append((shape[1], shape[2]))
            elif kind == "STATE" and key == STATE_KEY and len(shape) == 1:
                state_dim = shape[0]
            elif env_state and kind == "ENV" and key == ENV_KEY and len(shape) == 1:
                env_dim = shape[0]
            else:
                raise CheckpointError(
                    f"{path}: input feature '{key}' ({kind}, shape {shape}) is not supported; "
                    f"Tempo's {family} reads {reads}"
                )
        # LeRobot makes every dataset column named action* an ACTION output (a Tempo export's
        # action.held, say); its policies predict `action` alone and ignore the others.
        others = [k for k in outputs if k != ACTION_KEY and not k.startswith(f"{ACTION_KEY}.")]
        if ACTION_KEY not in outputs or others:
            raise CheckpointError(
                f"{path}: output_features must be '{ACTION_KEY}' (with at most columns named "
                f"'{ACTION_KEY}.*', which are not predicted), got {sorted(outputs)}"
            )
        kind, action_shape = _feature(ACTION_KEY, outputs[ACTION_KEY], path)
        if kind != "ACTION" or len(action_shape) != 1:
            raise CheckpointError(
                f"{path}: output '{ACTION_KEY}' must be an ACTION of shape (n,), got {kind} "
                f"{action_shape}"
            )
        return cls(
            camera_keys=camera_keys,
            camera_names=[_camera_name(key) for key in camera_keys],
            sizes=sizes,
            state_dim=state_dim,
            env_state_dim=env_dim,
            action_dim=action_shape[0],
        )

    def keyed(self) -> list[tuple[str, str]]:
        """(feature key, feature type) of every input and the output, in model order."""
        pairs = [(key, "VISUAL") for key in self.camera_keys]
        if self.state_dim:
            pairs.append((STATE_KEY, "STATE"))
        if self.env_state_dim:
            pairs.append((ENV_KEY, "ENV"))
        return pairs + [(ACTION_KEY, "ACTION")]


def _feature(key: str, feature: Any, path: Path) -> tuple[str, list[int]]:
    if not isinstance(feature, dict) or "type" not in feature or "shape" not in feature:
        raise CheckpointError(f"{path}: feature '{key}' needs a type and a shape")
    shape = feature["shape"]
    if not isinstance(shape, list) or not all(isinstance(n, int) and n > 0 for n in shape):
        raise CheckpointError(f"{path}: feature '{key}' has an invalid shape {shape!r}")
    return str(feature["type"]), shape


def _camera_name(key: str) -> str:
    for prefix in ("observation.images.", "observation."):
        if key.startswith(prefix):
            return key.removeprefix(prefix)
    return key


def _mode(name: Any, key: str, where: str) -> tuple[str, tuple[str, ...]]:
    if name not in _MODES:
        raise CheckpointError(
            f"{where}: normalization mode {name!r} for '{key}' is not supported "
            f"({', '.join(_MODES)})"
        )
    return _MODES[name]


def _gather(
    features: Features,
    modes_by_key: dict[str, tuple[str, tuple[str, ...]]],
    lookup: Any,
    where: str,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tempo's normalization buffers and modes from per-feature LeRobot stats.

    `lookup(key, stat)` returns LeRobot's tensor for feature `key`, or None.
    """
    sizes = {STATE_KEY: features.state_dim, ENV_KEY: features.env_state_dim}
    sizes[ACTION_KEY] = features.action_dim
    targets = {"STATE": "state_norm", "ENV": "env_state_norm", "ACTION": "action_norm"}
    tensors: dict[str, torch.Tensor] = {}
    modes: dict[str, str] = {}
    image_modes = set()
    image_stats: dict[str, list[torch.Tensor]] = {}
    for key, kind in features.keyed():
        mode, stat_names = modes_by_key[key]
        values = {}
        for stat in stat_names:
            value = lookup(key, stat)
            if value is None:
                raise CheckpointError(
                    f"{where}: normalization of '{key}' needs its '{stat}' statistic, which is "
                    "missing; the checkpoint is incomplete"
                )
            size = 3 if kind == "VISUAL" else sizes[key]
            if value.numel() != size:
                raise CheckpointError(
                    f"{where}: statistic '{key}.{stat}' has shape {tuple(value.shape)}; expected "
                    f"{size} values"
                )
            values[stat] = value.reshape(size).to(torch.float32)
        if kind == "VISUAL":
            image_modes.add(mode)
            for stat_name, tempo_name in zip(stat_names, _tempo_stats(mode), strict=True):
                image_stats.setdefault(tempo_name, []).append(values[stat_name])
            continue
        modes[targets[kind]] = mode
        for stat_name, tempo_name in zip(stat_names, _tempo_stats(mode), strict=True):
            tensors[f"{targets[kind]}.{tempo_name}"] = values[stat_name]
    if len(image_modes) > 1:
        raise CheckpointError(
            f"{where}: cameras are normalized in different modes {sorted(image_modes)}; Tempo "
            "normalizes all cameras one way"
        )
    modes["image_norm"] = image_modes.pop() if image_modes else "identity"
    for name, rows in image_stats.items():
        tensors[f"image_norm.{name}"] = torch.stack(rows)
    modes.setdefault("env_state_norm", "identity")
    modes.setdefault("state_norm", "identity")
    return tensors, modes


def _tempo_stats(mode: str) -> tuple[str, ...]:
    return {"identity": (), "mean_std": ("mean", "std"), "min_max": ("min", "max")}[mode]


def stats_from_buffers(
    tensors: dict[str, torch.Tensor], mapping: dict[str, Any], features: Features
) -> Normalization:
    """Old layout: statistics are buffers of the policy's Normalize modules, inside the weights.

    The buffers are removed from `tensors`, which is left holding the network's weights.
    """
    where = f"{WEIGHTS_FILE} (normalization buffers)"
    modes_by_key = {}
    for key, kind in features.keyed():
        mode = _mode(mapping.get(kind, "IDENTITY"), key, where)
        if mode[0] == "min_max" and mode[1] != ("min", "max"):
            raise CheckpointError(f"{where}: mode {mapping[kind]} did not exist in this layout")
        modes_by_key[key] = mode
    used: set[str] = set()

    def lookup(key: str, stat: str) -> torch.Tensor | None:
        module = "unnormalize_outputs" if key == ACTION_KEY else "normalize_inputs"
        name = f"{module}.buffer_{key.replace('.', '_')}.{stat}"
        used.add(name)
        return tensors.get(name)

    stats, modes = _gather(features, modes_by_key, lookup, where)
    notes = []
    for name in list(tensors):
        if name.startswith(("normalize_inputs.", "unnormalize_outputs.")):
            if name not in used:
                raise CheckpointError(
                    f"{where}: buffer '{name}' belongs to no feature of config.json; the weights "
                    "and the config come from different policies"
                )
            del tensors[name]
        elif name.startswith("normalize_targets."):  # normalizes target actions for the loss
            del tensors[name]
            notes = ["dropped the training-only normalize_targets buffers"]
    return Normalization(stats, modes, OLD_LAYOUT_EPS, notes)


def stats_from_processors(src: Path, mapping: dict[str, Any], features: Features) -> Normalization:
    """Current layout: statistics are state files of the pipelines' (un)normalizer steps."""
    notes: list[str] = []
    pre_cfg, pre_stats = _normalizer_step(src / PREPROCESSOR_FILE, "normalizer_processor", notes)
    post_cfg, post_stats = _normalizer_step(
        src / POSTPROCESSOR_FILE, "unnormalizer_processor", notes
    )
    eps = float(pre_cfg.get("eps", 1e-8))
    if float(post_cfg.get("eps", 1e-8)) != eps:
        raise CheckpointError(
            f"{src}: the normalizer and unnormalizer use different eps; Tempo uses one value"
        )
    modes_by_key = {}
    for key, kind in features.keyed():
        step_cfg = post_cfg if key == ACTION_KEY else pre_cfg
        where = POSTPROCESSOR_FILE if key == ACTION_KEY else PREPROCESSOR_FILE
        norm_map = step_cfg.get("norm_map") or mapping
        listed = step_cfg.get("features")
        only = step_cfg.get("normalize_observation_keys")
        skipped = (isinstance(listed, dict) and key not in listed) or (
            key != ACTION_KEY and only is not None and key not in only
        )
        modes_by_key[key] = _mode(
            "IDENTITY" if skipped else norm_map.get(kind, "IDENTITY"), key, where
        )

    def lookup(key: str, stat: str) -> torch.Tensor | None:
        return (post_stats if key == ACTION_KEY else pre_stats).get(f"{key}.{stat}")

    stats, modes = _gather(features, modes_by_key, lookup, f"{src} (processor state files)")
    return Normalization(stats, modes, eps, notes)


def _normalizer_step(
    path: Path, registry_name: str, notes: list[str]
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The config and statistics of the one `registry_name` step in pipeline file `path`.

    Other steps must leave values unchanged. A rename step's map only renames incoming keys to
    the policy's own, which are the names Tempo uses; it is noted, not applied.
    """
    pipeline = read_json(path)
    steps = pipeline.get("steps")
    if not isinstance(steps, list):
        raise CheckpointError(f"{path} has no list of steps; it is not a LeRobot pipeline file")
    found = []
    for step in steps:
        name = step.get("registry_name") if isinstance(step, dict) else None
        if name == registry_name:
            found.append(step)
        elif name == "rename_observations_processor":
            renames = (step.get("config") or {}).get("rename_map") or {}
            if renames:
                notes.append(f"{path.name} renames incoming keys {renames}; not needed here")
        elif name not in _PASSIVE_STEPS:
            label = name or (step.get("class") if isinstance(step, dict) else None)
            raise CheckpointError(
                f"{path}: pipeline step '{label}' is not supported; Tempo reproduces only the "
                f"{registry_name} step (and steps that leave values unchanged)"
            )
    if len(found) != 1:
        raise CheckpointError(
            f"{path} must have exactly one {registry_name} step, has {len(found)}"
        )
    step_config = found[0].get("config") or {}
    state_file = found[0].get("state_file")
    if state_file is None:
        return step_config, {}
    if not isinstance(state_file, str) or Path(state_file).name != state_file:
        raise CheckpointError(f"{path}: state_file {state_file!r} must be a plain file name")
    return step_config, read_tensors(path.parent / state_file)
