"""Tempo's Diffusion Policy against LeRobot's own outputs and its refusals of bad input.

tests/data/diffusion_lerobot_tiny/ is what LeRobot 0.6.1's DiffusionPolicy.save_pretrained and
its processor pipelines wrote for a tiny DDPM policy with random weights (no camera: an
environment state of 5, 2 observation steps, 25 of 50 steps), plus `reference.safetensors`:
the inputs and the chunk LeRobot's predict_action_chunk returned with Tempo's fixed noise
bank as its noise, written by scripts/parity/check_diffusion_parity.py. Here Tempo must
reproduce it without LeRobot.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from controller.errors import CheckpointError
from policies.checkpoints.load import load_checkpoint

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "diffusion_lerobot_tiny"
TOLERANCE = 1e-4  # relative to the chunk's largest value; measured 0 on a CPU


def _chunk(module: torch.nn.Module, x: dict[str, torch.Tensor]) -> torch.Tensor:
    frames, states = x["frames"], x["states"]
    with torch.no_grad():
        actions = module(frames[:, -1], states, torch.ones(states.shape[0], 1))
    return actions[:, : x["lerobot_actions"].shape[1]]


def test_tempo_reproduces_lerobots_saved_chunk() -> None:
    torch.set_num_threads(1)
    policy = load_checkpoint(REFERENCE)
    x = load_file(str(REFERENCE / "reference.safetensors"))
    assert torch.equal(policy.module.noise_bank, x["noise"])  # the noise LeRobot was given
    expected = x["lerobot_actions"]
    error = float((_chunk(policy.module, x) - expected).abs().max() / expected.abs().max())
    assert error <= TOLERANCE, f"relative error {error:.2e} against LeRobot's chunk"


def test_the_reference_fails_on_a_changed_weight() -> None:
    policy = load_checkpoint(REFERENCE)
    x = load_file(str(REFERENCE / "reference.safetensors"))
    with torch.no_grad():
        policy.module.unet.final_conv[1].bias.add_(0.05)
    expected = x["lerobot_actions"]
    error = float((_chunk(policy.module, x) - expected).abs().max() / expected.abs().max())
    assert error > TOLERANCE


def test_spec_follows_lerobots_config() -> None:
    spec = load_checkpoint(REFERENCE).spec
    assert spec.state_history == 2 and spec.chunk_size == 15  # horizon 16 - 2 + 1
    assert spec.execution is not None and spec.execution.query_period == 8
    assert spec.cameras == () and spec.state_size == 4 + 5


def _copy(tmp_path: Path, **changes: object) -> Path:
    directory = tmp_path / "ckpt"
    shutil.copytree(REFERENCE, directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_a_scheduler_tempo_does_not_serve_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="noise_scheduler_type 'DPMSolver'"):
        load_checkpoint(_copy(tmp_path, noise_scheduler_type="DPMSolver"))


def test_another_familys_lerobot_checkpoint_is_refused(tmp_path: Path) -> None:
    from policies.diffusion.lerobot import read_lerobot_diffusion

    with pytest.raises(CheckpointError, match="LeRobot 'act' policy, not a Diffusion Policy"):
        read_lerobot_diffusion(_copy(tmp_path, type="act"))


def test_a_missing_normalizer_file_is_refused(tmp_path: Path) -> None:
    directory = _copy(tmp_path)
    next(directory.glob("policy_preprocessor_step_*_normalizer_processor.safetensors")).unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        load_checkpoint(directory)
