"""Read a LeRobot ACT policy directory (as `ACTPolicy.save_pretrained` writes it) into Tempo.

What LeRobot writes, and where Tempo takes each part from:

    config.json          `"type": "act"`, the architecture options (same names as Tempo's
                         ACTConfig), `input_features` / `output_features` with shapes, and
                         `normalization_mapping` (feature type -> MEAN_STD, MIN_MAX, ...).
    model.safetensors    the network under `model.` (`model.backbone.conv1.weight`,
                         `model.encoder.layers.0.self_attn.in_proj_weight`, ...). Tempo's ACT
                         uses the same names without the prefix.

Normalization statistics come in one of two layouts, detected from the files present:

    processor files      (LeRobot >= 0.4) `policy_preprocessor.json` and
                         `policy_postprocessor.json` list the pipeline steps; the
                         `normalizer_processor` step of the first and the
                         `unnormalizer_processor` step of the second name their state files
                         (`policy_preprocessor_step_3_normalizer_processor.safetensors`,
                         `policy_postprocessor_step_0_unnormalizer_processor.safetensors`),
                         whose keys are `<feature>.<stat>`: `observation.images.top.mean` (3, 1, 1),
                         `observation.state.std`, `action.mean`, ... Modes come from the step's
                         `norm_map` (else config.json's `normalization_mapping`), eps from its
                         `eps`.
    buffers in weights   (LeRobot < 0.4) model.safetensors also holds
                         `normalize_inputs.buffer_<feature with . -> _>.<stat>` (e.g.
                         `normalize_inputs.buffer_observation_images_top.mean`),
                         `unnormalize_outputs.buffer_action.<stat>`, and the training-only
                         `normalize_targets.buffer_action.<stat>` (dropped); eps is 1e-8.

Renaming table (LeRobot -> Tempo):

    model.<name>                                    -> <name>
    <camera i>.<stat> (stats of image feature i)    -> image_norm.<stat>[i]   (3 values)
    observation.state.<stat>                        -> state_norm.<stat>
    observation.environment_state.<stat>            -> env_state_norm.<stat>
    action.<stat> (postprocessor / unnormalize_outputs) -> action_norm.<stat>

Modes: MEAN_STD -> mean_std (mean, std); MIN_MAX -> min_max (min, max); QUANTILES -> min_max
(q01, q99); QUANTILE10 -> min_max (q10, q90); IDENTITY -> identity. The formulas are LeRobot's
current ones; the old layout's MIN_MAX added 1e-8 to the range, a relative difference of
1e-8 / (max - min), below FP32 noise for any real joint range.

Names: camera `observation.images.top` is named `top` (`observation.image` -> `image`). Cameras
may differ in shape (each shape is one backbone batch; tokens stay in camera order). LeRobot
configs carry no joint names: pass `joint_names` (policy.joint_names), else they come from the
dataset's `meta/info.json` (features.action.names) when it sits next to the checkpoint or where
`train_config.json`'s dataset.root says, else `joint_0`, `joint_1`, ...

Execution: `n_action_steps` and `temporal_ensemble_coeff` become the spec's `execution`
(policies.checkpoints.execution), which the daemon follows unless its config sets inference.*.

Refused, each with a sentence naming it: other policy types, n_obs_steps != 1, backbones other
than resnet18/34/50/101/152, the `glu` activation, dilation on a BasicBlock ResNet, input
features other than cameras / `observation.state` /
`observation.environment_state`, processor steps that change values (other than
rename / batch / device / (un)normalizer), unknown normalization modes, and config options
Tempo does not know (unless `allow_unknown_options`).

The file formats are parsed in `policies.act.lerobot_format`; this module checks the
options, builds the Tempo config and spec, and loads or converts (the converted weights become a
module through `policies.checkpoints.tempo_format`, whose format `import_lerobot` writes).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from controller.errors import CheckpointError
from policies.act.config import ACTConfig, camera_fields
from policies.act.lerobot_format import (
    POSTPROCESSOR_FILE,
    PREPROCESSOR_FILE,
    Features,
    Normalization,
    open_lerobot_dir,
    refuse_unknown_options,
    stats_from_buffers,
    stats_from_processors,
)
from policies.base import CameraSpec, PolicySpec
from policies.checkpoints.execution import lerobot_execution
from policies.checkpoints.files import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    describe_validation_error,
    read_json,
    read_tensors,
)
from policies.checkpoints.tempo_format import build_module, save_checkpoint
from policies.tensor_policy import TensorPolicy

logger = logging.getLogger(__name__)

# LeRobot ACTConfig defaults, used only where a config.json leaves a field out.
_DEFAULTS: dict[str, Any] = {
    "n_obs_steps": 1,
    "chunk_size": 100,
    "n_action_steps": 100,
    "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
    "vision_backbone": "resnet18",
    "replace_final_stride_with_dilation": False,
    "pre_norm": False,
    "dim_model": 512,
    "n_heads": 8,
    "dim_feedforward": 3200,
    "feedforward_activation": "relu",
    "n_encoder_layers": 4,
    "n_decoder_layers": 1,
    "use_vae": True,
    "latent_dim": 32,
    "n_vae_encoder_layers": 4,
    "temporal_ensemble_coeff": None,
}
# Options that only concern training, the Hub or LeRobot's runtime: read past.
_IGNORED = {
    "type", "input_features", "output_features", "device", "use_amp", "use_peft",
    "push_to_hub", "repo_id", "private", "tags", "license", "pretrained_path",
    "pretrained_revision", "pretrained_backbone_weights", "dropout", "kl_weight",
    "optimizer_lr", "optimizer_weight_decay", "optimizer_lr_backbone",
}  # fmt: skip


@dataclass
class LeRobotACT:
    """A LeRobot ACT directory read into Tempo's terms."""

    policy: TensorPolicy
    layout: str
    notes: list[str] = field(default_factory=list)


