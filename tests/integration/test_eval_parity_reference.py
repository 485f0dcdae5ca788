"""Tempo in lockstep against LeRobot's own eval loop, without LeRobot: each case under
tests/data/eval_parity/ holds a checkpoint LeRobot 0.6.1 saved (random weights, n_action_steps
1) and the first actions and states `lerobot.scripts.lerobot_eval.rollout` produced with it for
three seeds (scripts/parity/check_eval_parity.py --save-reference wrote them). Here the same
directory is served by a daemon and the environment driven through it by Tempo's lockstep
driver: every action must equal LeRobot's to FP32 tolerance, and so every state.

Diffusion Policy is served with policy.diffusion.noise: fixed, the noise LeRobot was given.
gym-pusht is in CI; gym-aloha is not, and its cases skip without it."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ipc_config, running_daemon

DATA = Path(__file__).resolve().parents[1] / "data" / "eval_parity"
CASES = sorted(p.name for p in DATA.iterdir()) if DATA.exists() else []
PACKAGES = {"pusht": "gym_pusht", "aloha-transfer-cube": "gym_aloha"}
TOLERANCE = 1e-5  # relative to the step's largest action (FP32)


def lerobot_reference(case: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(DATA / case / "lerobot_rollout.safetensors"))


def tempo_lockstep(case: str, tmp_path: Path, seeds: list[int], steps: int, **wiring):
    """Per seed, the states seen and actions applied by Tempo's lockstep driver."""
    from controller.sim.env_driver import connect_env_client
    from controller.sim.envs import make_env
    from controller.sim.envs.catalog import layout_of
    from controller.sim.episode_loop import run_episode
    from controller.sim.first_answers import FirstAnswers

    env_name, family = case.rsplit("_", 1)
    with tarfile.open(DATA / case / "checkpoint.tar.xz") as archive:
        archive.extractall(tmp_path, filter="data")
    overrides = [
        "policy.kind=checkpoint",
        f"policy.path={tmp_path / 'checkpoint'}",
        f"policy.joint_names=[{','.join(layout_of(env_name).joints)}]",
        "runner.top_tier=eager_fp32",
        "control.rate_hz=20",
        "guards.hold_after_ms=60000",  # ALOHA renders for about a second a step on a CPU
        "guards.stop_after_ms=120000",
        "server.session_timeout_s=600",  # lockstep sends nothing while the policy infers
    ]
    if family == "diffusion":
        overrides.append("policy.diffusion.noise=fixed")
    config = ipc_config(tmp_path, *overrides)
    runs = {}
    with running_daemon(config):
        env = make_env(env_name, **wiring)
        answers = FirstAnswers()
        client = connect_env_client(
            config.server.bind, env.layout, frames_in_place=False, on_command=answers.on_command
        )
        try:
            for seed in seeds:
                states: list[np.ndarray] = []
                actions: list[np.ndarray] = []

                def on_step(observation, action, states=states, actions=actions):
                    states.append(observation.state.copy())
                    actions.append(action.copy())

                run_episode(client, env, seed, "lockstep", max_steps=steps, on_step=on_step,
                            answers=answers)  # fmt: skip
                runs[seed] = (np.stack(states), np.stack(actions))
        finally:
            client.close()
            env.close()
    return runs


def relative(ours: np.ndarray, theirs: np.ndarray) -> float:
    scale = np.abs(theirs).max(axis=-1, keepdims=True)
    return float((np.abs(ours - theirs) / scale).max())


@pytest.mark.parametrize("case", CASES)
def test_lockstep_actions_equal_lerobot_eval_loop(case: str, tmp_path: Path) -> None:
    pytest.importorskip(PACKAGES[case.rsplit("_", 1)[0]])
    reference = lerobot_reference(case)
    seeds = sorted({int(key.split(".")[0][4:]) for key in reference})
    steps = len(reference[f"seed{seeds[0]}.action"])
    runs = tempo_lockstep(case, tmp_path, seeds, steps)
    for seed in seeds:
        states, actions = runs[seed]
        theirs = reference[f"seed{seed}.action"]
        assert relative(states, reference[f"seed{seed}.state"]) <= TOLERANCE, seed
        assert relative(actions, theirs) <= TOLERANCE, (seed, actions, theirs)


@pytest.mark.skipif("pusht_act" not in CASES, reason="no pusht_act reference")
def test_the_reference_sees_the_frames(tmp_path: Path) -> None:
    """The comparison is not blind to the camera: transposed frames (the same shape on PushT)
    change the first action well past the tolerance."""
    pytest.importorskip("gym_pusht")
    reference = lerobot_reference("pusht_act")
    runs = tempo_lockstep("pusht_act", tmp_path, [0], 1, transpose_frames=True)
    assert relative(runs[0][1], reference["seed0.action"][:1]) > 100 * TOLERANCE
