"""ALOHA transfer-cube observed as state (env aloha-transfer-cube-state) and `tempo eval
--plot`: what the environment gives, and each refusal in one sentence."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from controller.cli import main
from controller.errors import ConfigError
from controller.sim.envs import make_env
from controller.sim.envs.aloha_state import TRANSFER_CUBE_STATE


def test_the_state_variant_says_it_has_no_camera_and_21_state_values():
    assert TRANSFER_CUBE_STATE.describe() == (
        "env aloha-transfer-cube-state gives no camera and a state of 21 values (state), and "
        "takes 14 action values"
    )


def test_the_state_variant_without_gym_aloha_names_the_sim_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gym_aloha", None)
    with pytest.raises(ConfigError, match=r"needs gym-aloha, which is not installed"):
        make_env("aloha-transfer-cube-state")


def test_the_state_is_the_joints_then_the_cube_where_gym_aloha_puts_it():
    pytest.importorskip("gym_aloha")
    from gym_aloha.utils import sample_box_pose

    env = make_env("aloha-transfer-cube-state")
    try:
        observation = env.reset(seed=7)
        assert observation.images == {} and observation.state.shape == (21,)
        np.testing.assert_allclose(observation.state[14:], sample_box_pose(7), atol=1e-6)
        step = env.step(observation.state[:14])  # hold still: nothing touched
        assert step.reward == 0 and not step.success and not step.done
    finally:
        env.close()


def test_eval_plot_without_matplotlib_is_one_sentence_before_any_episode(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    args = ["eval", "--env", "pusht", "--connect", "ipc:///nowhere/tempo", "--plot", "x.png"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "tempo eval --plot needs matplotlib, which is not installed: "
        "pip install 'tempo-controller[plot]'"
    )
    assert "\n" not in err


def test_eval_plot_draws_the_episodes(tmp_path):
    pytest.importorskip("matplotlib")
    from controller.sim.eval_plot import write_eval_plot
    from controller.sim.eval_summary import eval_summary

    episodes = [
        {
            "seed": s,
            "success": s % 2 == 0,
            "return": float(s),
            "length": 10,
            "holds": s,
            "missed_ticks": 0,
            "latency_ms_p50": 5.0,
            "latency_ms_p99": None,
        }  # fmt: skip
        for s in range(4)
    ]
    path = tmp_path / "plots" / "eval.png"
    write_eval_plot(eval_summary("pusht", "realtime", episodes), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
