"""`tempo checkpoint import-tdmpc2 --config config.yaml`: the official config file's planner
settings and discount, derived as the official code derives them; flags override; unknown keys
and invalid values are refused in one sentence (policies.tdmpc2.official_config)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from controller.cli import main
from controller.errors import ConfigError
from policies.checkpoints.load import load_checkpoint
from policies.tdmpc2.family import add_import_arguments, planner_settings
from policies.tdmpc2.planner import TDMPC2Policy
from tests.unit.test_tdmpc2_checkpoint import official_state
from tests.unit.test_tdmpc2_planner import small_config

# As the official tdmpc2/config.yaml has them (a few of its other keys too); action_dim and
# episode_length are "???": set per task at run time.
OFFICIAL = """\
defaults:
    - override hydra/launcher: submitit_local
task: dog-run
obs: state
episodic: false
steps: 10_000_000
lr: 3e-4
discount_denom: 5
discount_min: 0.95
discount_max: 0.995
mpc: true
iterations: 6
num_samples: 512
num_elites: 64
num_pi_trajs: 24
horizon: 3
min_std: 0.05
max_std: 2
temperature: 0.5
model_size: 5
enable_wandb: true
action_dim: ???
episode_length: ???
"""


def parse(tmp_path: Path, yaml_text: str | None, *flags: str, action_dim: int = 38):
    parser = argparse.ArgumentParser()
    add_import_arguments(parser)
    config = []
    if yaml_text is not None:
        (tmp_path / "config.yaml").write_text(yaml_text)
        config = ["--config", str(tmp_path / "config.yaml")]
    args = ["a.pt", "dst", "--obs-dim", "223", "--action-dim", str(action_dim), *config, *flags]
    return parser.parse_args(args)


def test_settings_come_from_the_official_file_as_the_official_code_derives_them(tmp_path):
    settings = planner_settings(parse(tmp_path, OFFICIAL, "--episode-length", "500"))
    assert settings["iterations"] == 8  # 6 + 2: action_dim 38 >= 20
    assert settings["discount"] == pytest.approx(0.99)  # 500 steps: (100 - 1) / 100
    assert (settings["horizon"], settings["num_samples"], settings["model_size"]) == (3, 512, 5)
    small = planner_settings(parse(tmp_path, OFFICIAL, "--episode-length", "500", action_dim=6))
    assert small["iterations"] == 6


def test_the_discount_follows_the_files_denominator_and_clip(tmp_path):
    text = OFFICIAL.replace("discount_denom: 5", "discount_denom: 10").replace(
        "episode_length: ???", "episode_length: 500"
    )
    assert planner_settings(parse(tmp_path, text))["discount"] == pytest.approx(0.98)
    text = text.replace("discount_max: 0.995", "discount_max: 0.97")
    assert planner_settings(parse(tmp_path, text))["discount"] == pytest.approx(0.97)


def test_flags_override_the_file(tmp_path):
    text = OFFICIAL.replace("episode_length: ???", "episode_length: 500")
    args = parse(tmp_path, text, "--horizon", "5", "--iterations", "4", "--model-size", "1")
    settings = planner_settings(args)
    assert (settings["horizon"], settings["iterations"], settings["model_size"]) == (5, 4, 1)
    assert planner_settings(parse(tmp_path, text, "--episode-length", "1000"))[
        "discount"
    ] == pytest.approx(0.995)
    assert planner_settings(parse(tmp_path, text, "--discount", "0.9"))["discount"] == 0.9
    no_mpc = text.replace("mpc: true", "mpc: false")
    assert planner_settings(parse(tmp_path, no_mpc))["mode"] == "prior"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("horizon: 3", "horizon: 0"), "horizon 0: Input should be greater than or equal to 1"),
        (("min_std: 0.05", "min_std: 5"), r"min_std \(5.0\) must be at most max_std"),
        (("model_size: 5", "model_size: 7"), "model_size"),
        (("lr: 3e-4", "lr: 3e-4\nhorizen: 4"), "horizen is not a key of the official"),
        (("iterations: 6", "iterations: six"), "iterations is 'six'"),
        (("obs: state", "obs: rgb"), "state observations"),
    ],
)
def test_invalid_or_unknown_values_are_refused_in_one_sentence(tmp_path, change, message):
    text = OFFICIAL.replace(*change).replace("episode_length: ???", "episode_length: 500")
    with pytest.raises(ConfigError, match=message) as refused:
        planner_settings(parse(tmp_path, text))
    assert "\n" not in str(refused.value)


def test_no_episode_length_anywhere_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="episode_length"):
        planner_settings(parse(tmp_path, OFFICIAL))


def test_cli_import_with_the_official_config(tmp_path, capsys):
    original = TDMPC2Policy(small_config(num_samples=512, num_pi_trajs=24, num_elites=64)).eval()
    source = tmp_path / "agent.pt"
    torch.save({"model": official_state(original, "current")}, source)
    text = OFFICIAL.replace("model_size: 5", "model_size: 1").replace("horizon: 3", "horizon: 4")
    (tmp_path / "config.yaml").write_text(
        text.replace("episode_length: ???", "episode_length: 200")
    )
    dst = tmp_path / "tempo"
    args = ["checkpoint", "import-tdmpc2", str(source), str(dst), "--obs-dim", "5"]
    assert main([*args, "--action-dim", "3", "--config", str(tmp_path / "config.yaml")]) == 0
    config = load_checkpoint(dst).module.config
    assert (config.horizon, config.iterations, config.model_size) == (4, 6, 1)
    assert config.discount == pytest.approx(0.975)  # 200 steps: (40 - 1) / 40
