"""The scripted transfer-cube expert: its end-effector plan, the table lookup that serves it,
the codec's episode memory, and its checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policies.base import RobotContext
from policies.cube_expert.checkpoint import build_expert
from policies.cube_expert.codec import EPISODE, CubeExpertCodec
from policies.cube_expert.config import CubeExpertConfig
from policies.cube_expert.waypoints import (
    MEET,
    RIGHT_START,
    axis_angle,
    quat_multiply,
    transfer_plan,
)
from policies.tensor_policy import EagerPolicy, TensorPolicy

JOINTS = tuple(f"j{i}" for i in range(14))


def test_the_right_gripper_comes_down_open_around_the_cube_then_closes() -> None:
    cube = np.array([0.1, 0.45, 0.05])
    plan = transfer_plan(cube)
    _, start = plan.pose_at(0)
    _, down = plan.pose_at(130)
    _, closed = plan.pose_at(170)
    np.testing.assert_allclose(start[:3], RIGHT_START)
    np.testing.assert_allclose(down[:3], cube + [0, 0, -0.015])
    assert down[7] == 1.0 and closed[7] == 0.0
    # tilted 60 degrees about y, as the paper's script grips
    np.testing.assert_allclose(down[3:7], [np.cos(np.pi / 6), 0, -np.sin(np.pi / 6), 0])


def test_the_cube_goes_straight_up_then_waits_at_the_meeting_point_for_the_left_gripper() -> None:
    cube = np.array([0.1, 0.5, 0.05])
    plan = transfer_plan(cube)
    np.testing.assert_allclose(plan.pose_at(190)[1][:3], cube + [0, 0, 0.08])
    for t in (260, 290, 310):
        np.testing.assert_allclose(plan.pose_at(t)[1][:3], MEET)
    assert plan.pose_at(260)[0][7] == 1.0 and plan.pose_at(310)[0][7] == 0.0  # left closes
    np.testing.assert_allclose(plan.pose_at(310)[0][:3], MEET + [0.02, 0, -0.02])
    assert plan.pose_at(260)[1][7] == 0.0 and plan.pose_at(310)[1][7] == 1.0  # right lets go


def test_quaternions_compose_as_rotations() -> None:
    quarter = axis_angle((0.0, 0.0, 1.0), 90.0)
    np.testing.assert_allclose(
        quat_multiply(quarter, quarter), axis_angle((0, 0, 1), 180), atol=1e-12
    )


def _expert(chunk: int = 1) -> TensorPolicy:
    # trajectory value = 10 * cube x + cube y + step / 1000, linear in x and y: bilinear
    # interpolation between grid points reproduces it exactly
    config = CubeExpertConfig(
        x_range=(0.0, 0.2), y_range=(0.4, 0.6), nx=3, ny=5, steps=50, chunk_size=chunk
    )
    xs, ys = np.linspace(0.0, 0.2, 3), np.linspace(0.4, 0.6, 5)
    steps = np.arange(50) / 1000
    value = 10 * xs[:, None, None] + ys[None, :, None] + steps[None, None, :]
    table = np.repeat(value[..., None], 14, axis=-1)
    return build_expert(table, config, JOINTS)


def _state(x: float, y: float) -> np.ndarray:
    state = np.zeros((1, 21), np.float32)
    state[0, 14:16] = (x, y)
    return state


def test_the_expert_interpolates_at_the_cube_and_follows_the_control_step() -> None:
    policy = EagerPolicy(_expert(chunk=4))
    first = policy.predict(
        {}, RobotContext(step=1000, episode_start=True, state_history=_state(0.07, 0.53))
    )
    np.testing.assert_allclose(first.actions[:, 0], 0.7 + 0.53 + np.arange(4) / 1000, atol=1e-5)
    # later the cube has moved (it is in a gripper): the episode's starting position still rules
    memory = first.memory
    assert memory is not None
    later = policy.predict(
        {},
        RobotContext(step=1010, episode_start=False, state_history=_state(0.2, 0.6), memory=memory),
    )
    np.testing.assert_allclose(
        later.actions[:, 3], 0.7 + 0.53 + np.arange(10, 14) / 1000, atol=1e-5
    )


def test_past_the_trajectory_the_last_target_is_held() -> None:
    policy = EagerPolicy(_expert(chunk=3))
    memory = {EPISODE: np.array([0, 0, 0.0, 0.4], np.float32)}
    out = policy.predict(
        {},
        RobotContext(step=49, episode_start=False, state_history=_state(0.1, 0.5), memory=memory),
    )
    np.testing.assert_allclose(out.actions[:, 0], 0.4 + 0.049, atol=1e-6)


def test_the_episode_start_is_kept_exactly_at_large_step_numbers() -> None:
    expert = _expert()
    codec = expert.inputs
    assert isinstance(codec, CubeExpertCodec)
    out = [np.zeros(i.shape, np.float32) for i in codec.inputs]
    codec.encode(
        RobotContext(step=123_456_789, episode_start=True, state_history=_state(0.1, 0.5)), out
    )
    memory = {EPISODE: out[1].copy()}
    codec.encode(
        RobotContext(
            step=123_456_800, episode_start=False, state_history=_state(0, 0), memory=memory
        ),
        out,
    )
    assert out[2][0] == 11


def test_the_expert_survives_its_checkpoint(tmp_path: Path) -> None:
    from policies.checkpoints.load import load_checkpoint
    from policies.checkpoints.tempo_format import save_checkpoint

    expert = _expert(chunk=2)
    save_checkpoint(tmp_path / "expert", expert)
    loaded = EagerPolicy(load_checkpoint(tmp_path / "expert"))
    context = RobotContext(step=3, episode_start=True, state_history=_state(0.13, 0.41))
    want = EagerPolicy(expert).predict({}, context).actions
    np.testing.assert_array_equal(loaded.predict({}, context).actions, want)


def test_a_config_without_room_for_the_cube_is_refused() -> None:
    with pytest.raises(ValueError, match="cube's x and y"):
        CubeExpertConfig(x_range=(0, 1), y_range=(0, 1), nx=2, ny=2, steps=5, state_size=15)
