"""The pi0 / pi0.5 checkpoint directories Tempo refuses, each with one sentence saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from controller.errors import CheckpointError
from policies.act.lerobot_format import Features
from policies.pi0.checkpoint_files import read_pi0_checkpoint
from tests.pi0_checkpoint_dirs import (
    ACTION,
    lerobot_config,
    lerobot_stats,
    openpi_stats,
    write_json,
    write_lerobot,
    write_openpi,
)


def _refusal(path: Path, match: str, **kwargs: Any) -> str:
    with pytest.raises(CheckpointError, match=match) as caught:
        read_pi0_checkpoint(path, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_another_lerobot_family_is_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path, "pi0")
    write_json(tmp_path / "config.json", {**lerobot_config("pi0"), "type": "act"})
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
        lerobot_stats("action", ACTION + 1, 0.0),
        tmp_path / "policy_postprocessor_step_0_unnormalizer_processor.safetensors",
    )
    _refusal(tmp_path, "statistic 'mean' of 'action' has 8 values but 'action' has 7")


def test_openpi_stats_that_do_not_fit_the_model_are_refused(tmp_path: Path) -> None:
    write_openpi(tmp_path)
    path = tmp_path / "assets" / "droid" / "norm_stats.json"
    path.write_text(json.dumps(openpi_stats(33, 8)))
    _refusal(tmp_path, "'state' has 33 values; the model takes 1 to 32")
    stats = openpi_stats(8, 8)
    stats["norm_stats"]["actions"]["q99"] = [1.0] * 7
    path.write_text(json.dumps(stats))
    _refusal(tmp_path, "statistic 'q99' of 'actions' has 7 values but 'actions' has 8")


def test_a_state_longer_than_max_state_dim_is_refused(tmp_path: Path) -> None:
    write_lerobot(tmp_path, "pi0")
    write_json(tmp_path / "config.json", {**lerobot_config("pi0"), "max_state_dim": 8})
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
    write_json(tmp_path / "config.json", {**lerobot_config("pi05"), **change})
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
    path.write_text(json.dumps(openpi_stats(8, 8, quantiles=False)))
    _refusal(tmp_path, "no 'q01' statistic for 'state'.*compute_norm_stats")


def test_a_feature_pi0_does_not_read_is_refused_naming_pi0(tmp_path: Path) -> None:
    """Features.parse names the family reading the config; ACT's reads an environment state."""
    write_lerobot(tmp_path, "pi0")
    config = lerobot_config("pi0")
    config["input_features"]["observation.environment_state"] = {"type": "ENV", "shape": [3]}
    write_json(tmp_path / "config.json", config)
    message = _refusal(tmp_path, "input feature 'observation.environment_state' \\(ENV")
    assert message.endswith("Tempo's pi0 reads cameras and observation.state")
    assert Features.parse(config, tmp_path / "config.json").env_state_dim == 3
    config["input_features"]["observation.audio"] = {"type": "AUDIO", "shape": [1, 8]}
    with pytest.raises(CheckpointError) as caught:
        Features.parse(config, tmp_path / "config.json")
    assert str(caught.value).endswith(
        "Tempo's ACT reads cameras, observation.state and observation.environment_state"
    )
