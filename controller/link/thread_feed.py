"""The thread feed: one thread that runs the policy on each session's newest observation.

For a policy in the daemon's own process. The control loop never waits for it. The policy gets
the observation and the robot's context (the session built it when it submitted the request);
what becomes of the answer is `InferenceOutcomes`. The loop drops the chunk steps that have
already passed, so slow inference shortens the useful chunk instead of shifting the robot in
time, and drops a chunk of an episode that has ended. A policy in its own process is fed by the
loop itself instead (`remote_feed`).
"""

from __future__ import annotations

import collections
import logging
import threading

from controller.link.inference_feed import InferenceOutcomes, InferenceRequest, RobotQueues
from controller.observe.telemetry import Telemetry
from policies.base import Policy

log = logging.getLogger(__name__)


class ThreadFeed(InferenceOutcomes):
    def __init__(self, policy: Policy, telemetry: Telemetry | None = None) -> None:
        super().__init__(telemetry)
        self.policy = policy
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

    def _next_session(self) -> RobotQueues | None:
        with self._wake:
            while not self._ready and not self._stop:
                self._wake.wait()
            if self._stop:
                return None
            return self._ready.popleft()

    def _run(self) -> None:
        while True:
            session = self._next_session()
            if session is None:
                return
            request = session.requests.take()
            if request is None or session.closed:
                continue  # already served by an earlier wake-up, or the robot left
            try:
                self._infer(session, request)
            except Exception:  # a bug of ours: this thread must outlive it, or every robot holds
                self.failures += 1
                log.exception("the inference thread failed on robot %s; continuing", session.robot)
            # Dropped now, not at the next wake-up: frames written in place hold their slot in
            # the driver's ring for as long as the request lives.
            del request

    def _infer(self, session: RobotQueues, request: InferenceRequest) -> None:
        started = self.began(request)
        try:
            prediction = self.policy.predict(request.images, request.context)
        except Exception as exc:  # noqa: BLE001 - any failure: keep serving from existing chunks
            self.failed(session, request, exc)
            return
        self.finished(session, request, prediction, started)
