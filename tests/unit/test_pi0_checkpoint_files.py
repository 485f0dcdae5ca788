"""pi0 / pi0.5 checkpoints in LeRobot's and openpi's layouts, written here file for file as
those programs write them, read back into one form; and the directories it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from controller.errors import CheckpointError
from policies.pi0.checkpoint_files import read_pi0_checkpoint

STATE, ACTION = 14, 7
EXPERT = "paligemma_with_expert.gemma_expert.model."
LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
EMBED = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
VISION = "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.weight"  # noqa: E501


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4))


def _stats(key: str, size: int, shift: float) -> dict[str, torch.Tensor]:
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


def _lerobot_config(family: str) -> dict[str, Any]:
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


def _weights(family: str) -> dict[str, torch.Tensor]:
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
    config = _lerobot_config(family)
    _write_json(directory / "config.json", config)
    weights = _weights(family)
    save_file({f"model.{k}": v for k, v in weights.items()}, directory / "model.safetensors")
    mapping = config["normalization_mapping"]
    features = {**config["input_features"], **config["output_features"]}
    stats: dict[str, torch.Tensor] = {}
    for key in config["input_features"]:
        if key.startswith("observation.images."):
            stats |= {f"{key}.{s}": torch.full((3, 1, 1), 0.5) for s in ("mean", "std")}
    stats |= _stats("observation.state", STATE, 0.0) | _stats("action", ACTION, 100.0)
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
    _write_json(
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
    _write_json(
        directory / "policy_postprocessor.json",
        {"name": "policy_postprocessor", "steps": post_steps},
    )
    save_file(_stats("action", ACTION, 100.0), directory / unnormalizer)
    _write_json(directory / "tokenizer" / "tokenizer_config.json", {"model_max_length": 8192})
    (directory / "tokenizer" / "tokenizer.json").write_text("{}")
    return weights


def _openpi_stats(state: int, action: int, quantiles: bool = True) -> dict[str, Any]:
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
    weights = {k: v.to(torch.bfloat16) for k, v in _weights(family).items()}
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
    stats.write_text(json.dumps(_openpi_stats(8, 8), indent=2))
    return weights


# --- reading both layouts ------------------------------------------------------------------


def test_lerobot_pi0_reads_every_field(tmp_path: Path) -> None:
    weights = write_lerobot(tmp_path, "pi0")
    files = read_pi0_checkpoint(tmp_path)
    assert (files.family, files.source, files.path) == ("pi0", "lerobot", tmp_path)
    assert files.config_fields == {
        "chunk_size": 50,
        "n_action_steps": 25,
        "max_state_dim": 32,
        "max_action_dim": 32,
        "num_inference_steps": 10,
        "tokenizer_max_length": 48,
        "empty_cameras": 1,
        "image_resolution": (224, 224),
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "dtype": "bfloat16",
        "min_period": 0.004,
        "max_period": 4.0,
    }
    assert files.camera_names == ("base_0_rgb", "left_wrist_0_rgb")
    assert files.image_sizes == ((480, 640), (240, 320))
    assert (files.state_size, files.action_size, files.action_names) == (STATE, ACTION, None)
    assert set(files.tensors) == set(weights) | {EMBED}
    for key, tensor in weights.items():
        assert torch.equal(files.tensors[key], tensor)
    assert torch.equal(files.tensors[EMBED], weights[LM_HEAD])
    norm = files.norm
    assert (norm.convention, norm.eps) == ("lerobot", 1e-8)
    assert (norm.state.mode, norm.state.size) == ("MEAN_STD", STATE)
    assert torch.equal(norm.state.mean, torch.arange(STATE, dtype=torch.float32))
    assert torch.equal(norm.state.std, torch.arange(STATE, dtype=torch.float32) + 1)
    assert torch.equal(norm.state.q01, torch.arange(STATE, dtype=torch.float32) - 4)
    assert torch.equal(norm.state.max, torch.arange(STATE, dtype=torch.float32) + 5)
    assert (norm.action.mode, norm.action.size) == ("MEAN_STD", ACTION)
    assert torch.equal(norm.action.mean, torch.arange(ACTION, dtype=torch.float32) + 100)
    assert torch.equal(norm.action.q99, torch.arange(ACTION, dtype=torch.float32) + 104)
    assert files.tokenizer == tmp_path / "tokenizer"
    assert files.tokenizer_name == "tokenizer"


def test_lerobot_pi05_uses_quantiles_and_adarms_weights(tmp_path: Path) -> None:
    weights = write_lerobot(tmp_path, "pi05")
    files = read_pi0_checkpoint(tmp_path)
    assert (files.family, files.source) == ("pi05", "lerobot")
    assert files.config_fields["tokenizer_max_length"] == 200
    assert files.norm.state.mode == files.norm.action.mode == "QUANTILES"
    assert torch.equal(files.norm.action.q01, torch.arange(ACTION, dtype=torch.float32) + 96)
    assert "time_mlp_in.weight" in files.tensors
    assert f"{EXPERT}layers.0.input_layernorm.dense.weight" in files.tensors
    assert set(files.tensors) == set(weights) | {EMBED}


def test_lerobot_training_run_checkpoint_folder_is_found(tmp_path: Path) -> None:
    write_lerobot(tmp_path / "pretrained_model", "pi0")
    assert read_pi0_checkpoint(tmp_path).path == tmp_path / "pretrained_model"


def test_lerobot_old_key_names_are_renamed(tmp_path: Path) -> None:
    """LeRobot's _fix_pytorch_state_dict_keys: pi0 takes time_mlp_* as action_time_mlp_*;
    pi0.5 drops state_proj and the plain (non-adaRMS) expert norms."""
    write_lerobot(tmp_path / "a", "pi0")
    save_file(
        {"model.time_mlp_out.bias": torch.ones(8), "model.state_proj.weight": torch.ones(8, 32)},
        tmp_path / "a" / "model.safetensors",
    )
    assert set(read_pi0_checkpoint(tmp_path / "a").tensors) == {
        "action_time_mlp_out.bias",
        "state_proj.weight",
    }
    write_lerobot(tmp_path / "b", "pi05")
    norm = f"model.{EXPERT}layers.3.post_attention_layernorm.weight"
    save_file(
        {
            "model.action_time_mlp_in.weight": torch.ones(8, 8),
            "model.state_proj.weight": torch.ones(8, 32),
            norm: torch.ones(8),
            f"model.{EXPERT}norm.weight": torch.ones(8),
        },
        tmp_path / "b" / "model.safetensors",
    )
    files = read_pi0_checkpoint(tmp_path / "b")
    assert set(files.tensors) == {"time_mlp_in.weight"}
    assert any("dropped 3 tensors" in note for note in files.notes)


@pytest.mark.parametrize("family", ["pi0", "pi05"])
def test_openpi_reads_every_field(tmp_path: Path, family: str) -> None:
    weights = write_openpi(tmp_path, family)
    files = read_pi0_checkpoint(tmp_path)
    assert (files.family, files.source) == (family, "openpi")
    horizon = 10 if family == "pi05" else 50
    assert files.config_fields == {
        "chunk_size": horizon,
        "n_action_steps": horizon,
        "max_state_dim": 32,
        "max_action_dim": 32,
        "num_inference_steps": 10,
        "tokenizer_max_length": 200 if family == "pi05" else 48,
        "empty_cameras": 0,
        "image_resolution": (224, 224),
        "paligemma_variant": "gemma_2b",
        "action_expert_variant": "gemma_300m",
        "dtype": "bfloat16",
        "min_period": 0.004,
        "max_period": 4.0,
    }
    assert files.camera_names == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    assert files.image_sizes == ((224, 224),) * 3
    assert (files.state_size, files.action_size, files.action_names) == (8, 8, None)
    assert set(files.tensors) == set(weights) | {EMBED}
    for key, tensor in weights.items():
        assert files.tensors[key].dtype == torch.bfloat16
        assert torch.equal(files.tensors[key], tensor)
    assert files.tensors[EMBED] is files.tensors[LM_HEAD]
    norm = files.norm
    assert (norm.convention, norm.eps) == ("openpi", 1e-6)
    mode = "QUANTILES" if family == "pi05" else "MEAN_STD"
    assert norm.state.mode == norm.action.mode == mode
    assert torch.equal(norm.action.mean, torch.arange(8, dtype=torch.float32) + 100)
    assert torch.equal(norm.state.std, torch.arange(8, dtype=torch.float32) + 1)
    assert torch.equal(norm.state.q99, torch.arange(8, dtype=torch.float32) + 4)
    assert norm.state.min is None and norm.state.max is None
    assert (files.tokenizer, files.tokenizer_name) == (None, "google/paligemma-3b-pt-224")
    assert any("assets/droid/norm_stats.json" in note for note in files.notes)


def test_openpi_pi0_stats_without_quantiles_are_read(tmp_path: Path) -> None:
    write_openpi(tmp_path, "pi0")
    path = tmp_path / "assets" / "droid" / "norm_stats.json"
    path.write_text(json.dumps(_openpi_stats(6, 5, quantiles=False)))
    files = read_pi0_checkpoint(tmp_path)
    assert (files.state_size, files.action_size) == (6, 5)
    assert files.norm.state.q01 is None


def test_openpi_several_assets_need_an_asset_id(tmp_path: Path) -> None:
    write_openpi(tmp_path, "pi0")
    other = tmp_path / "assets" / "trossen" / "norm_stats.json"
    other.parent.mkdir()
    other.write_text(json.dumps(_openpi_stats(14, 14)))
    with pytest.raises(CheckpointError, match=r"several robots \(droid, trossen\)"):
        read_pi0_checkpoint(tmp_path)
    assert read_pi0_checkpoint(tmp_path, asset_id="trossen").state_size == 14


# --- refusals ------------------------------------------------------------------------------


def _refusal(path: Path, match: str, **kwargs: Any) -> str:
    with pytest.raises(CheckpointError, match=match) as caught:
        read_pi0_checkpoint(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_another_lerobot_family_is_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path, "pi0")
    _write_json(tmp_path / "config.json", {**_lerobot_config("pi0"), "type": "act"})
    _refusal(tmp_path, "LeRobot 'act' policy; this reader takes pi0 and pi05")


def test_a_missing_model_safetensors_is_refused(tmp_path: Path) -> None:
    write_openpi(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    _refusal(tmp_path, "model.safetensors is missing")


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt"])
def test_pickle_only_weights_are_refused(tmp_path: Path, name: str) -> None:
    write_lerobot(tmp_path, "pi0")
    (tmp_path / "model.safetensors").rename(tmp_path / name)
    _refusal(tmp_path, f"{name}, a pickle file Tempo does not load")


def test_missing_norm_stats_are_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path / "lerobot", "pi0")
    (tmp_path / "lerobot" / "policy_postprocessor.json").unlink()
    _refusal(tmp_path / "lerobot", "policy_postprocessor.json is missing")
    write_openpi(tmp_path / "openpi")
    (tmp_path / "openpi" / "assets" / "droid" / "norm_stats.json").unlink()
    _refusal(tmp_path / "openpi", "has no assets/<asset_id>/norm_stats.json")


def test_a_base_model_without_statistics_is_refused(tmp_path: Path) -> None:
    """A base model's normalizer has no state file; its MEAN_STD mode then has nothing."""
    write_lerobot(tmp_path, "pi0")
    path = tmp_path / "policy_preprocessor.json"
    pipeline = json.loads(path.read_text())
    del pipeline["steps"][-1]["state_file"]
    path.write_text(json.dumps(pipeline))
    _refusal(tmp_path, "no 'mean' statistic for 'observation.state'.*fine-tuned")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "is not valid JSON"),
        (json.dumps({"state": {}}), "field 'norm_stats' is missing"),
        (json.dumps({"norm_stats": {"state": {"mean": [1.0]}}}), "'norm_stats.state.std'"),
        (
            json.dumps({"norm_stats": {"state": {"mean": ["a"], "std": [1.0]}}}),
            "'norm_stats.state.mean.0' is invalid",
        ),
        (json.dumps({"norm_stats": {"state": {"mean": [1.0], "std": [1.0]}}}), "no 'actions'"),
    ],
)
def test_a_malformed_norm_stats_json_is_refused(tmp_path: Path, content: str, match: str) -> None:
    write_openpi(tmp_path)
    (tmp_path / "assets" / "droid" / "norm_stats.json").write_text(content)
    _refusal(tmp_path, match)


