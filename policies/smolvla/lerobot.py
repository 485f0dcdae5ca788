"""Read a LeRobot SmolVLA directory (as `SmolVLAPolicy.save_pretrained` and its processor
pipelines write it, LeRobot 0.6; and lerobot/smolvla_base's older layout) into Tempo.

What LeRobot writes, and where Tempo takes each part from:

    config.json          `"type": "smolvla"`, the options (same names as Tempo's SmolVLAConfig),
                         `input_features` / `output_features`, `vlm_model_name` (the backbone's
                         widths: policies.smolvla.backbone)
    model.safetensors    `model.vlm_with_expert.vlm.model.{vision_model,connector,text_model}.*`,
                         `model.vlm_with_expert.lm_expert.*`, `model.state_proj`, ...
    policy_preprocessor.json / policy_postprocessor.json and their normalizer state files:
                         the state's and the actions' statistics (the older layout keeps them
                         as buffers inside model.safetensors: normalize_inputs.*, ...)
    the tokenizer        SmolVLM2's `tokenizer.json`: the checkpoint's own, else the local
                         Hugging Face cache's for the tokenizer step's name or vlm_model_name
                         (policies.smolvla.tokenizer); none: `policy.prompt.tokenizer` must name
                         one (policies.smolvla.family says so in one sentence).

Renaming (LeRobot -> Tempo): `model.` is dropped, `vlm_with_expert.vlm.model.vision_model.` ->
`vision.`, `...connector.` -> `connector.`, `...text_model.` -> `vlm_with_expert.text.`,
`vlm_with_expert.lm_expert.` -> `vlm_with_expert.expert.`; the unused LM head is dropped.

Refused, each with a sentence naming it: another policy type, options that change what the
model reads or returns and that Tempo does not reproduce (adapt_to_pi_aloha, image special
tokens, a fixed prefix_length, fewer expert layers than language layers, n_obs_steps > 1),
input features other than cameras and observation.state, a missing or incomplete normalizer,
statistics that are not finite (a base model never fine-tuned), unknown options (unless
`allow_unknown_options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from pydantic import ValidationError

from controller.errors import CheckpointError
from policies.act.lerobot import resolve_joint_names
from policies.act.lerobot_format import Features, open_lerobot_dir, refuse_unknown_options
from policies.base import CameraSpec, Execution, PolicySpec
from policies.checkpoints.files import (
    WEIGHTS_FILE,
    describe_validation_error,
    read_tensors,
)
from policies.checkpoints.tempo_format import build_module
from policies.pi0.norm_stats import (
    LEROBOT_EPS,
    POSTPROCESSOR_FILE,
    PREPROCESSOR_FILE,
    FeatureStats,
    NormStats,
    feature_stats,
    lerobot_feature_stats,
    read_pipeline,
    step_eps,
)
from policies.pi0.policy import affine
from policies.smolvla.backbone import backbone_fields
from policies.smolvla.codec import smolvla_policy
from policies.smolvla.config import SMOLVLM2_500M_NAME, SmolVLAConfig
from policies.smolvla.model import SmolVLAPolicy
from policies.smolvla.tokenizer import find_tokenizer, smolvla_prompt
from policies.tensor_policy import TensorPolicy

LEROBOT_TYPE = "smolvla"
STATE_KEY, ACTION_KEY = "observation.state", "action"
# LeRobot 0.6's SmolVLAConfig defaults, used where a config.json leaves a field out.
_DEFAULTS: dict[str, Any] = {
    "n_obs_steps": 1, "chunk_size": 50, "n_action_steps": 50,
    "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
    "max_state_dim": 32, "max_action_dim": 32, "resize_imgs_with_padding": [512, 512],
    "empty_cameras": 0, "adapt_to_pi_aloha": False, "use_delta_joint_actions_aloha": False,
    "tokenizer_max_length": 48, "num_steps": 10, "vlm_model_name": SMOLVLM2_500M_NAME,
    "add_image_special_tokens": False, "attention_mode": "cross_attn", "prefix_length": -1,
    "num_expert_layers": -1, "num_vlm_layers": 16, "self_attn_every_n_layers": 2,
    "expert_width_multiplier": 0.75, "min_period": 4e-3, "max_period": 4.0,
}  # fmt: skip
# Options that only concern training, the Hub or LeRobot's runtime: read past.
_IGNORED = {
    "type", "input_features", "output_features", "device", "use_amp", "use_peft",
    "push_to_hub", "repo_id", "private", "tags", "license", "pretrained_path",
    "pretrained_revision", "use_cache", "freeze_vision_encoder", "train_expert_only",
    "train_state_proj", "optimizer_lr", "optimizer_betas", "optimizer_eps",
    "optimizer_weight_decay", "optimizer_grad_clip_norm", "scheduler_warmup_steps",
    "scheduler_decay_steps", "scheduler_decay_lr", "load_vlm_weights", "pad_language_to",
    "rtc_config", "compile_model", "compile_mode",
}  # fmt: skip
_CONFIG_FIELDS = (
    "chunk_size", "n_action_steps", "max_state_dim", "max_action_dim", "empty_cameras",
    "tokenizer_max_length", "num_steps", "attention_mode", "self_attn_every_n_layers",
    "expert_width_multiplier", "min_period", "max_period",
)  # fmt: skip
_RENAMES = (
    ("vlm_with_expert.vlm.model.vision_model.", "vision."),
    ("vlm_with_expert.vlm.model.connector.", "connector."),
    ("vlm_with_expert.vlm.model.text_model.", "vlm_with_expert.text."),
    ("vlm_with_expert.lm_expert.", "vlm_with_expert.expert."),
)
_DROPPED = ("vlm_with_expert.vlm.lm_head.weight",)
_PREPROCESSOR_STEPS = frozenset({
    "rename_observations_processor", "to_batch_processor", "smolvla_new_line_processor",
    "tokenizer_processor", "device_processor", "normalizer_processor",
})  # fmt: skip
_POSTPROCESSOR_STEPS = frozenset({"unnormalizer_processor", "device_processor"})


@dataclass
class LeRobotSmolVLA:
    """A LeRobot SmolVLA directory read into Tempo's terms."""

    policy: TensorPolicy
    layout: str
    notes: list[str] = field(default_factory=list)


