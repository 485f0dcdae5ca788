"""The inference delay a session hands its policy: a high percentile of recent chunks' delays."""

from __future__ import annotations

import numpy as np

from controller.config import TempoConfig
from controller.daemon.estimates import DELAY_WINDOW
from controller.daemon.service import pipeline_factory
from controller.daemon.session import Session
from controller.feed.inference_feed import Chunk
from policies.base import CameraSpec, PolicySpec

SPEC = PolicySpec(
    cameras=(CameraSpec(name="front", height=8, width=8),),
    state_size=2,
    joint_names=("a", "b"),
    chunk_size=10,
)


def session() -> Session:
    return Session("s", b"r", "r", SPEC, 0, pipeline_factory(SPEC, TempoConfig())({}))


def land(s: Session, start: int, delay: int) -> None:
    """A chunk planned for step `start` comes back from the feed `delay` steps later."""
    s.queues.chunks.append(Chunk(start, np.zeros((10, 2), np.float32), 0, 0, 0, s.episode))
    s.land_chunks(start + delay)
    assert not s.queues.chunks and s.counters["chunks_of_ended_episode"] == 0


def test_one_slow_inference_does_not_set_the_delay() -> None:
    s = session()
    assert s.inference_delay == 0
    land(s, 0, 2)
    assert s.inference_delay == 2  # the first chunk is all there is (no zeros from the start)
    for i in range(1, 20):
        land(s, 10 * i, 9 if i == 5 else 2)
    assert s.inference_delay == 2  # a maximum would say 9


def test_a_slower_regime_raises_it_and_a_window_later_it_is_forgotten() -> None:
    s = session()
    for i in range(DELAY_WINDOW):
        land(s, 10 * i, 2 if i % 4 else 4)  # every fourth chunk is slow: more than 10%
    assert s.inference_delay == 4
    for i in range(DELAY_WINDOW, 2 * DELAY_WINDOW):
        land(s, 10 * i, 1)
    assert s.inference_delay == 1
    s.start_episode()
    assert s.inference_delay == 0


def test_the_delay_after_an_episode_start_is_the_new_episodes_alone() -> None:
    """After `clear` the window refills from its start: the zeros of the cleared slots are
    not read as measured delays (they held the estimate at 0 for up to a window of chunks)."""
    from controller.daemon.estimates import InferenceDelay

    delay = InferenceDelay()
    for _ in range(5):
        delay.record(3)
    delay.clear()
    for _ in range(5):
        delay.record(7)
    assert delay.steps == 7
