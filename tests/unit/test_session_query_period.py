"""When a robot's observation is asked about: a query period of observation steps after the one
last asked about. A robot sending at the query rate just after a due tick is asked about late
once, then from its next observation on at once (it used to stay a tick short of due, each
observation waiting for the next due tick: a query period late, its chunk's steps past)."""

from __future__ import annotations

import numpy as np

from controller.config import TempoConfig
from controller.daemon.service import pipeline_factory
from controller.daemon.session import Session
from controller.inference.build import build_policy


def _session() -> tuple[Session, int]:
    config = TempoConfig()
    spec = build_policy(config.policy, config.robot, config.runner).spec
    return Session("s1", b"id", "arm", spec, 0, pipeline_factory(spec, config)({})), spec.state_size


def _observe(session: Session, seq: int, step: int, state_size: int) -> None:
    session.take_observation(
        seq,
        driver_time_ns=seq * 1_000_000,
        received_ns=seq * 1_000_000,
        step=step,
        images={},
        state=np.zeros(state_size, np.float32),
        teleop=None,
        episode_start=False,
        resume=False,
    )


def test_a_robot_at_the_query_rate_is_asked_at_once_after_one_late_request() -> None:
    session, size = _session()
    _observe(session, 1, 1, size)
    first = session.request_if_due(1, 10)
    assert first is not None and first.obs_seq == 1
    _observe(session, 2, 4, size)  # 3 steps later: not due
    assert session.request_if_due(4, 10) is None
    assert session.request_if_due(10, 10) is None
    late = session.request_if_due(11, 10)  # the tick 10 steps after step 1: asked late, once
    assert late is not None and late.obs_seq == 2
    # From here the robot's observations, 10 steps apart, are asked about as they arrive.
    for seq, step in ((3, 14), (4, 24), (5, 34)):
        _observe(session, seq, step, size)
        request = session.request_if_due(step, 10)
        assert request is not None and request.obs_seq == seq, (seq, step)


def test_a_robot_sending_every_tick_is_asked_once_a_query_period() -> None:
    session, size = _session()
    asked = []
    for step in range(1, 31):
        _observe(session, step, step, size)
        request = session.request_if_due(step, 5)
        if request is not None:
            asked.append(request.obs_seq)
    assert asked == [1, 6, 11, 16, 21, 26]
