"""The closed loop on the CPU: PushT driven through the daemon by its driver, under a hand-built
policy that sees the T block in camera `image` and sends the agent to it (pusht_servo.py). The
agent reaches the block only when frames reach the camera right way round and actions reach the
right joints; the same run wired wrong (actions swapped, frames transposed) must miss it, so the
check cannot pass by accident. Seeds 2 and 7 put the block far from the diagonal, where a swap
or a transpose moves the target by more than 100 units."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import ipc_config, running_daemon

pytest.importorskip("gym_pusht")

from controller.sim.env_driver import connect_env_client  # noqa: E402
from controller.sim.envs import make_env  # noqa: E402
from controller.sim.episode_loop import run_episode  # noqa: E402
from tests.integration.pusht_servo import served_block_servo  # noqa: E402

SEEDS = (2, 7)
STEPS = 40
REACHED = 30.0  # world units (the arena is 512): touching the block
MISSED = 60.0


def closest_approaches(bind: str, **wiring) -> list[float]:
    """Per seed, how close the agent came to the block's pivot over one lockstep episode."""
    env = make_env("pusht", **wiring)
    client = connect_env_client(bind, env.layout, frames_in_place=False)
    approaches = []
    try:
        for seed in SEEDS:
            distances: list[float] = []

            def on_step(observation, action, env=env, distances=distances):
                block = env._env.unwrapped.block.position
                distances.append(float(np.hypot(*(np.array(block) - observation.state))))

            result = run_episode(client, env, seed, "lockstep", max_steps=STEPS, on_step=on_step)
            assert result.length == STEPS and result.actions_applied == STEPS
            approaches.append(min(distances))
    finally:
        client.close()
        env.close()
    return approaches


def test_pusht_closed_loop_reaches_the_block_only_when_wired_right(tmp_path):
    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, served_block_servo()):
        right = closest_approaches(config.server.bind)
        swapped = closest_approaches(config.server.bind, action_order=(1, 0))
        transposed = closest_approaches(config.server.bind, transpose_frames=True)
    assert all(d < REACHED for d in right), right
    assert all(d > MISSED for d in swapped), swapped
    assert all(d > MISSED for d in transposed), transposed
