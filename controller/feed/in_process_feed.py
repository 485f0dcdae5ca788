"""The thread feed: one thread that runs the policy on each session's newest observation.

For a policy in the daemon's own process. The control loop never waits for it. The policy gets
the observation and the robot's context (the session built it when it submitted the request);
what becomes of the answer is `InferenceOutcomes`. The loop drops the chunk steps that have
already passed, so slow inference shortens the useful chunk instead of shifting the robot in
time, and drops a chunk of an episode that has ended. A policy in its own process is fed by the
loop itself instead (`remote_feed`).

A policy that serves several robots in one step (`predict_batch`: the runner with batch sizes
above 1) gets every robot waiting at once, up to its largest batch, gathered as its
`BatchWindow` says (controller.feed.batch_window).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np

from controller.feed.batch_window import BatchWindow, Waiting, waiting_sessions
from controller.feed.inference_feed import InferenceOutcomes, InferenceRequest, RobotQueues
from controller.observe.telemetry import Telemetry
from policies.base import Policy, Prediction, RobotContext

log = logging.getLogger(__name__)


class BatchPolicy(Policy, Protocol):
    def predict_batch(
        self, items: Sequence[tuple[Mapping[str, np.ndarray], RobotContext]]
    ) -> list[Prediction | Exception]: ...


class InProcessFeed(InferenceOutcomes):
    def __init__(
        self,
        policy: Policy,
        telemetry: Telemetry | None = None,
        window: BatchWindow | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        """window: how robots are batched (None: one robot a step); clock_ns: the time the
        window is reckoned in (time.monotonic_ns, the requests' received_ns clock)."""
        super().__init__(telemetry)
        self.policy = policy
        self._window = window or BatchWindow(0, (1,))
        self._clock_ns = clock_ns
        self._batched = self._window.largest > 1 and hasattr(policy, "predict_batch")
        self._ready: collections.deque[RobotQueues] = collections.deque()
        self._wake = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    side_channel = None  # the feed thread waits for requests itself

    def submit(self, session: RobotQueues, request: InferenceRequest) -> None:
        """Called from the loop thread: newest observation wins."""
        session.requests.put(request)
        with self._wake:
            self._ready.append(session)
            self._wake.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tempo-inference", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the feed's thread is running (it must outlive any policy failure)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 0.5) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _next_batch(self) -> list[RobotQueues] | None:
        """The robots to serve next (one, or with batching every robot waiting, up to the
        largest batch, once the window says go); None when stopping."""
        with self._wake:
            while not self._ready and not self._stop:
                self._wake.wait()
            if self._stop:
                return None
            if not self._batched:
                return [self._ready.popleft()]
            while True:
                sessions = self._waiting_sessions()
                waiting = [
                    Waiting(request.received_ns, request.budget_ns)
                    for session in sessions
                    if (request := session.requests.peek()) is not None
                ]
                wait_ns = self._window.wait_ns(waiting, self._clock_ns())
                if wait_ns <= 0 or self._stop:
                    break
                self._wake.wait(wait_ns / 1e9)  # a submit wakes it early
            # Left waiting: robots past the largest batch (entries of the chosen, of robots
            # that left or whose request was taken already are dropped).
            chosen = {id(s) for s in sessions}
            self._ready = collections.deque(
                s
                for s in self._ready
                if id(s) not in chosen and not s.closed and s.requests.peek() is not None
            )
            return sessions

    def _waiting_sessions(self) -> list[RobotQueues]:
        """Distinct robots with a request waiting, in order of arrival, up to the largest
        batch (the deque holds a robot once per submit; its mailbox only the newest)."""
        return waiting_sessions(self._ready, self._window.largest)

    def _run(self) -> None:
        while True:
            sessions = self._next_batch()
            if sessions is None:
                return
            taken = [(s, s.requests.take()) for s in sessions]
            # None: already served by an earlier wake-up; closed: the robot left.
            batch = [(s, r) for s, r in taken if r is not None and not s.closed]
            try:
                if len(batch) > 1:
                    self._infer_batch(batch)
                elif batch:
                    self._infer(*batch[0])
            except Exception:  # a bug of ours: this thread must outlive it, or every robot holds
                self.failures += 1
                robots = ", ".join(s.robot for s, _ in batch)
                log.exception("the inference thread failed on robot(s) %s; continuing", robots)
            # Dropped now, not at the next wake-up: frames written in place hold their slot in
            # the driver's ring for as long as the request lives.
            del taken, batch

    def _infer(self, session: RobotQueues, request: InferenceRequest) -> None:
        started = self.began(request)
        try:
            prediction = self.policy.predict(request.images, request.context)
        except Exception as exc:  # noqa: BLE001 - any failure: keep serving from existing chunks
            self.failed(session, request, exc)
            return
        self.finished(session, request, prediction, started)

    def _infer_batch(self, batch: list[tuple[RobotQueues, InferenceRequest]]) -> None:
        """Several robots in one call of the policy's `predict_batch`."""
        policy: BatchPolicy = self.policy  # type: ignore[assignment]  # _batched checked it
        started = [self.began(request) for _, request in batch]
        try:
            results = policy.predict_batch([(r.images, r.context) for _, r in batch])
        except Exception as exc:  # noqa: BLE001 - any failure: every robot of the batch
            results = [exc] * len(batch)
        for (session, request), result, began in zip(batch, results, started, strict=True):
            if isinstance(result, Exception):
                self.failed(session, request, result)
            else:
                self.finished(session, request, result, began)
