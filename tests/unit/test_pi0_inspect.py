"""`describe_pi0_checkpoint`: a pi0 / pi0.5 directory summarized from its config and its
safetensors header, with no weight loaded."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from controller.errors import CheckpointError
from policies.pi0.inspect import describe_pi0_checkpoint
from tests.pi0_checkpoint_dirs import EMBED, LM_HEAD, STATE, write_lerobot, write_openpi


def test_a_lerobot_pi0_directory_is_summarized(tmp_path: Path) -> None:
    weights = write_lerobot(tmp_path, "pi0")
    parameters = sum(t.numel() for t in weights.values())
    lines = describe_pi0_checkpoint(tmp_path)
    assert lines[:10] == [
        "family: pi0 (pi0)",
        "source layout: LeRobot",
        "cameras: base_0_rgb 480x640, left_wrist_0_rgb 240x320; 1 empty camera slot (each "
        "resized to 224x224)",
        f"state: {STATE} values (padded to 32); action: 7 values (padded to 32)",
        "prompt: up to 48 tokens (tokenizer_max_length)",
        "chunk_size: 50, n_action_steps: 25, num_inference_steps: 10",
        "model: PaliGemma gemma_2b with a gemma_300m action expert, run in bfloat16",
        f"parameters: {parameters:,} (tied token embedding counted once); weights in memory: "
        "FP32 0.00 GB, BF16 0.00 GB",
        "tokenizer: shipped in tokenizer/",
        "normalization: state MEAN_STD, action MEAN_STD (LeRobot's formulas, eps 1e-08)",
    ]
    assert all(line.startswith("note: ") for line in lines[10:])


def test_an_openpi_pi05_directory_is_summarized(tmp_path: Path) -> None:
    weights = write_openpi(tmp_path, "pi05")
    lines = describe_pi0_checkpoint(tmp_path)
    assert lines[0:2] == ["family: pi0.5 (pi05)", "source layout: openpi (PyTorch converter)"]
    assert lines[2] == (
        "cameras: base_0_rgb 224x224, left_wrist_0_rgb 224x224, right_wrist_0_rgb 224x224 "
        "(each resized to 224x224)"
    )
    assert lines[3] == "state: 8 values (padded to 32); action: 8 values (padded to 32)"
    assert lines[4] == "prompt: up to 200 tokens (tokenizer_max_length)"
    assert lines[5] == "chunk_size: 10, n_action_steps: 10, num_inference_steps: 10"
    assert lines[7].startswith(f"parameters: {sum(t.numel() for t in weights.values()):,} ")
    assert lines[8] == "tokenizer: not shipped; google/paligemma-3b-pt-224 must be fetched"
    assert (
        lines[9]
        == "normalization: state QUANTILES, action QUANTILES (openpi's formulas, eps 1e-06)"
    )
    assert "note: normalization statistics from assets/droid/norm_stats.json" in lines


def _header_only(path: Path, shapes: dict[str, list[int]]) -> None:
    """A safetensors file whose header promises BF16 tensors of `shapes` and holds none of
    their bytes: reading any tensor fails, reading the header does not."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    data = json.dumps(header).encode()
    path.write_bytes(len(data).to_bytes(8, "little") + data)


def test_a_full_size_header_is_counted_without_reading_a_tensor(tmp_path: Path) -> None:
    """pi0's vocabulary-sized head (257152 x 2048), tied to the embedding the file also holds."""
    write_lerobot(tmp_path, "pi0")
    shapes = {
        f"model.{LM_HEAD}": [257152, 2048],
        f"model.{EMBED}": [257152, 2048],
        "model.state_proj.weight": [1024, 32],
        "model.action_time_mlp_in.weight": [1024, 2048],
    }
    _header_only(tmp_path / "model.safetensors", shapes)
    parameters = 257152 * 2048 + 1024 * 32 + 1024 * 2048  # 528,777,216
    line = next(line for line in describe_pi0_checkpoint(tmp_path) if line.startswith("param"))
    assert line == (
        f"parameters: {parameters:,} (tied token embedding counted once); weights in memory: "
        "FP32 2.12 GB, BF16 1.06 GB"
    )


def test_an_unreadable_directory_is_one_sentence(tmp_path: Path) -> None:
    write_openpi(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 8)
    with pytest.raises(CheckpointError) as caught:
        describe_pi0_checkpoint(tmp_path)
    assert "is not a readable safetensors file" in str(caught.value)
    assert "\n" not in str(caught.value)
