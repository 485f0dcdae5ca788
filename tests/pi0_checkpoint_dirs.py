"""pi0 / pi0.5 checkpoint directories in LeRobot's and openpi's layouts, written file for file as
those programs write them (small tensors), for the pi0 checkpoint tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

STATE, ACTION = 14, 7
EXPERT = "paligemma_with_expert.gemma_expert.model."
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
VISION = "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.weight"  # noqa: E501


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4))


def lerobot_stats(key: str, size: int, shift: float) -> dict[str, torch.Tensor]:
    """A dataset's statistics of one feature as LeRobot keeps them (count and q10..q90 too)."""
    base = torch.arange(size, dtype=torch.float32) + shift
    return {
        f"{key}.mean": base,
        f"{key}.std": base + 1,
        f"{key}.min": base - 5,
        f"{key}.max": base + 5,
        f"{key}.q01": base - 4,
        f"{key}.q10": base - 3,
        f"{key}.q50": base.clone(),
        f"{key}.q90": base + 3,
        f"{key}.q99": base + 4,
        f"{key}.count": torch.tensor([1000]),
    }


def lerobot_config(family: str) -> dict[str, Any]:
    """config.json as draccus encodes PI0Config / PI05Config (every field, "type" first)."""
    config: dict[str, Any] = {
        "type": family,
        "n_obs_steps": 1,
        "input_features": {
            "observation.images.base_0_rgb": {"type": "VISUAL", "shape": [3, 480, 640]},
            "observation.images.left_wrist_0_rgb": {"type": "VISUAL", "shape": [3, 240, 320]},
            "observation.state": {"type": "STATE", "shape": [STATE]},
            "observation.images.empty_camera_0": {"type": "VISUAL", "shape": [3, 224, 224]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [ACTION]}},
        "device": "cuda",
        "use_amp": False,
        "use_peft": False,
        "push_to_hub": True,
        "repo_id": None,
        "private": None,
        "tags": None,
        "license": None,
        "pretrained_path": None,
        "pretrained_revision": None,
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "dtype": "bfloat16",
        "chunk_size": 50,
        "n_action_steps": 25,
        "max_state_dim": 32,
        "max_action_dim": 32,
        "num_inference_steps": 10,
        "time_sampling_beta_alpha": 1.5,
        "time_sampling_beta_beta": 1.0,
        "time_sampling_scale": 0.999,
        "time_sampling_offset": 0.001,
        "min_period": 0.004,
        "max_period": 4.0,
        "use_relative_actions": False,
        "relative_exclude_joints": ["gripper"],
        "action_feature_names": None,
        "rtc_config": None,
        "image_resolution": [224, 224],
        "empty_cameras": 1,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "gradient_checkpointing": False,
        "compile_model": False,
        "compile_mode": "max-autotune",
        "freeze_vision_encoder": False,
        "train_expert_only": False,
        "optimizer_lr": 2.5e-05,
        "optimizer_betas": [0.9, 0.95],
        "optimizer_eps": 1e-08,
        "optimizer_weight_decay": 0.01,
        "optimizer_grad_clip_norm": 1.0,
        "scheduler_warmup_steps": 1000,
        "scheduler_decay_steps": 30000,
        "scheduler_decay_lr": 2.5e-06,
        "tokenizer_max_length": 48,
    }
    if family == "pi05":
        config.update(
            use_visual_memory=False,
            use_proprioceptive_memory=False,
            memory_frames=6,
            memory_stride=30,
            memory_temporal_attention_every=4,
            rtc_training_max_delay=0,
            tokenizer_max_length=200,
            normalization_mapping={
                "VISUAL": "IDENTITY",
                "STATE": "QUANTILES",
                "ACTION": "QUANTILES",
            },
        )
    return config


def weights_of(family: str) -> dict[str, torch.Tensor]:
    """A few tensors of PI0Pytorch's state dict (no prefix), small; the tied token embedding is
    absent, as safetensors' save_model leaves it."""
    tensors = {
        LM_HEAD: torch.randn(16, 8),
        VISION: torch.randn(4, 3, 2, 2),
        "action_in_proj.weight": torch.randn(8, 32),
        "action_out_proj.bias": torch.randn(32),
    }
    if family == "pi0":
        tensors["state_proj.weight"] = torch.randn(8, 32)
        tensors["action_time_mlp_in.weight"] = torch.randn(8, 16)
        tensors[f"{EXPERT}layers.0.input_layernorm.weight"] = torch.randn(8)
    else:
        tensors["time_mlp_in.weight"] = torch.randn(8, 8)
        tensors[f"{EXPERT}layers.0.input_layernorm.dense.weight"] = torch.randn(24, 8)
    return tensors


