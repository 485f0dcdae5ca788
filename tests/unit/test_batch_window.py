"""When robots' requests are batched (controller.feed.batch_window), on a made-up clock, and the
thread feed gathering every robot waiting into one `predict_batch` call."""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from controller.feed.batch_window import BatchWindow, Waiting, step_times_of
from controller.feed.in_process_feed import InProcessFeed
from controller.feed.inference_feed import InferenceQueues, InferenceRequest
from policies.base import Prediction, RobotContext, first_context
from policies.tiny.policy import tiny_spec

MS = 1_000_000  # ns
STEPS = {1: 0.002, 2: 0.003, 4: 0.005}  # measured step time per bucket, seconds


def window(window_us: int, sizes: tuple[int, ...] = (1, 2, 4)) -> BatchWindow:
    return BatchWindow(window_us, sizes, lambda: STEPS)


def test_without_a_window_what_is_waiting_goes_at_once() -> None:
    assert window(0).wait_ns([Waiting(0, 20 * MS)], now_ns=0) == 0
    assert window(0).wait_ns([Waiting(0, None), Waiting(0, None)], now_ns=0) == 0


def test_a_window_waits_for_more_robots_at_most_its_length() -> None:
    w = window(4000)  # 4 ms
    slow = 100 * MS  # 10 Hz: plenty of time
    assert w.wait_ns([Waiting(10 * MS, slow)], now_ns=11 * MS) == 3 * MS
    # The window counts from the earliest waiting request, not from the newest.
    assert w.wait_ns([Waiting(10 * MS, slow), Waiting(13 * MS, slow)], now_ns=13 * MS) == 1 * MS
    assert w.wait_ns([Waiting(10 * MS, slow)], now_ns=14 * MS) == 0
    assert w.wait_ns([Waiting(10 * MS, slow)], now_ns=50 * MS) == 0  # never negative


def test_a_full_batch_goes_at_once() -> None:
    waiting = [Waiting(0, 100 * MS)] * 4
    assert window(4000).wait_ns(waiting, now_ns=0) == 0


def test_the_wait_never_makes_a_robot_late() -> None:
    w = window(50_000)  # 50 ms window
    # Due 20 ms after it came; with one more robot the batch needs bucket 2 (3 ms): leave by 17.
    assert w.wait_ns([Waiting(0, 20 * MS)], now_ns=0) == 17 * MS
    # Two waiting: a third needs bucket 4 (5 ms).
    assert w.wait_ns([Waiting(0, 20 * MS), Waiting(0, 20 * MS)], now_ns=10 * MS) == 5 * MS
    assert w.wait_ns([Waiting(0, 20 * MS)], now_ns=18 * MS) == 0  # already past: go


def test_a_fast_robot_is_never_held_back_for_a_slow_one() -> None:
    w = window(50_000)
    fast, slow = 5 * MS, 100 * MS  # 200 Hz and 10 Hz robots, query period 1
    # The slow robot alone may wait the whole window; with the fast one waiting, the batch
    # leaves in time for the fast one's deadline (5 ms - 3 ms for bucket 2).
    assert w.wait_ns([Waiting(0, slow)], now_ns=0) == 50 * MS
    assert w.wait_ns([Waiting(0, slow), Waiting(1 * MS, fast)], now_ns=1 * MS) == 0 * MS
    assert w.wait_ns([Waiting(0, slow), Waiting(10 * MS, fast)], now_ns=10 * MS) == 0
    # The fast one's deadline, minus bucket 4's step for a third robot: leave at 14 - 5 = 9.
    assert w.wait_ns([Waiting(0, slow), Waiting(9 * MS, 5 * MS)], now_ns=9 * MS) == 0
    assert w.wait_ns([Waiting(0, slow), Waiting(4 * MS, 10 * MS)], now_ns=4 * MS) == 5 * MS


def test_unknown_step_times_take_the_next_known_bucket() -> None:
    w = BatchWindow(50_000, (1, 2, 4, 8), lambda: {1: 0.001, 4: 0.004})
    assert w.step_ns(2) == 4 * MS  # bucket 2 not measured: bucket 4's time
    assert w.step_ns(7) == 4 * MS  # bucket 8 not measured: the largest known
    assert BatchWindow(1000, (1, 2)).step_ns(2) == 0


def test_step_times_from_a_runner_status() -> None:
    status = {
        "tier": "compiled",
        "tiers": [{"name": "graph", "step_s": 0.001}, {"name": "compiled", "step_s": 0.002}],
        "buckets": [
            {"size": 2, "step_ms": {"compiled": 3.0, "graph": 1.5}},
            {"size": 4, "step_ms": {"graph": 2.0}},  # compiled dropped from bucket 4
        ],
    }
    assert step_times_of(status) == {1: 0.002, 2: 0.003}
    assert step_times_of({}) == {}


# -- the thread feed -------------------------------------------------------------------------

SPEC = tiny_spec()


class RecordingPolicy:
    """Answers each robot with its own state; records the batches it was asked."""

    spec = SPEC

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.done = threading.Event()

    def _answer(self, context: RobotContext) -> Prediction:
        actions = np.full((SPEC.chunk_size, SPEC.action_dim), context.state[0], np.float32)
        return Prediction(actions)

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        self.batches.append(1)
        self.done.set()
        return self._answer(context)

    def predict_batch(
        self, items: Sequence[tuple[Mapping[str, np.ndarray], RobotContext]]
    ) -> list[Prediction | Exception]:
        self.batches.append(len(items))
        self.done.set()
        return [self._answer(context) for _, context in items]


def robot(name: str) -> InferenceQueues:
    return InferenceQueues(robot=name, spec=SPEC, counters=collections.Counter())


def request(value: float) -> InferenceRequest:
    context = first_context(SPEC, np.full(SPEC.state_size, value, np.float32))
    return InferenceRequest(obs_seq=1, received_ns=0, episode=0, images={}, context=context)


def test_the_in_process_feed_serves_every_waiting_robot_in_one_batch() -> None:
    policy = RecordingPolicy()
    feed = InProcessFeed(policy, window=window(0))
    robots = [robot(f"r{k}") for k in range(3)]
    for k, queues in enumerate(robots):  # all waiting before the thread starts
        feed.submit(queues, request(float(k)))
    feed.submit(robots[0], request(7.0))  # newest wins: robot 0 once, with 7
    feed.start()
    assert policy.done.wait(5)
    feed.stop(timeout=2)
    assert policy.batches == [3]
    assert [q.chunks[0].actions[0, 0] for q in robots] == [7.0, 1.0, 2.0]
    assert feed.inferences == 3


def test_without_batching_the_in_process_feed_serves_one_robot_a_step() -> None:
    policy = RecordingPolicy()
    feed = InProcessFeed(policy)  # no window: batch 1
    robots = [robot(f"r{k}") for k in range(3)]
    for k, queues in enumerate(robots):
        feed.submit(queues, request(float(k)))
    feed.start()
    for _ in range(100):
        if feed.inferences == 3:
            break
        threading.Event().wait(0.05)
    feed.stop(timeout=2)
    assert policy.batches == [1, 1, 1]
