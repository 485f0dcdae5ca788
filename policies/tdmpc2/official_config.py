"""The official TD-MPC2 config file (its repository's tdmpc2/config.yaml, or a run's copy) read
into the settings `tempo checkpoint import-tdmpc2 --config FILE` imports with, derived as the
official code derives them:

    iterations   the file's, plus 2 when action_dim >= 20 (the official agent adds them)
    discount     clip((L/denom - 1) / (L/denom), discount_min, discount_max) for an episode of
                 L = episode_length agent steps (set per task at run time: "???" in the file)
    mode         prior when `mpc: false` (the official agent then acts on its prior)

Keys of the official file that do not change serving (training, logging, paths) are read and
ignored; a key the official file does not have, or a value outside what the planner accepts, is
refused with one sentence. "???" (Hydra's "set at run time") counts as absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller.bounded_file import MAX_CONFIG_BYTES, read_text
from controller.bounded_yaml import load_yaml
from controller.errors import ConfigError

# Keys passed on to TDMPC2Config as they are.
PLANNER_KEYS = (
    "horizon",
    "num_samples",
    "num_elites",
    "num_pi_trajs",
    "min_std",
    "max_std",
    "temperature",
    "num_bins",
    "vmin",
    "vmax",
    "simnorm_dim",
)
# Read by the derivations below.
DERIVED_KEYS = (
    "iterations",
    "mpc",
    "model_size",
    "episode_length",
    "discount_denom",
    "discount_min",
    "discount_max",
    "action_dim",
    "obs_shape",
)
# Official keys that do not change how a trained agent is served.
IGNORED_KEYS = frozenset(
    """defaults task obs episodic checkpoint eval_episodes eval_freq steps batch_size reward_coef
    value_coef termination_coef consistency_coef rho lr enc_lr_scale grad_clip_norm tau
    buffer_size exp_name data_dir log_std_min log_std_max entropy_coef num_enc_layers enc_dim
    num_channels mlp_dim latent_dim task_dim num_q dropout wandb_project wandb_entity
    wandb_silent enable_wandb save_csv compile save_video save_agent seed work_dir task_title
    multitask tasks obs_shapes action_dims episode_lengths seed_steps bin_size""".split()
)
UNSET = "???"


def read_official_config(path: Path) -> dict[str, Any]:
    """The file's keys, "???" and null dropped; refuses an unreadable file or unknown keys."""
    text = read_text(path, MAX_CONFIG_BYTES, ConfigError, "the TD-MPC2 config")
    data = load_yaml(text, f"--config {path}", ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected the official TD-MPC2 config (a mapping)")
    unknown = sorted(
        str(k) for k in data if k not in IGNORED_KEYS and k not in (*PLANNER_KEYS, *DERIVED_KEYS)
    )
    if unknown:
        raise ConfigError(
            f"--config {path}: {', '.join(unknown)} is not a key of the official TD-MPC2 "
            "config (tdmpc2/config.yaml)"
        )
    if data.get("multitask") is True or data.get("obs") not in (None, UNSET, "state"):
        raise ConfigError(
            f"--config {path}: Tempo serves single-task TD-MPC2 agents on state observations "
            f"(the file has multitask: {data.get('multitask')}, obs: {data.get('obs')})"
        )
    return {k: v for k, v in data.items() if v is not None and v != UNSET}


def _number(config: Mapping[str, Any], key: str, default: float, path: Path) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"--config {path}: {key} is {value!r}; expected a number")
    return float(value)


def official_discount(
    episode_length: int, denom: float = 5.0, low: float = 0.95, high: float = 0.995
) -> float:
    """The official code's discount for an episode of `episode_length` agent steps:
    clip((L/denom - 1) / (L/denom), low, high)."""
    if episode_length < 1:
        raise ConfigError(f"episode length {episode_length}: expected a positive step count")
    frac = episode_length / denom
    return min(max((frac - 1) / frac, low), high)


def settings_from_config(
    config: Mapping[str, Any], action_dim: int, episode_length: int | None, path: Path
) -> dict[str, Any]:
    """Planner settings (TDMPC2Config fields) from a read official config, for an agent with
    `action_dim` actions; `episode_length` (the --episode-length flag) wins over the file's."""
    settings = {k: config[k] for k in PLANNER_KEYS if k in config}
    if "iterations" in config:
        iterations = config["iterations"]
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise ConfigError(f"--config {path}: iterations is {iterations!r}; expected a count")
        settings["iterations"] = iterations + 2 * int(action_dim >= 20)
    if config.get("mpc") is False:
        settings["mode"] = "prior"
    if "model_size" in config:
        settings["model_size"] = config["model_size"]
    length = episode_length if episode_length is not None else config.get("episode_length")
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, int):
            raise ConfigError(f"--config {path}: episode_length is {length!r}; expected a count")
        if _number(config, "discount_denom", 5.0, path) <= 0:
            raise ConfigError(f"--config {path}: discount_denom must be positive")
        settings["discount"] = official_discount(
            length,
            _number(config, "discount_denom", 5.0, path),
            _number(config, "discount_min", 0.95, path),
            _number(config, "discount_max", 0.995, path),
        )
    return settings
