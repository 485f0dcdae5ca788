"""When a robot's observation is asked about. Requests stay at least a query period apart.
A robot sending once a query period whose observation came just before a request was due is
not asked about it at the tick (it would already be old, and so would each later one, the
request's phase staying ahead of the robot's); its next observation is asked on arrival."""

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


def _serve(arrivals: dict[int, int], steps: int, period: int) -> list[tuple[int, int]]:
    """The daemon's two calls over `steps` control steps: on each arrival (step -> obs_seq)
    and at each tick's write. (request step, obs_seq) of every request."""
    session, size = _session()
    asked = []
    for step in range(steps):
        if step in arrivals:
            seq = arrivals[step]
            session.take_observation(
                seq, driver_time_ns=seq, received_ns=seq, step=step, images={},
                state=np.zeros(size, np.float32), teleop=None, episode_start=False,
                resume=False,
            )  # fmt: skip
            request = session.request_if_due(step, period)
            if request is not None:
                asked.append((step, request.obs_seq))
        request = session.request_if_due(step + 1, period, at_tick=True)  # the next tick
        if request is not None:
            asked.append((step + 1, request.obs_seq))
    return asked


def test_a_robot_at_the_query_rate_out_of_phase_is_asked_on_arrival_from_its_next_one() -> None:
    # Observations at steps 1, 4 (a second one soon after the first, as at a driver's start),
    # then every 10 steps: 14, 24, 34, 44.
    arrivals = {1: 1, 4: 2, 14: 3, 24: 4, 34: 5, 44: 6}
    asked = _serve(arrivals, 50, 10)
    # 1 on arrival; 2 at the tick 10 steps later (it came 3 steps after the one before);
    # 3 came 3 steps after that request and 10 after its own previous: not asked old at step
    # 21; 4, 5 and 6 asked as they arrive.
    assert asked == [(1, 1), (11, 2), (24, 4), (34, 5), (44, 6)]


def test_requests_stay_a_query_period_apart_for_a_robot_faster_than_the_query_rate() -> None:
    arrivals = {step: step + 1 for step in range(0, 60, 6)}  # every 6 steps, period 10
    asked = _serve(arrivals, 60, 10)
    gaps = [b[0] - a[0] for a, b in zip(asked, asked[1:], strict=False)]
    assert asked and min(gaps) >= 10, asked


def test_a_robot_sending_every_tick_is_asked_once_a_query_period() -> None:
    arrivals = {step: step + 1 for step in range(30)}
    asked = _serve(arrivals, 30, 5)
    assert [step for step, _ in asked] == [0, 5, 10, 15, 20, 25, 30]
    # Each the newest: of the step before (arrived after that tick, asked at this one's write).
    assert asked[0] == (0, 1) and all(seq == step for step, seq in asked[1:]), asked


def test_a_jittery_robot_at_the_query_rate_is_asked_about_every_observation() -> None:
    # Every 9 or 11 steps around a query period of 10.
    steps = [0, 9, 20, 29, 40, 49, 60, 69, 80]
    arrivals = {step: k + 1 for k, step in enumerate(steps)}
    asked = _serve(arrivals, 90, 10)
    gaps = [b[0] - a[0] for a, b in zip(asked, asked[1:], strict=False)]
    assert min(gaps) >= 10, asked
    # None waits longer than the one step it came early by.
    assert all(step - steps[seq - 1] <= 1 for step, seq in asked), asked
    assert len(asked) >= len(steps) - 1, asked
