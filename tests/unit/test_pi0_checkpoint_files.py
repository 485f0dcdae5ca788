"""pi0 / pi0.5 checkpoints in LeRobot's and openpi's layouts (tests/pi0_checkpoint_dirs.py writes
them as those programs do) read back into one form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from controller.errors import CheckpointError
from policies.pi0.checkpoint_files import read_pi0_checkpoint
from tests.pi0_checkpoint_dirs import (
    ACTION,
    EMBED,
    EXPERT,
    LM_HEAD,
    STATE,
    lerobot_config,
    openpi_stats,
    write_json,
    write_lerobot,
    write_openpi,
)

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
    path.write_text(json.dumps(openpi_stats(6, 5, quantiles=False)))
    files = read_pi0_checkpoint(tmp_path)
    assert (files.state_size, files.action_size) == (6, 5)
    assert files.norm.state.q01 is None


def test_openpi_several_assets_need_an_asset_id(tmp_path: Path) -> None:
    write_openpi(tmp_path, "pi0")
    other = tmp_path / "assets" / "trossen" / "norm_stats.json"
    other.parent.mkdir()
    other.write_text(json.dumps(openpi_stats(14, 14)))
    with pytest.raises(CheckpointError, match=r"several robots \(droid, trossen\)"):
        read_pi0_checkpoint(tmp_path)
    assert read_pi0_checkpoint(tmp_path, asset_id="trossen").state_size == 14


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
    write_json(tmp_path / "config.json", {**lerobot_config("pi0"), "action_feature_names": names})
    files = read_pi0_checkpoint(tmp_path)
    assert (files.tokenizer, files.tokenizer_name) == (None, "google/paligemma-3b-pt-224")
    assert files.config_fields["tokenizer_max_length"] == 64
    assert files.action_names == tuple(names)
    assert any("no tokenizer ships" in note for note in files.notes)


@pytest.mark.parametrize(("writer", "family"), [(write_lerobot, "pi05"), (write_openpi, "pi0")])
def test_without_tensors_the_shapes_come_from_the_header(
    tmp_path: Path, writer: Any, family: str
) -> None:
    """tensors=False loads no weight; shapes name what a full read would load (renamed, the tied
    embedding too), and everything else is what a full read gives."""
    writer(tmp_path, family)
    full = read_pi0_checkpoint(tmp_path)
    header_only = read_pi0_checkpoint(tmp_path, tensors=False)
    assert header_only.tensors == {}
    assert header_only.shapes == {key: tuple(t.shape) for key, t in full.tensors.items()}
    assert full.shapes == header_only.shapes and EMBED in full.shapes
    assert (header_only.family, header_only.config_fields, header_only.notes) == (
        full.family,
        full.config_fields,
        full.notes,
    )
