"""The inference feed for a policy in its own process, run by the control loop's own thread.

    feed = RemoteFeed(policy, telemetry)         # policy: a started RemotePolicy
    feed.submit(session, request)                # from the loop: queued, newest wins per robot
    with feed.polled() as channel: ...           # polled beside the robots' socket when idle
    feed.service(until_ns)                       # take the reply, send the next request

Why no thread: in the control process a second Python thread competes with the loop for the
GIL, and a tick that comes while that thread runs Python waits for it. The reply to a request
(decoding the chunk, checking it) and the copy of a remote driver's frames into the inference
slot are Python work on every observation; here they run in the loop's idle time between
ticks, so nothing else in the process wants the GIL when a tick is due.

One request is in flight at a time (the inference process serves one at a time anyway); robots
wait their turn in order of arrival, each with only its newest observation. What becomes of a
reply is `InferenceOutcomes`, as for the thread feed. While the process is down or restarting,
requests fail at once (the loop holds every robot meanwhile), and a request in flight when the
process went down is given up on.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from controller.link.inference_feed import InferenceOutcomes, InferenceRequest, RobotQueues
from controller.link.process_channel import ProcessChannel
from controller.link.process_messages import ChunkReply
from controller.link.request_channel import (
    InferenceUnavailable,
    ProcessStuck,
    RequestChannel,
    StepReply,
)
from controller.observe.telemetry import PROCESS_STEP, Telemetry
from policies.base import Prediction


@dataclass
class InFlight:
    session: RobotQueues
    request: InferenceRequest
    request_id: int
    started_ns: int
    give_up_ns: int  # past it the process is taken for hung (the supervisor should be first)
    channel: RequestChannel  # of the process it was sent to


class SupervisedProcess(Protocol):
    """What the feed needs of the policy's process (RemotePolicy is one)."""

    @property
    def serving(self) -> bool: ...

    def requests(self) -> contextlib.AbstractContextManager[RequestChannel | None]: ...

    def prediction(self, reply: StepReply) -> Prediction: ...

    def hang_timeout(self) -> float: ...

    def report_hang(self, detail: str) -> None: ...


class RemoteFeed(InferenceOutcomes):
    def __init__(self, policy: SupervisedProcess, telemetry: Telemetry | None = None) -> None:
        super().__init__(telemetry)
        self._t_process_step = (telemetry or Telemetry(enabled=False)).section(PROCESS_STEP)
        self.policy = policy
        self._ready: collections.deque[RobotQueues] = collections.deque()
        self._in_flight: InFlight | None = None
        self._running = False

    @property
    def side_channel(self) -> RemoteFeed:
        """The control loop's receiving thread polls the channel and services it (see above)."""
        return self

    def submit(self, session: RobotQueues, request: InferenceRequest) -> None:
        """Called from the loop thread: sent at the next `service`; newest observation wins."""
        session.requests.put(request)
        self._ready.append(session)

    def start(self) -> None:
        self._running = True

    @property
    def alive(self) -> bool:
        return self._running

    def stop(self, timeout: float = 0.5) -> None:
        self._running = False
        self._in_flight = None  # frames written in place hold their driver slot until dropped
        self._ready.clear()

    @contextlib.contextmanager
    def polled(self) -> Iterator[ProcessChannel | None]:
        """The channel a reply comes on, held (no restart closes it meanwhile), or None when no
        reply is awaited (or the process has gone: its closed end would wake every poll)."""
        if self._in_flight is None:
            yield None
            return
        with self.policy.requests() as channel:
            yield channel.link if channel is not None and not channel.link.closed else None

    def service(self, until_ns: int) -> None:
        """Take the reply if it has come, then send the next request unless `until_ns` has
        passed (a remote driver's frames are copied here: a few hundred microseconds)."""
        if not self._running or (self._in_flight is None and not self._ready):
            return
        try:
            self._service(until_ns)
        except Exception as exc:  # noqa: BLE001 - a bug of ours, or a malformed message: the
            # control loop runs this and must outlive it; the request in flight is given up.
            self.failures += 1
            flight, self._in_flight = self._in_flight, None
            if flight is not None:
                flight.session.counters["inference_failures"] += 1
            self._warn(f"the inference channel failed ({type(exc).__name__}: {exc}); the "
                       "request in flight is dropped")  # fmt: skip

    def _service(self, until_ns: int) -> None:
        with self.policy.requests() as channel:
            self._take_reply(channel)
            if channel is None or not self.policy.serving:  # down, or a reply just said fatal
                self._fail_waiting()
                return
            while self._in_flight is None and self._ready and time.monotonic_ns() < until_ns:
                self._send_next(channel)

    def _take_reply(self, channel: RequestChannel | None) -> None:
        flight = self._in_flight
        if flight is None:
            return
        if channel is not flight.channel:  # the process went down (and maybe a new one serves)
            self._in_flight = None
            stopped = InferenceUnavailable("the inference process stopped during this step")
            self.failed(flight.session, flight.request, stopped)
            return
        while (reply := channel.receive()) is not None:
            if reply.id != flight.request_id:
                continue  # an answer to a request that was given up on
            self._in_flight = None
            if isinstance(reply, ChunkReply):
                self._t_process_step.record_ns(reply.step_ns)
            try:
                prediction = self.policy.prediction(reply)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and told
                self.failed(flight.session, flight.request, exc)
                return
            if not flight.session.closed:
                self.finished(flight.session, flight.request, prediction, flight.started_ns)
            return
        if time.monotonic_ns() > flight.give_up_ns:
            # The supervisor's heartbeat check should have ended it first; never wait forever.
            waited_s = (time.monotonic_ns() - flight.started_ns) / 1e9
            self.policy.report_hang(f"no answer to a step within {waited_s:.0f} s")

    def _send_next(self, channel: RequestChannel) -> None:
        session = self._ready.popleft()
        request = session.requests.take()
        if request is None or session.closed:
            return  # already sent on an earlier turn, or the robot left
        started = self.began(request)
        try:
            request_id = channel.send(request.images, request.context)
        except Exception as exc:  # noqa: BLE001 - e.g. a frame of the wrong shape for the slot
            self.failed(session, request, exc)
            if isinstance(exc, ProcessStuck):
                self.policy.report_hang(str(exc))
            return
        give_up = started + int((self.policy.hang_timeout() + 1.0) * 1e9)
        self._in_flight = InFlight(session, request, request_id, started, give_up, channel)

    def _fail_waiting(self) -> None:
        """The process is down: every waiting request fails now, as a policy that is down does."""
        down = InferenceUnavailable("the inference process is restarting; robots are held")
        while self._ready:
            session = self._ready.popleft()
            request = session.requests.take()
            if request is not None and not session.closed:
                self.failed(session, request, down)
