"""What becomes of a policy's answer: a usable chunk reaches the robot's queue; anything else
(not a Prediction, the wrong shape, not finite) is dropped and counted, never queued."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from controller.feed.inference_feed import InferenceOutcomes, InferenceQueues, InferenceRequest
from policies.base import Prediction, RobotContext
from policies.tiny import tiny_spec

SPEC = tiny_spec()


def request() -> InferenceRequest:
    state = np.zeros((SPEC.state_history, SPEC.state_size), dtype=np.float32)
    return InferenceRequest(
        7, 0, 0, {}, RobotContext(step=3, episode_start=False, state_history=state)
    )


def answered(prediction: object) -> tuple[InferenceQueues, InferenceOutcomes]:
    queues = InferenceQueues("arm", SPEC, collections.Counter())
    outcomes = InferenceOutcomes()
    outcomes.finished(queues, request(), prediction, outcomes.began(request()))  # type: ignore[arg-type]
    return queues, outcomes


def test_a_usable_prediction_becomes_the_robots_chunk() -> None:
    actions = np.ones((SPEC.chunk_size, SPEC.action_dim), dtype=np.float32)
    queues, outcomes = answered(Prediction(actions))
    (chunk,) = queues.chunks
    assert chunk.start_step == 3 and chunk.obs_seq == 7
    np.testing.assert_array_equal(chunk.actions, actions)
    assert outcomes.non_finite == 0


@pytest.mark.parametrize(
    "prediction",
    [
        np.ones((SPEC.chunk_size, SPEC.action_dim), dtype=np.float32),  # a bare array
        None,
        Prediction(np.ones((SPEC.chunk_size + 1, SPEC.action_dim), dtype=np.float32)),
        Prediction(np.full((SPEC.chunk_size, SPEC.action_dim), np.nan, dtype=np.float32)),
        Prediction(np.ones((SPEC.chunk_size, SPEC.action_dim), np.float32), memory={"m": 1}),  # type: ignore[dict-item]
    ],
    ids=["array", "none", "shape", "nan", "memory"],
)
def test_anything_else_is_dropped_and_counted(prediction: object) -> None:
    queues, outcomes = answered(prediction)
    assert not queues.chunks
    assert outcomes.non_finite == 1 and queues.counters["chunks_rejected"] == 1