def read_lerobot_smolvla(
    src: str | Path,
    *,
    joint_names: Sequence[str] | None = None,
    allow_unknown_options: bool = False,
) -> LeRobotSmolVLA:
    """Read a LeRobot SmolVLA directory into an FP32 TensorPolicy in eval mode (CPU)."""
    src, raw, config_path = open_lerobot_dir(src)
    options = _read_options(raw, config_path, allow_unknown_options)
    features = Features.parse(
        _without_empty_cameras(raw, options), config_path, family="SmolVLA", env_state=False
    )
    if not features.camera_keys or features.state_dim == 0:
        raise CheckpointError(
            f"{config_path}: SmolVLA reads at least one camera and the robot state ({STATE_KEY})"
        )
    notes: list[str] = []
    tensors = read_tensors(src / WEIGHTS_FILE)
    mapping = options["normalization_mapping"]
    tokenizer_step: dict[str, Any] = {}
    if (src / PREPROCESSOR_FILE).exists() or (src / POSTPROCESSOR_FILE).exists():
        layout = f"processor files {PREPROCESSOR_FILE}, {POSTPROCESSOR_FILE}"
        norm, tokenizer_step = _stats_from_processors(src, features, mapping, notes)
    else:
        layout = "normalization buffers inside model.safetensors (LeRobot's older layout)"
        norm = _stats_from_buffers(tensors, features, mapping, src / WEIGHTS_FILE, notes)
    weights = _tempo_weights(tensors, src / WEIGHTS_FILE)
    depth = sum(
        1
        for k in weights
        if k.startswith("vlm_with_expert.text.layers.") and k.endswith(".input_layernorm.weight")
    )
    vlm_name = str(options["vlm_model_name"])
    backbone, widths_from = backbone_fields(src, vlm_name, depth)
    notes.append(f"backbone widths from {widths_from}")
    config = _smolvla_config(options, features, norm, backbone, config_path)
    if config.empty_cameras:
        notes.append(
            f"{config.empty_cameras} empty camera slot(s): LeRobot masks them out, so they are "
            "left out"
        )
    # The unnormalizer's scale differs from the normalizer's for MEAN_STD (no eps).
    for name, stats, inverse in (("state", norm.state, False), ("action", norm.action, True)):
        center, scale = affine(stats, norm.eps, "lerobot", inverse)
        weights[f"{name}_norm.center"], weights[f"{name}_norm.scale"] = center, scale
    module = cast(SmolVLAPolicy, build_module(config, weights, src / WEIGHTS_FILE))

    names = resolve_joint_names(
        src, joint_names, features.action_dim, notes, "set policy.joint_names"
    )
    tokenizer_name = tokenizer_step.get("tokenizer_name") or vlm_name
    tokenizer = find_tokenizer(src, str(tokenizer_name))
    if tokenizer is None:
        notes.append(
            f"no tokenizer.json ships with the checkpoint or is cached for {tokenizer_name}"
        )
    steps = config.n_action_steps
    try:
        spec = PolicySpec(
            cameras=tuple(
                CameraSpec(name=name, height=height, width=width)
                for name, (height, width) in zip(features.camera_names, features.sizes, strict=True)
            ),
            state_size=config.state_size,
            joint_names=tuple(names),
            chunk_size=config.chunk_size,
            execution=Execution(
                query_period=steps,
                ensemble="newest",
                source=f"LeRobot smolvla config: n_action_steps={steps}",
            ),
            prompt=smolvla_prompt(tokenizer, config) if tokenizer is not None else None,
        )
    except ValidationError as exc:
        raise CheckpointError(f"{config_path}: spec {describe_validation_error(exc)}") from None
    return LeRobotSmolVLA(policy=smolvla_policy(module, spec), layout=layout, notes=notes)