def import_lerobot(
    src: str | Path,
    dst: str | Path,
    *,
    joint_names: Sequence[str] | None = None,
    allow_unknown_options: bool = False,
) -> Path:
    """Convert the LeRobot ACT directory `src` into a Tempo checkpoint at `dst`."""
    if Path(dst).resolve() == Path(src).resolve():
        raise CheckpointError(
            f"{dst} is the LeRobot directory itself; write the Tempo checkpoint somewhere else"
        )
    imported = read_lerobot_act(
        src, joint_names=joint_names, allow_unknown_options=allow_unknown_options
    )
    for note in imported.notes:
        logger.info("import %s: %s", src, note)
    return save_checkpoint(dst, imported.policy)


def resolve_joint_names(
    src: Path,
    joint_names: Sequence[str] | None,
    action_dim: int,
    notes: list[str],
    how_to_set: str = "set policy.joint_names, or --joint-names",
) -> list[str]:
    """A LeRobot policy's joint names: those given (one per action entry), else the dataset
    metadata's beside the checkpoint, else joint_0.. (each source said in `notes`)."""
    if joint_names is not None:
        if len(joint_names) != action_dim:
            raise CheckpointError(
                f"{len(joint_names)} joint names were given but the LeRobot policy outputs "
                f"{action_dim} actions; give one name per action entry"
            )
        return list(joint_names)
    found, where = dataset_joint_names(src, action_dim)
    if found is not None:
        notes.append(f"joint names from {where}")
        return found
    notes.append(
        "LeRobot configs carry no joint names and no dataset metadata was found next to the "
        f"checkpoint; generated joint_0.. ({how_to_set})"
    )
    return [f"joint_{i}" for i in range(action_dim)]


def read_lerobot_act(
    src: str | Path,
    *,
    joint_names: Sequence[str] | None = None,
    allow_unknown_options: bool = False,
) -> LeRobotACT:
    """Read a LeRobot ACT directory into an FP32 TensorPolicy in eval mode (on the CPU)."""
    src, raw, config_path = open_lerobot_dir(src)
    options = _read_options(raw, config_path, allow_unknown_options)
    features = Features.parse(raw, config_path)
    tensors = read_tensors(src / WEIGHTS_FILE)

    mapping = options["normalization_mapping"]
    if (src / PREPROCESSOR_FILE).exists() or (src / POSTPROCESSOR_FILE).exists():
        layout = f"processor files {PREPROCESSOR_FILE}, {POSTPROCESSOR_FILE}"
        norm = stats_from_processors(src, mapping, features)
        leftover = [k for k in tensors if not k.startswith("model.")]
        if leftover:
            raise CheckpointError(
                f"{src / WEIGHTS_FILE} holds normalization buffers ({leftover[0]}, ...) and the "
                "directory also has processor files; keep one layout (LeRobot's "
                "migrate_policy_normalization does this)"
            )
    else:
        layout = "normalization buffers inside model.safetensors"
        norm = stats_from_buffers(tensors, mapping, features)
    notes = list(norm.notes)

    weights = {}
    for key, tensor in tensors.items():
        if not key.startswith("model."):
            raise CheckpointError(
                f"{src / WEIGHTS_FILE} has tensor '{key}', which is neither a model weight "
                "(model.*) nor a normalization buffer Tempo knows; this is not a LeRobot ACT "
                "checkpoint it can read"
            )
        weights[key.removeprefix("model.")] = tensor
    weights.update(norm.tensors)

    config = _act_config(options, features, norm, config_path)
    joint_names = resolve_joint_names(src, joint_names, features.action_dim, notes)
    execution = lerobot_execution(
        options["n_action_steps"],
        options["temporal_ensemble_coeff"],
        f"LeRobot {CONFIG_FILE}" + ("" if "n_action_steps" in raw else " (LeRobot's defaults)"),
    )
    try:
        spec = PolicySpec(
            cameras=tuple(
                CameraSpec(name=name, height=height, width=width)
                for name, (height, width) in zip(features.camera_names, features.sizes, strict=True)
            ),
            state_size=config.state_size,
            joint_names=tuple(joint_names),
            chunk_size=config.chunk_size,
            state_history=1,
            execution=execution,
        )
    except ValidationError as exc:
        raise CheckpointError(f"{config_path}: spec {describe_validation_error(exc)}") from None
    module = build_module(config, weights, src / WEIGHTS_FILE)
    return LeRobotACT(policy=TensorPolicy(spec=spec, module=module), layout=layout, notes=notes)