def test_lerobot_stats_that_do_not_fit_the_features_are_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path, "pi0")
    save_file(
        _stats("action", ACTION + 1, 0.0),
        tmp_path / "policy_postprocessor_step_0_unnormalizer_processor.safetensors",
    )
    _refusal(tmp_path, "statistic 'mean' of 'action' has 8 values but 'action' has 7")


def test_openpi_stats_that_do_not_fit_the_model_are_refused(tmp_path: Path) -> None:
    write_openpi(tmp_path)
    path = tmp_path / "assets" / "droid" / "norm_stats.json"
    path.write_text(json.dumps(_openpi_stats(33, 8)))
    _refusal(tmp_path, "'state' has 33 values; the model takes 1 to 32")
    stats = _openpi_stats(8, 8)
    stats["norm_stats"]["actions"]["q99"] = [1.0] * 7
    path.write_text(json.dumps(stats))
    _refusal(tmp_path, "statistic 'q99' of 'actions' has 7 values but 'actions' has 8")


def test_a_state_longer_than_max_state_dim_is_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path, "pi0")
    _write_json(tmp_path / "config.json", {**_lerobot_config("pi0"), "max_state_dim": 8})
    _refusal(tmp_path, r"state \(14\).*longer than max_state_dim")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"use_relative_actions": True}, "use_relative_actions is on"),
        ({"use_visual_memory": True}, "observation memory is not supported"),
        ({"new_option": 1}, "field 'new_option' is not a known option"),
        ({"dtype": "float16"}, "field 'dtype' is invalid"),
        ({"n_action_steps": 60}, r"n_action_steps \(60\) exceeds chunk_size \(50\)"),
        ({"image_resolution": [224, 256]}, "is not square"),
        ({"proj_width": 1024}, "pre-openpi pi0 layout"),
        ({"normalization_mapping": {"VISUAL": "MEAN_STD"}}, "reads them un-normalized"),
    ],
)
def test_lerobot_options_that_matter_are_refused(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    write_lerobot(tmp_path, "pi05")
    _write_json(tmp_path / "config.json", {**_lerobot_config("pi05"), **change})
    _refusal(tmp_path, match)


def test_an_unknown_mode_and_a_value_changing_step_are_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path, "pi0")
    path = tmp_path / "policy_postprocessor.json"
    pipeline = json.loads(path.read_text())
    pipeline["steps"][0]["config"]["norm_map"]["ACTION"] = "QUANTILE10"
    path.write_text(json.dumps(pipeline))
    _refusal(tmp_path, "mode 'QUANTILE10' for 'action' is not supported")
    pipeline["steps"].insert(1, {"registry_name": "clip_processor", "config": {}})
    path.write_text(json.dumps(pipeline))
    _refusal(tmp_path, "pipeline step 'clip_processor' is not one Tempo knows")


