"""`tempo checkpoint inspect` on Diffusion Policy checkpoints (a Tempo one with cameras, the
LeRobot one LeRobot saved), and the bad inputs each refused in one sentence with exit code 2:
a checkpoint of another family, of another format version, without its normalizer file, with
a scheduler type Tempo does not serve."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from policies.diffusion.demo import write_demo_checkpoint

LEROBOT = Path(__file__).resolve().parents[1] / "data" / "diffusion_lerobot_tiny"


def inspect(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", "checkpoint", "inspect", str(directory)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def refused(directory: Path) -> str:
    result = inspect(directory)
    assert result.returncode == 2, (result.stdout, result.stderr)
    message = result.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    return message


def lerobot_copy(tmp_path: Path, **changes: object) -> Path:
    directory = tmp_path / "lerobot"
    shutil.copytree(LEROBOT, directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(changes)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_inspect_shows_a_tempo_diffusion_checkpoint(tmp_path: Path) -> None:
    directory = write_demo_checkpoint(tmp_path / "tiny", scheduler="DDIM", steps=10)
    result = inspect(directory)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for expected in (
        "format: Tempo checkpoint (format_version 1), policy type diffusion",
        "cameras (1): front 96x128",
        "sampler: DDIM 10 of 100 steps, squaredcos_cap_v2 betas, predicts epsilon, clipped to +-1",
        "observation history: the frames of the last 2 observations, kept by the robot's "
        "session (every one it sends)",
        "horizon 16, chunk 15 (from the current step on), LeRobot plays 8",
    ):
        assert expected in lines, (expected, lines)


def test_inspect_shows_the_lerobot_directory() -> None:
    result = inspect(LEROBOT)
    assert result.returncode == 0, result.stderr
    assert "sampler: DDPM 25 of 50 steps, scaled_linear betas, predicts epsilon, no clipping" in (
        result.stdout.splitlines()
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # Read as ACT, as its type says: ACT's reader names the options that are not ACT's.
        ({"type": "act"}, "option(s) Tempo does not know: beta_end, beta_schedule"),
        ({"type": "vqbet"}, "vqbet"),
        ({"noise_scheduler_type": "DPMSolver"}, "noise_scheduler_type 'DPMSolver' is not one"),
        ({"num_inference_steps": 60}, "num_inference_steps (60) cannot exceed"),
        ({"a_later_lerobot_option": 1}, "option(s) Tempo does not know: a_later_lerobot_option"),
    ],
)
def test_bad_lerobot_directories_are_one_sentence(tmp_path: Path, change, expected) -> None:
    assert expected in refused(lerobot_copy(tmp_path, **change))


def test_a_missing_normalizer_file_is_one_sentence(tmp_path: Path) -> None:
    directory = lerobot_copy(tmp_path)
    next(directory.glob("policy_preprocessor_step_*_normalizer_processor.safetensors")).unlink()
    assert "is missing" in refused(directory)


def test_a_tempo_checkpoint_of_another_version_is_one_sentence(tmp_path: Path) -> None:
    directory = write_demo_checkpoint(tmp_path / "tiny", scheduler="DDIM", steps=10)
    config = json.loads((directory / "config.json").read_text())
    config["format_version"] = 99
    (directory / "config.json").write_text(json.dumps(config))
    assert "has format_version 99; this Tempo reads version 1" in refused(directory)
