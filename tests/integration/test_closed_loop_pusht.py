"""The closed loop on the CPU: PushT driven through the daemon by its driver, under a hand-built
policy that sees the T block in camera `image` and sends the agent to it (pusht_servo.py). The
task here is reaching the block: the agent gets there only when frames reach the camera right
way round and actions reach the right joints. The same run wired wrong (actions swapped, frames
transposed) must miss it, so the check cannot pass by accident. Seeds 2 and 7 put the block far
from the diagonal, where a swap or a transpose moves the target by more than 100 units."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import ipc_config, running_daemon

pytest.importorskip("gym_pusht")

from controller.errors import ConfigError  # noqa: E402
from controller.sim.env_driver import connect_env_client  # noqa: E402
from controller.sim.envs import make_env  # noqa: E402
from controller.sim.episode_loop import run_episode  # noqa: E402
from controller.sim.first_answers import FirstAnswers  # noqa: E402
from tests.integration.pusht_servo import served_block_servo  # noqa: E402

SEEDS = (2, 7)
STEPS = 40
REACHED = 30.0  # world units (the arena is 512): touching the block
MISSED = 60.0
WIRINGS = {
    "right": {},
    "actions to the wrong joints": {"action_order": (1, 0)},
    "frames to the camera transposed": {"transpose_frames": True},
}


def closest_approaches(bind: str, clock: str, seeds=SEEDS, **wiring) -> list[float]:
    """Per seed, how close the agent came to the block's pivot over one episode."""
    env = make_env("pusht", **wiring)
    answers = FirstAnswers() if clock == "lockstep" else None
    client = connect_env_client(
        bind,
        env.layout,
        frames_in_place=False,
        clock=clock,
        on_command=None if answers is None else answers.on_command,
    )
    approaches = []
    try:
        for seed in seeds:
            distances: list[float] = []

            def on_step(observation, action, env=env, distances=distances):
                block = env.gym_env.unwrapped.block.position
                distances.append(float(np.hypot(*(np.array(block) - observation.state))))

            result = run_episode(
                client, env, seed, clock, max_steps=STEPS, on_step=on_step, answers=answers
            )
            assert result.length == STEPS
            if clock == "lockstep":
                assert result.actions_applied == STEPS
            approaches.append(min(distances))
    finally:
        client.close()
        env.close()
    return approaches


@pytest.mark.parametrize("wiring", list(WIRINGS))
def test_pusht_lockstep_reaches_the_block_only_when_wired_right(tmp_path, wiring):
    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, served_block_servo()):
        approaches = closest_approaches(config.server.bind, "lockstep", **WIRINGS[wiring])
    if wiring == "right":
        assert all(d < REACHED for d in approaches), approaches
    else:
        assert all(d > MISSED for d in approaches), approaches


def test_pusht_realtime_at_its_frame_rate_reaches_the_block(tmp_path):
    # Realtime: the world moves on while the policy infers; the daemon ticks at PushT's 10 Hz.
    config = ipc_config(tmp_path, "control.rate_hz=10")
    with running_daemon(config, served_block_servo()):
        approaches = closest_approaches(config.server.bind, "realtime", seeds=SEEDS[:1])
    assert approaches[0] < REACHED, approaches


def test_realtime_against_a_daemon_at_another_rate_is_one_sentence(tmp_path):
    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, served_block_servo()):
        with pytest.raises(ConfigError) as caught:
            connect_env_client(
                config.server.bind,
                make_env("pusht").layout,
                frames_in_place=False,
                clock="realtime",
            )
    assert str(caught.value) == (
        "env pusht runs at 10 frames a second but the daemon ticks at 50 Hz; the realtime clock "
        "needs both equal: serve with --set control.rate_hz=10, or use --clock lockstep"
    )


def test_tempo_sim_robot_env_pusht_reports_each_episode(tmp_path, capsys):
    from controller import cli

    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, served_block_servo()):
        args = ["sim-robot", "--env", "pusht", "--connect", config.server.bind, "--json-lines"]
        assert cli.main([*args, "--episodes", "2", "--seed", "7", "--max-steps", "5"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["env"], line["seed"], line["clock"]) for line in lines] == [
        ("pusht", 7, "lockstep"),
        ("pusht", 8, "lockstep"),
    ]
    assert all(line["length"] == 5 and line["actions_applied"] == 5 for line in lines)


def test_tempo_eval_summarises_seeded_episodes(tmp_path, capsys):
    from controller import cli

    config = ipc_config(tmp_path, "control.rate_hz=50")
    summary_path = tmp_path / "eval.json"
    with running_daemon(config, served_block_servo()):
        args = ["eval", "--env", "pusht", "--connect", config.server.bind, "--episodes", "2"]
        args += ["--seed", "2", "--max-steps", "6", "--json", str(summary_path)]
        assert cli.main([*args, "--video", "3", "--video-dir", str(tmp_path / "videos")]) == 0
    summary = json.loads(summary_path.read_text())
    assert [e["seed"] for e in summary["per_episode"]] == [2, 3]
    assert summary["episodes"] == 2 and summary["length_mean"] == 6.0
    low, high = summary["success_interval_95"]
    assert 0.0 <= low <= summary["success_rate"] <= high <= 1.0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "episode 1 of 2 (seed 2) running"
    assert out[1].startswith("episode 1 of 2: pusht seed 2 (lockstep): ")
    assert out[2] == "episode 2 of 2 (seed 3) running"
    assert out[3].startswith("episode 2 of 2: pusht seed 3 (lockstep): ")
    # The rollout of seed 3 only: one frame a step, at LeRobot's visualization size.
    assert [p.name for p in (tmp_path / "videos").iterdir()] == ["pusht-seed3.mp4"]
    av = pytest.importorskip("av")
    with av.open(str(tmp_path / "videos" / "pusht-seed3.mp4")) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(frames) == 6 and frames[0].shape == (384, 384, 3)
    assert out[-1].startswith(f"pusht (lockstep): success {summary['successes']}/2 = ")


def test_tempo_eval_json_dash_prints_the_summary_and_puts_progress_on_stderr(tmp_path, capsys):
    from controller import cli

    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, served_block_servo()):
        args = ["eval", "--env", "pusht", "--connect", config.server.bind, "--max-steps", "3"]
        assert cli.main([*args, "--json", "-"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # the whole of stdout is the JSON document
    assert summary["episodes"] == 1 and summary["per_episode"][0]["length"] == 3
    progress = captured.err.splitlines()
    assert progress[0] == "episode 1 of 1 (seed 0) running"
    assert progress[1].startswith("episode 1 of 1: pusht seed 0 (lockstep): ")