# Where LeRobot's dataset metadata (meta/info.json) may sit relative to a policy directory.
_DATASET_INFO = ("meta/info.json", "info.json")
_TRAIN_CONFIG = "train_config.json"


def dataset_joint_names(src: Path, action_dim: int) -> tuple[list[str] | None, str]:
    """Joint names from the LeRobot dataset metadata found next to a checkpoint: its
    `features.action.names` in `meta/info.json` (or `info.json`) in the directory, or in the
    dataset root that `train_config.json` names. (None, "") when there is none; a file whose
    names do not fit the policy is refused."""
    candidates = [src / name for name in _DATASET_INFO]
    train_config = src / _TRAIN_CONFIG
    if train_config.is_file():
        dataset = read_json(train_config).get("dataset")
        root = dataset.get("root") if isinstance(dataset, dict) else None
        if isinstance(root, str) and root:
            candidates += [Path(root) / name for name in _DATASET_INFO]
    for path in candidates:
        if not path.is_file():
            continue
        features = read_json(path).get("features")
        action = features.get("action") if isinstance(features, dict) else None
        names = action.get("names") if isinstance(action, dict) else None
        if isinstance(names, dict):  # older datasets: {"motors": [...]}
            names = next(iter(names.values()), None) if len(names) == 1 else None
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            continue
        if len(names) != action_dim:
            raise CheckpointError(
                f"{path} names {len(names)} action entries but the policy outputs {action_dim}; "
                "it describes another dataset: set policy.joint_names instead"
            )
        return names, str(path)
    return None, ""


def _read_options(raw: dict[str, Any], path: Path, allow_unknown: bool) -> dict[str, Any]:
    policy_type = raw.get("type")
    if policy_type != "act":
        raise CheckpointError(
            f"{path} describes a LeRobot '{policy_type}' policy; Tempo imports LeRobot ACT only"
        )
    if "input_shapes" in raw:
        raise CheckpointError(
            f"{path} uses LeRobot's pre-2025 config layout (input_shapes); load and re-save it "
            "with a current LeRobot first"
        )
    refuse_unknown_options(raw, path, _DEFAULTS, allow_unknown, ignored=_IGNORED)
    options = {name: raw.get(name, default) for name, default in _DEFAULTS.items()}
    if options["n_obs_steps"] != 1:
        raise CheckpointError(
            f"{path}: n_obs_steps is {options['n_obs_steps']}; LeRobot's ACT reads one "
            "observation step and so does Tempo's import (set it to 1)"
        )
    if options["feedforward_activation"] not in ("relu", "gelu"):
        raise CheckpointError(
            f"{path}: feedforward_activation '{options['feedforward_activation']}' is not "
            "supported (relu or gelu)"
        )
    if not isinstance(options["normalization_mapping"], dict):
        raise CheckpointError(f"{path}: normalization_mapping must be an object")
    return options


def _act_config(
    options: dict[str, Any], features: Features, norm: Normalization, path: Path
) -> ACTConfig:
    values = {
        name: options[name]
        for name in (
            "chunk_size", "n_action_steps", "vision_backbone", "replace_final_stride_with_dilation",
            "pre_norm", "dim_model", "n_heads", "dim_feedforward", "feedforward_activation",
            "n_encoder_layers", "n_decoder_layers", "use_vae", "latent_dim",
            "n_vae_encoder_layers", "temporal_ensemble_coeff",
        )
    }  # fmt: skip
    values.update(norm.modes)
    values.update(
        **camera_fields(features.sizes),
        state_dim=features.state_dim,
        env_state_dim=features.env_state_dim,
        action_dim=features.action_dim,
        norm_eps=norm.eps,
    )
    try:
        return ACTConfig.model_validate(values)
    except ValidationError as exc:
        problem = describe_validation_error(exc)
        if "vision_backbone" in problem:
            problem = (
                f"vision_backbone '{options['vision_backbone']}' is not supported (resnet18, "
                "resnet34, resnet50, resnet101, resnet152)"
            )
        raise CheckpointError(f"{path}: {problem}") from None