def _read_options(raw: dict[str, Any], path: Path, allow_unknown: bool) -> dict[str, Any]:
    policy_type = raw.get("type")
    if policy_type != LEROBOT_TYPE:
        raise CheckpointError(
            f"{path} describes a LeRobot '{policy_type}' policy, not SmolVLA (type "
            f"'{LEROBOT_TYPE}')"
        )
    refuse_unknown_options(raw, path, _DEFAULTS, allow_unknown, ignored=_IGNORED)
    options = {name: raw.get(name, default) for name, default in _DEFAULTS.items()}
    refused = (
        ("n_obs_steps", options["n_obs_steps"] != 1, "one observation step"),
        ("adapt_to_pi_aloha", options["adapt_to_pi_aloha"], "no ALOHA space conversion"),
        (
            "use_delta_joint_actions_aloha",
            options["use_delta_joint_actions_aloha"],
            "absolute actions",
        ),
        (
            "add_image_special_tokens",
            options["add_image_special_tokens"],
            "no image special tokens",
        ),
        ("prefix_length", options["prefix_length"] > 0, "the prefix at its own length"),
        (
            "num_expert_layers",
            options["num_expert_layers"] > 0
            and options["num_expert_layers"] != options["num_vlm_layers"],
            "an expert as deep as the language model",
        ),
    )
    for name, is_refused, served in refused:
        if is_refused:
            raise CheckpointError(
                f"{path}: {name} = {options[name]!r} is not served; Tempo's SmolVLA serves {served}"
            )
    if not isinstance(options["normalization_mapping"], dict):
        raise CheckpointError(f"{path}: normalization_mapping must be an object")
    return options