def test_openpi_checkpoints_that_are_not_pytorch_pi0_are_refused(tmp_path: Path) -> None:
    (tmp_path / "jax" / "params").mkdir(parents=True)
    _refusal(tmp_path / "jax", "openpi JAX checkpoint.*convert_jax_model_to_pytorch")
    write_openpi(tmp_path / "other")
    save_file({"action_in_proj.weight": torch.ones(2, 2)}, tmp_path / "other" / "model.safetensors")
    _refusal(tmp_path / "other", "neither pi0.5's time_mlp_in nor pi0's state_proj")
    write_openpi(tmp_path / "said", "pi0")
    config = json.loads((tmp_path / "said" / "config.json").read_text())
    (tmp_path / "said" / "config.json").write_text(json.dumps({**config, "pi05": True}))
    _refusal(tmp_path / "said", "says pi05 is True but the weights are pi0's")


def test_a_directory_of_neither_layout_is_refused(tmp_path: Path) -> None:
    write_openpi(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    _refusal(tmp_path, "neither a LeRobot policy config .* nor an openpi PyTorch config")


def test_openpi_pi05_stats_without_quantiles_are_refused(tmp_path: Path) -> None:
    """openpi normalizes pi0.5 with quantiles (use_quantile_norm), so q01 / q99 are needed."""
    write_openpi(tmp_path, "pi05")
    path = tmp_path / "assets" / "droid" / "norm_stats.json"
    path.write_text(json.dumps(_openpi_stats(8, 8, quantiles=False)))
    _refusal(tmp_path, "no 'q01' statistic for 'state'.*compute_norm_stats")


def test_lerobot_without_a_shipped_tokenizer_names_the_hub_one(tmp_path: Path) -> None:
    """Older LeRobot wrote only the tokenizer's Hub name; the step's max_length is what runs."""
    write_lerobot(tmp_path, "pi0")
    (tmp_path / "tokenizer" / "tokenizer.json").unlink()
    path = tmp_path / "policy_preprocessor.json"
    pipeline = json.loads(path.read_text())
    step = pipeline["steps"][3]
    step["config"].update(tokenizer_name="google/paligemma-3b-pt-224", max_length=64)
    del step["artifacts"]
    path.write_text(json.dumps(pipeline))
    names = [f"j{i}" for i in range(ACTION)]
    _write_json(tmp_path / "config.json", {**_lerobot_config("pi0"), "action_feature_names": names})
    files = read_pi0_checkpoint(tmp_path)
    assert (files.tokenizer, files.tokenizer_name) == (None, "google/paligemma-3b-pt-224")
    assert files.config_fields["tokenizer_max_length"] == 64
    assert files.action_names == tuple(names)
    assert any("no tokenizer ships" in note for note in files.notes)
