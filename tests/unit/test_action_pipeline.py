"""ActionPipeline: one robot's chunks -> ensembler -> teleop -> guards, and the plan it tells the
policy about."""

from __future__ import annotations

import numpy as np

from controller.action.guards import Verdict
from controller.action.guards_config import GuardsConfig
from controller.action.pipeline import ActionPipeline
from controller.action.teleop import TeleopConfig
from policies.base import PolicySpec

SPEC = PolicySpec(cameras=(), state_size=2, joint_names=("a", "b"), chunk_size=4)
MS = 1_000_000


def pipeline(**guards: object) -> ActionPipeline:
    return ActionPipeline(
        SPEC, GuardsConfig.model_validate(guards), TeleopConfig(), 100.0, ensemble="newest"
    )


def chunk(start: float) -> np.ndarray:
    return np.array([[start + i, -(start + i)] for i in range(4)], np.float32)


def test_no_observation_yet_is_a_hold_and_a_chunk_then_an_action():
    p = pipeline()
    p.on_observation(np.zeros(2, np.float32), None, 1_000 * MS)
    assert p.step(0, 1_000 * MS) is not Verdict.ACTION  # no chunk covers step 0
    p.on_chunk(0, chunk(0.0), 0)
    assert p.step(1, 1_001 * MS) is Verdict.ACTION
    np.testing.assert_array_equal(p.command, [1.0, -1.0])


def test_the_plan_is_the_newest_chunks_rows_from_the_step_on():
    p = pipeline()
    assert p.plan(0) is None
    p.on_chunk(10, chunk(0.0), 10)
    p.on_chunk(12, chunk(100.0), 12)
    p.on_chunk(11, chunk(50.0), 12)  # older than the plan: merged, not the plan
    plan = p.plan(13)
    assert plan is not None and plan.start_step == 13
    np.testing.assert_array_equal(plan.actions, chunk(100.0)[1:])
    plan.actions[:] = 0  # a copy: the policy may keep or change it
    assert p.plan(13).actions[0, 0] == 101.0
    assert p.plan(16) is None  # every row executed


def test_a_late_chunk_is_counted_and_never_becomes_the_plan():
    p = pipeline()
    assert p.on_chunk(0, chunk(0.0), 10) == 4
    assert p.plan(10) is None


def test_coming_back_from_a_watchdog_hold_drops_the_plan():
    p = pipeline(hold_after_ms=50, stop_after_ms=100)
    p.on_observation(np.zeros(2, np.float32), None, 0)
    p.on_chunk(0, chunk(0.0), 0)
    assert p.step(0, 1 * MS) is Verdict.ACTION
    p.delivered()
    assert p.step(1, 80 * MS) is not Verdict.ACTION  # observation too old: hold
    assert p.on_observation(np.zeros(2, np.float32), None, 81 * MS)  # dropped
    assert p.plan(2) is None and p.last_command is None


def test_an_undelivered_command_does_not_move_the_rate_limiter():
    p = pipeline(max_velocity=10.0)  # 0.1 per tick at 100 Hz
    p.on_observation(np.zeros(2, np.float32), None, 0)
    p.on_chunk(0, np.full((4, 2), 5.0, np.float32), 0)
    assert p.step(0, 0) is Verdict.ACTION
    p.delivered()
    np.testing.assert_allclose(p.command, [0.1, 0.1])
    assert p.step(1, 0) is Verdict.ACTION
    p.not_delivered()  # the robot never saw 0.2
    assert p.step(2, 0) is Verdict.ACTION
    np.testing.assert_allclose(p.command, [0.2, 0.2])