def _without_empty_cameras(raw: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """config.json without the empty camera slots LeRobot lists among the input features
    (`observation.images.empty_camera_<i>`, added by its validate_features): no robot sends
    them and the model masks them out."""
    inputs = raw.get("input_features")
    count = options["empty_cameras"]
    if not isinstance(inputs, dict) or not isinstance(count, int) or count <= 0:
        return raw
    empty = {f"observation.images.empty_camera_{i}" for i in range(count)}
    return {**raw, "input_features": {k: v for k, v in inputs.items() if k not in empty}}


def _stats_from_processors(
    src: Path, features: Features, mapping: dict[str, Any], notes: list[str]
) -> tuple[NormStats, dict[str, Any]]:
    """The state's and actions' statistics from the processor files, and the tokenizer step's
    config (empty without one)."""
    pre_path, post_path = src / PREPROCESSOR_FILE, src / POSTPROCESSOR_FILE
    for path in (pre_path, post_path):
        if not path.exists():
            raise CheckpointError(
                f"{path} is missing; a LeRobot 0.6 SmolVLA keeps its normalization statistics "
                "in both processor files"
            )
    pre = read_pipeline(pre_path, _PREPROCESSOR_STEPS)
    post = read_pipeline(post_path, _POSTPROCESSOR_STEPS)
    renames = pre.get("rename_observations_processor")
    if renames is not None and renames.config.get("rename_map"):
        notes.append(f"{PREPROCESSOR_FILE} renames incoming keys {renames.config['rename_map']}")
    normalizer, unnormalizer = pre.get("normalizer_processor"), post.get("unnormalizer_processor")
    if normalizer is None or unnormalizer is None:
        where = pre_path if normalizer is None else post_path
        raise CheckpointError(f"{where} has no (un)normalizer step; the checkpoint is incomplete")
    state = lerobot_feature_stats(
        normalizer, STATE_KEY, "STATE", features.state_dim, mapping, pre_path
    )
    action = lerobot_feature_stats(
        unnormalizer, ACTION_KEY, "ACTION", features.action_dim, mapping, post_path
    )
    eps = step_eps(normalizer, pre_path)
    if step_eps(unnormalizer, post_path) != eps:
        raise CheckpointError(f"{src}: the normalizer and unnormalizer use different eps")
    _check_finite(state, STATE_KEY, pre_path)
    _check_finite(action, ACTION_KEY, post_path)
    tokenizer = pre.get("tokenizer_processor")
    return NormStats(state, action, eps, "lerobot"), dict(tokenizer.config) if tokenizer else {}


def _stats_from_buffers(
    tensors: dict[str, torch.Tensor],
    features: Features,
    mapping: dict[str, Any],
    path: Path,
    notes: list[str],
) -> NormStats:
    """The older layout: statistics are buffers of the Normalize modules inside the weights
    (removed from `tensors`, which is left holding the network's weights)."""
    remedy = "the weights and config.json come from different policies"

    def stats(module: str, key: str, kind: str, size: int) -> FeatureStats:
        prefix = f"{module}.buffer_{key.replace('.', '_')}."
        found = {k.removeprefix(prefix): t for k, t in tensors.items() if k.startswith(prefix)}
        mode = mapping.get(kind, "IDENTITY")
        result = feature_stats(mode, size, found, f"'{key}'", f"{path} (buffers)", remedy)
        _check_finite(result, key, path)
        return result

    state = stats("normalize_inputs", STATE_KEY, "STATE", features.state_dim)
    action = stats("unnormalize_outputs", ACTION_KEY, "ACTION", features.action_dim)
    dropped = [
        k
        for k in tensors
        if k.startswith(("normalize_inputs.", "normalize_targets.", "unnormalize_outputs."))
    ]
    for key in dropped:
        del tensors[key]
    if dropped:
        notes.append(f"read the statistics from {len(dropped)} normalization buffer(s)")
    return NormStats(state, action, LEROBOT_EPS, "lerobot")


def _check_finite(stats: FeatureStats, key: str, where: Path) -> None:
    for name in ("mean", "std", "min", "max"):
        value = getattr(stats, name)
        if value is not None and not bool(torch.isfinite(value).all()):
            raise CheckpointError(
                f"{where}: the '{name}' statistic of '{key}' is not finite (LeRobot's placeholder "
                "before a dataset's statistics are set); fine-tune the policy on a dataset first"
            )


def _tempo_weights(tensors: dict[str, torch.Tensor], path: Path) -> dict[str, torch.Tensor]:
    """LeRobot's weight names -> Tempo's (see the module doc)."""
    weights = {}
    for key, tensor in tensors.items():
        if not key.startswith("model."):
            raise CheckpointError(
                f"{path} has tensor '{key}', which is neither a model weight (model.*) nor a "
                "normalization buffer; this is not a LeRobot SmolVLA checkpoint Tempo can read"
            )
        name = key.removeprefix("model.")
        if name in _DROPPED:
            continue
        for old, new in _RENAMES:
            if name.startswith(old):
                name = new + name.removeprefix(old)
                break
        weights[name] = tensor
    return weights


def _smolvla_config(
    options: dict[str, Any],
    features: Features,
    norm: NormStats,
    backbone: dict[str, Any],
    path: Path,
) -> SmolVLAConfig:
    values = {name: options[name] for name in _CONFIG_FIELDS}
    try:
        return SmolVLAConfig.model_validate(
            {
                **values,
                **backbone,
                "resize_imgs_with_padding": tuple(options["resize_imgs_with_padding"]),
                "camera_sizes": tuple(features.sizes),
                "state_size": features.state_dim,
                "action_size": features.action_dim,
                "state_norm": norm.state.mode,
                "action_norm": norm.action.mode,
            }
        )
    except ValidationError as exc:
        raise CheckpointError(f"{path}: {describe_validation_error(exc)}") from None
