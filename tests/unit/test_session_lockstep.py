"""A lockstep robot's world waits for each action (a simulator its driver steps, as LeRobot's
eval loop does): its chunks play from the tick they land on, first row first, however many
ticks inference took. Any other robot's chunk plays from its observation's step, the steps
already past dropped."""

from __future__ import annotations

import numpy as np
import pytest

from controller.config import load_config
from controller.daemon.service import pipeline_factory
from controller.daemon.session import Session
from controller.feed.inference_feed import Chunk
from policies.base import CameraSpec, PolicySpec

SPEC = PolicySpec(
    cameras=(CameraSpec(name="front", height=8, width=8),),
    state_size=2,
    joint_names=("a", "b"),
    chunk_size=6,
)
ROWS = np.arange(12, dtype=np.float32).reshape(6, 2)  # row i is (2i, 2i + 1)


def session(lockstep: bool) -> Session:
    # The newest chunk plays (LeRobot's n_action_steps 1 without temporal ensembling).
    config = load_config(None, ["inference.ensemble=newest"])
    pipeline = pipeline_factory(SPEC, config)({})
    return Session("s", b"r", "r", SPEC, 0, pipeline, lockstep=lockstep)


def command_after(s: Session, observed: int, landed: int) -> np.ndarray:
    """The command at step `landed` for a chunk planned from an observation of step
    `observed` that came back then."""
    now = 1_000_000
    images = {"front": np.zeros((8, 8, 3), np.uint8)}
    state = np.zeros(2, np.float32)
    s.take_observation(1, now, now, observed, images, state, None, episode_start=True,
                       resume=False)  # fmt: skip
    request = s.request_if_due(observed, 1)
    assert request is not None
    s.queues.chunks.append(Chunk(observed, ROWS, request.obs_seq, 0, 0, s.episode))
    s.land_chunks(landed)
    s.update(landed, now)
    assert s.hold_reason is None
    return np.asarray(s.pipeline.command)


@pytest.mark.parametrize("delay", [0, 1, 3])
def test_a_lockstep_chunk_begins_with_its_first_row_however_late_it_lands(delay: int) -> None:
    np.testing.assert_array_equal(command_after(session(True), 4, 4 + delay), ROWS[0])


@pytest.mark.parametrize("delay", [1, 3])
def test_a_robot_in_real_time_skips_the_rows_whose_steps_passed(delay: int) -> None:
    s = session(False)
    np.testing.assert_array_equal(command_after(s, 4, 4 + delay), ROWS[delay])
    assert s.counters["late_steps_dropped"] == delay


@pytest.mark.parametrize("lockstep", [True, False])
def test_a_first_row_sent_too_late_is_sent_at_the_next_tick_in_lockstep(lockstep: bool) -> None:
    """A loaded daemon's tick past its deadline holds instead of sending: the lockstep world
    still waits for that chunk's first row, a robot in real time moves on to the second."""
    s = session(lockstep)
    command_after(s, 4, 5)
    s.action_too_late()
    s.land_chunks(6)
    s.update(6, 1_000_000)
    assert s.hold_reason is None
    np.testing.assert_array_equal(s.pipeline.command, ROWS[0] if lockstep else ROWS[2])
