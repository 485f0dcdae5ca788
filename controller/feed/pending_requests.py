"""What the daemon hands its inference feed, and what a robot's session keeps for it: the window
of recent states a policy sees (StateHistory), the newest accepted observation waiting for its
query step (PendingObservation), and the asking itself: at most every `query_period` steps, on a
robot's newest observation, with that robot's context as it is then (InferenceRequests).

    requests = InferenceRequests(feed, query_period)   # feed: the policy's (ServedPolicy.feed)
    requests.submit_if_due(session, step)              # from an observation's arrival
    requests.submit_if_due(session, step, at_tick=True)  # from the tick's write

The feed takes requests from a robot's `queues` and hands back chunks and refusals through them
(controller.feed.inference_feed); the session reads those on the loop thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.feed.inference_feed import InferenceFeed, InferenceQueues, InferenceRequest
from controller.record.tick_observer import TickObserver


@dataclass
class PendingObservation:
    """An accepted observation waiting for the query period to come round."""

    step: int  # the control step it belongs to
    since_previous: int  # steps since this robot's previous observation (about 1e18: none)
    obs_seq: int
    received_ns: int
    images: dict[str, np.ndarray]
    state_window: np.ndarray  # (state_history, state_size) float32, this state last
    # The frames of the observations before it, oldest first (controller.daemon.frame_history),
    # for a policy that reads several steps of them; () otherwise.
    past_frames: tuple[Mapping[str, np.ndarray], ...] = ()


class StateHistory:
    """The last K state vectors, oldest first; at episode start the first one fills every slot."""

    def __init__(self, length: int, size: int) -> None:
        self._buffer = np.zeros((length, size), dtype=np.float32)
        self._filled = False

    def push(self, state: np.ndarray) -> np.ndarray:
        """Add the newest state; return a copy of the window (it travels to the inference feed)."""
        if not self._filled:
            self._buffer[:] = state
            self._filled = True
        else:
            self._buffer[:-1] = self._buffer[1:]
            self._buffer[-1] = state
        return self._buffer.copy()

    def clear(self) -> None:
        """A new episode: the next state fills every slot."""
        self._filled = False


class Requester(Protocol):
    """A robot as InferenceRequests sees it (the daemon's Session)."""

    @property
    def queues(self) -> InferenceQueues: ...

    recording: TickObserver  # the flight recorder's handle (NOT_RECORDED: off)

    def request_if_due(
        self, step: int, query_period: int, at_tick: bool = False
    ) -> InferenceRequest | None: ...


class InferenceRequests:
    """Asks the feed about a robot's newest observation, at most every `query_period` steps."""

    def __init__(
        self, feed: InferenceFeed, query_period: int, period_ns: int | None = None
    ) -> None:
        """period_ns: the control period; a request is then due within period_ns x
        query_period of its observation (what batching may wait for, see feed.batch_window)."""
        self.feed = feed
        self.query_period = query_period
        self.budget_ns = period_ns * query_period if period_ns is not None else None

    def submit_if_due(self, session: Requester, step: int, at_tick: bool = False) -> None:
        """With the robot's context as it is now (its plan from the observation's step on).
        at_tick: from the tick's write (an observation that came while none was due), not from
        the observation's arrival."""
        request = session.request_if_due(step, self.query_period, at_tick)
        if request is not None:
            request.budget_ns = self.budget_ns
            self.feed.submit(session.queues, request)
            session.recording.request(request)
