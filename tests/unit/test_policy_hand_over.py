"""When another policy process starts serving a robot (a restart, a hot standby's take-over, a
swap at once), the new policy's first actions are blended in from where the robot is, as a
teleop hand-over is, instead of jumping there."""

from __future__ import annotations

import numpy as np
import pytest

from controller.action.guards import Verdict
from controller.action.guards_config import GuardsConfig
from controller.action.pipeline import ActionPipeline
from controller.action.teleop import TeleopConfig, TeleopMixer
from controller.config import TempoConfig
from controller.daemon.service import pipeline_factory
from controller.daemon.session import Session
from controller.inference.build import build_policy
from policies.base import PolicySpec

MS = 1_000_000
SPEC = PolicySpec(cameras=(), state_size=2, joint_names=("a", "b"), chunk_size=8)


def _pipeline(blend_s: float, state_size: int = 2) -> ActionPipeline:
    spec = SPEC.model_copy(update={"state_size": state_size})
    teleop = TeleopConfig(blend_s=blend_s)  # 4 ticks at 100 Hz for 0.04 s
    return ActionPipeline(spec, GuardsConfig(), teleop, 100.0, ensemble="newest")


def _rows(*row: float) -> np.ndarray:
    return np.tile(np.array(row, np.float32), (8, 1))


def _commands(p: ActionPipeline, first_step: int, ticks: int) -> list[list[float]]:
    sent = []
    for step in range(first_step, first_step + ticks):
        assert p.step(step, step * 10 * MS) is Verdict.ACTION
        sent.append([round(float(v), 4) for v in p.command])
        p.delivered()
    return sent


def _serve_then_switch(p: ActionPipeline, hand_over: bool) -> None:
    """Serving at (0, 0); the process switches; the robot is seen at (1, -1); the new
    process's chunk says (5, 5)."""
    p.on_observation(np.zeros(2, np.float32), None, 0)
    p.on_chunk(0, _rows(0.0, 0.0), 0)
    _commands(p, 0, 2)
    p.drop_plan(hand_over=hand_over)
    p.on_observation(np.array([1.0, -1.0], np.float32), None, 25 * MS)
    p.on_chunk(3, _rows(5.0, 5.0), 3)


def test_a_new_policy_process_is_blended_in_from_where_the_robot_is() -> None:
    p = _pipeline(blend_s=0.04)
    _serve_then_switch(p, hand_over=True)
    # offset (1, -1) - (5, 5) = (-4, -6) fades over 4 ticks: 3/4, 2/4, 1/4, 0 of it
    assert _commands(p, 3, 5) == [[2.0, 0.5], [3.0, 2.0], [4.0, 3.5], [5.0, 5.0], [5.0, 5.0]]


def test_without_a_hand_over_or_a_blend_time_the_new_actions_come_at_once() -> None:
    p = _pipeline(blend_s=0.04)
    _serve_then_switch(p, hand_over=False)  # a new episode, back from a stop
    assert _commands(p, 3, 2) == [[5.0, 5.0], [5.0, 5.0]]
    p = _pipeline(blend_s=0.0)
    _serve_then_switch(p, hand_over=True)
    assert _commands(p, 3, 2) == [[5.0, 5.0], [5.0, 5.0]]


def test_a_state_that_is_not_the_joint_positions_blends_from_the_last_command() -> None:
    p = _pipeline(blend_s=0.04, state_size=3)
    p.on_observation(np.zeros(3, np.float32), None, 0)
    p.on_chunk(0, _rows(1.0, 1.0), 0)
    _commands(p, 0, 2)
    p.drop_plan(hand_over=True)
    p.drop_plan(hand_over=True)  # every tick of a restart: the first one's command is kept
    p.on_observation(np.full(3, 9.0, np.float32), None, 25 * MS)
    p.on_chunk(3, _rows(5.0, 5.0), 3)
    assert _commands(p, 3, 2) == [[2.0, 2.0], [3.0, 3.0]]  # from (1, 1): 3/4, then 2/4 left


def test_the_mixer_blends_only_the_policys_joints() -> None:
    mixer = TeleopMixer(("a", "b"), TeleopConfig(joints=("b",), blend_s=0.04), 100.0)
    out = np.zeros(2)
    mixer.hand_over(np.array([0.0, 50.0]))
    policy, operator = np.array([4.0, 0.0]), np.array([0.0, 7.0])
    assert not mixer.mix(None, operator, None, out)  # no policy action yet: nothing advances
    steps = []
    for _ in range(4):
        assert mixer.mix(policy, operator, None, out)
        steps.append(out.tolist())
    assert steps == [[1.0, 7.0], [2.0, 7.0], [3.0, 7.0], [4.0, 7.0]]
    with pytest.raises(ValueError, match="hand-over start"):
        mixer.hand_over(np.zeros(3))


def test_a_session_switched_to_another_process_hands_over() -> None:
    config = TempoConfig.model_validate({"teleop": {"blend_s": 0.5}})
    spec = build_policy(config.policy, config.robot, config.runner).spec
    session = Session("s1", b"id", "arm", spec, 0, pipeline_factory(spec, config)({}))
    teleop = session.pipeline.teleop
    session.take_observation(1, driver_time_ns=MS, received_ns=MS, step=1, images={},
                             state=np.zeros(spec.state_size, np.float32), teleop=None,
                             episode_start=False, resume=False)  # fmt: skip
    session.drop_plan_for_restart()
    assert teleop.blending  # pending until the new process's first action
