"""`tempo config show` with policy.path set prints the cameras and joints the checkpoint fixes
(from its config.json, no torch), marked as the checkpoint's, in comments that keep the YAML
loadable; an openpi checkpoint (which records neither) adds nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from controller.config import load_config
from controller.tools.config_show import show_config


def _tempo_checkpoint(directory: Path) -> Path:
    directory.mkdir()
    spec = {"cameras": [{"name": "wrist", "height": 96, "width": 128},
                        {"name": "top", "height": 96, "width": 128}],
            "state_size": 2, "joint_names": ["shoulder", "elbow"], "chunk_size": 4}  # fmt: skip
    (directory / "config.json").write_text(json.dumps({"format": "tempo", "spec": spec}))
    return directory


def _lerobot_dir(directory: Path) -> Path:
    directory.mkdir()
    features = {
        "observation.images.left": {"type": "VISUAL", "shape": [3, 240, 320]},
        "observation.state": {"type": "STATE", "shape": [14]},
    }
    config = {"type": "act", "input_features": features,
              "output_features": {"action": {"type": "ACTION", "shape": [14]}}}  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_the_checkpoints_cameras_and_joints_are_shown_as_its_own(tmp_path: Path) -> None:
    path = _tempo_checkpoint(tmp_path / "ckpt")
    text = show_config(load_config(None, [f"policy.path={path}"]))
    shown = text[text.index(f"# policy default: from the checkpoint {path}") :]
    assert "#   cameras: wrist 96x128, top 96x128\n" in shown
    assert "#   joints: shoulder, elbow\n" in shown
    assert "served instead of robot.cameras" in shown
    reloaded = tmp_path / "shown.yaml"  # still a config that loads
    reloaded.write_text(text)
    assert load_config(reloaded).policy.path == path


def test_a_lerobot_dir_shows_its_cameras_and_action_size(tmp_path: Path) -> None:
    path = _lerobot_dir(tmp_path / "lerobot")
    text = show_config(load_config(None, [f"policy.path={path}"]))
    assert "#   cameras: left 240x320\n" in text
    assert "#   joints: 14 (named by policy.joint_names)\n" in text


def test_no_checkpoint_or_an_openpi_one_adds_nothing(tmp_path: Path) -> None:
    assert "from the checkpoint" not in show_config(load_config(None, []))
    openpi = tmp_path / "openpi"
    openpi.mkdir()
    fields = {"action_dim": 32, "action_horizon": 50, "paligemma_variant": "gemma_2b",
              "action_expert_variant": "gemma_300m", "precision": "bfloat16"}  # fmt: skip
    (openpi / "config.json").write_text(json.dumps(fields))
    assert "from the checkpoint" not in show_config(load_config(None, [f"policy.path={openpi}"]))


def test_config_show_reads_the_checkpoint_without_torch(tmp_path: Path) -> None:
    path = _tempo_checkpoint(tmp_path / "ckpt")
    code = (
        "import sys; from controller.cli import main; "
        f"rc = main(['config', 'show', '--set', 'policy.path={path}']); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "#   joints: shoulder, elbow" in run.stdout