def write_lerobot(directory: Path, family: str = "pi0") -> dict[str, torch.Tensor]:
    """A LeRobot pi0 / pi05 policy directory as save_pretrained writes it; returns the weights
    in PI0Pytorch's key space."""
    config = lerobot_config(family)
    write_json(directory / "config.json", config)
    weights = weights_of(family)
    save_file({f"model.{k}": v for k, v in weights.items()}, directory / "model.safetensors")
    mapping = config["normalization_mapping"]
    features = {**config["input_features"], **config["output_features"]}
    stats: dict[str, torch.Tensor] = {}
    for key in config["input_features"]:
        if key.startswith("observation.images."):
            stats |= {f"{key}.{s}": torch.full((3, 1, 1), 0.5) for s in ("mean", "std")}
    stats |= lerobot_stats("observation.state", STATE, 0.0) | lerobot_stats("action", ACTION, 100.0)
    normalizer = "policy_preprocessor_step_6_normalizer_processor.safetensors"
    tokenizer = {
        "max_length": config["tokenizer_max_length"],
        "task_key": "task",
        "padding_side": "right",
        "padding": "max_length",
        "truncation": True,
        "tokenizer_name": "tokenizer",
    }
    norm_config = {"eps": 1e-08, "features": features, "norm_map": mapping}
    relative = {"enabled": False, "exclude_joints": ["gripper"], "action_names": None}
    if family == "pi0":
        steps = [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "pi0_new_line_processor", "config": {}},
            {
                "registry_name": "tokenizer_processor",
                "config": tokenizer,
                "artifacts": {"tokenizer_name": "tokenizer"},
            },
            {
                "registry_name": "device_processor",
                "config": {"device": "cuda", "float_dtype": None},
            },
            {"registry_name": "relative_actions_processor", "config": relative},
            {
                "registry_name": "normalizer_processor",
                "config": norm_config,
                "state_file": normalizer,
            },
        ]
    else:
        normalizer = "policy_preprocessor_step_3_normalizer_processor.safetensors"
        steps = [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "relative_actions_processor", "config": relative},
            {
                "registry_name": "normalizer_processor",
                "config": norm_config,
                "state_file": normalizer,
            },
            {
                "registry_name": "pi05_prepare_state_tokenizer_processor_step",
                "config": {},  # the step has no get_config: LeRobot writes {}
            },
            {
                "registry_name": "tokenizer_processor",
                "config": tokenizer,
                "artifacts": {"tokenizer_name": "tokenizer"},
            },
            {
                "registry_name": "device_processor",
                "config": {"device": "cuda", "float_dtype": None},
            },
        ]
    write_json(
        directory / "policy_preprocessor.json", {"name": "policy_preprocessor", "steps": steps}
    )
    save_file(stats, directory / normalizer)
    unnormalizer = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    post_steps = [
        {
            "registry_name": "unnormalizer_processor",
            "config": {
                "eps": 1e-08,
                "features": config["output_features"],
                "norm_map": mapping,
            },
            "state_file": unnormalizer,
        },
        {"registry_name": "absolute_actions_processor", "config": {"enabled": False}},
        {"registry_name": "device_processor", "config": {"device": "cpu", "float_dtype": None}},
    ]
    write_json(
        directory / "policy_postprocessor.json",
        {"name": "policy_postprocessor", "steps": post_steps},
    )
    save_file(lerobot_stats("action", ACTION, 100.0), directory / unnormalizer)
    write_json(directory / "tokenizer" / "tokenizer_config.json", {"model_max_length": 8192})
    (directory / "tokenizer" / "tokenizer.json").write_text("{}")
    return weights


def openpi_stats(state: int, action: int, quantiles: bool = True) -> dict[str, Any]:
    def one(size: int, shift: float) -> dict[str, Any]:
        values = [float(i) + shift for i in range(size)]
        return {
            "mean": values,
            "std": [v + 1 for v in values],
            "q01": [v - 4 for v in values] if quantiles else None,
            "q99": [v + 4 for v in values] if quantiles else None,
        }

    return {"norm_stats": {"state": one(state, 0.0), "actions": one(action, 100.0)}}


def write_openpi(directory: Path, family: str = "pi05", asset: str = "droid") -> dict:
    """An openpi PyTorch checkpoint as convert_jax_model_to_pytorch.py writes it."""
    directory.mkdir(parents=True, exist_ok=True)
    weights = {k: v.to(torch.bfloat16) for k, v in weights_of(family).items()}
    save_file(weights, directory / "model.safetensors")
    config = {
        "action_dim": 32,
        "action_horizon": 10 if family == "pi05" else 50,
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "precision": "bfloat16",
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    stats = directory / "assets" / asset / "norm_stats.json"
    stats.parent.mkdir(parents=True)
    stats.write_text(json.dumps(openpi_stats(8, 8), indent=2))
    return weights
