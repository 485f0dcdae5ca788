"""A robot's session when its policy's process restarts or is switched (a hot standby's
take-over, a swap): the observation it had not yet asked about may predate the fault, so it is
never asked about; one received after is."""

from __future__ import annotations

import numpy as np

from controller.config import TempoConfig
from controller.daemon.service import pipeline_factory
from controller.daemon.session import Session
from controller.inference.build import build_policy


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


def test_an_observation_pending_at_a_switch_is_never_asked_about() -> None:
    config = TempoConfig()
    spec = build_policy(config.policy, config.robot, config.runner).spec
    session = Session("s1", b"id", "arm", spec, 0, pipeline_factory(spec, config)({}))
    _observe(session, 1, 10, spec.state_size)
    session.drop_plan_for_restart()  # the tick that saw the switch
    assert session.request_if_due(11, 1) is None  # from before the switch: dropped
    _observe(session, 2, 12, spec.state_size)
    request = session.request_if_due(12, 1)
    assert request is not None and request.context.step == 12  # from after it: asked about
