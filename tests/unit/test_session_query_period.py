"""When a robot's observation is asked about. Within an episode, requests stay at least a query
period apart. An observation that came a query period or more after its robot's previous one,
before a request was due, is not asked about at the tick once it is older than the robot's next
is far: asked, each later one would be as old (the requests' phase staying ahead of the
robot's); the next one is asked on arrival instead."""

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


def _serve(arrivals: list[int], steps: int, period: int,
           at_tick: bool = True) -> list[tuple[int, int]]:  # fmt: skip
    """The daemon's two calls over `steps` control steps, as it makes them: an observation
    arriving before tick s is stamped s and asked about if due, then tick s's write asks again.
    `arrivals`: the steps observations are stamped with (obs_seq k + 1 for the k-th).
    at_tick=False: the rule before the tick's write told itself apart. Returns (request step,
    obs_seq) of every request."""
    session, size = _session()
    seq_at = {step: k + 1 for k, step in enumerate(arrivals)}
    asked = []
    for step in range(steps):
        if step in seq_at:
            seq = seq_at[step]
            session.take_observation(
                seq, driver_time_ns=seq, received_ns=seq, step=step, images={},
                state=np.zeros(size, np.float32), teleop=None, episode_start=False,
                resume=False,
            )  # fmt: skip
            request = session.request_if_due(step, period)
            if request is not None:
                asked.append((step, request.obs_seq))
        request = session.request_if_due(step, period, at_tick=at_tick)
        if request is not None:
            asked.append((step, request.obs_seq))
    return asked


def _gaps(asked: list[tuple[int, int]]) -> list[int]:
    return [b[0] - a[0] for a, b in zip(asked, asked[1:], strict=False)]


def _ages(asked: list[tuple[int, int]], arrivals: list[int]) -> list[int]:
    return [step - arrivals[seq - 1] for step, seq in asked]


def test_a_robot_at_the_query_rate_out_of_phase_is_asked_on_arrival_from_its_next_one() -> None:
    # Observations at steps 1, 4 (a second soon after the first, as at a driver's start), then
    # every 10 steps, each arriving 3 steps before a request would be due.
    arrivals = [1, 4, 14, 24, 34, 44]
    asked = _serve(arrivals, 50, 10)
    # 2 is asked 7 steps old at step 11; 3 (arrived at 14) would be 7 old at step 21, its
    # robot's next 3 steps away: skipped; from 4 on, each asked as it arrives.
    assert asked == [(1, 1), (11, 2), (24, 4), (34, 5), (44, 6)]
    # Before: every one asked at the due tick, 7 steps old.
    before = _serve(arrivals, 50, 10, at_tick=False)
    assert before == [(1, 1), (11, 2), (21, 3), (31, 4), (41, 5)]


def test_requests_stay_a_query_period_apart_for_a_robot_faster_than_the_query_rate() -> None:
    arrivals = list(range(0, 300, 6))  # every 6 steps, query period 10
    asked = _serve(arrivals, 300, 10)
    assert min(_gaps(asked)) >= 10, asked
    assert len(asked) == len(_serve(arrivals, 300, 10, at_tick=False))


def test_a_robot_sending_every_tick_is_asked_once_a_query_period_as_it_arrives() -> None:
    asked = _serve(list(range(30)), 30, 5)
    assert asked == [(0, 1), (5, 6), (10, 11), (15, 16), (20, 21), (25, 26)]


def test_jitter_and_camera_rates_lose_no_request_and_no_freshness() -> None:
    rng = np.random.default_rng(7)
    jittery = sorted(set(np.round(np.arange(1, 300) * 10 + rng.normal(0, 1, 299)).astype(int)))
    # A 30 Hz camera against a 50 Hz daemon: every 5/3 steps.
    camera = sorted({int(k * 5 / 3) for k in range(1800)})
    for arrivals, period in ((jittery, 10), (camera, 2)):
        steps = arrivals[-1] + 1
        asked = _serve(arrivals, steps, period)
        before = _serve(arrivals, steps, period, at_tick=False)
        assert min(_gaps(asked)) >= period
        assert len(asked) >= len(before), (len(asked), len(before))
        assert np.mean(_ages(asked, arrivals)) <= np.mean(_ages(before, arrivals))
