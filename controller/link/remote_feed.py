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

One request is in flight at a time, or one batch of them when the policy serves several robots
in one step (execution.batch_sizes): every robot waiting, up to the largest batch, sent back to
back, once its `BatchWindow` says go (controller.feed.batch_window; the window is looked at
whenever the loop services the channel: a batch leaves at the last wake-up before a tick that
would come too late for it). Robots wait their turn in order of arrival, each with only its
newest observation. What becomes of a
reply is `InferenceOutcomes`, as for the thread feed. While the process is down or restarting,
requests fail at once (the loop holds every robot meanwhile), and a request in flight when the
process went down is given up on. A reply is turned into its prediction here
(`prediction_of`): the request channel has told the serving process's record of it as it was
taken (a chunk's status, a fatal reply: `ServingProcess.note_reply`), so nothing goes back.

During a swap at episode starts (`episode_swap`) two processes serve: a robot's request goes to
the new one from its episode start on (`episode_start` in its context: also a robot that has just
connected), else to the one that served it last; a batch goes to one of them. The feed counts
the robots still bound to the old one for the swap (`swap_progress`).
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from controller.feed.batch_window import BatchWindow, Waiting, waiting_sessions
from controller.feed.inference_feed import InferenceOutcomes, InferenceRequest, RobotQueues
from controller.link.incoming import Routes
from controller.link.request_channel import (
    InferenceUnavailable,
    ProcessStuck,
    RequestChannel,
    prediction_of,
)
from controller.observe.telemetry import PROCESS_STEP, Telemetry
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import ChunkReply


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

    def routes(self) -> contextlib.AbstractContextManager[Routes]: ...

    @property
    def swapping(self) -> bool: ...

    def swap_progress(self, channel: RequestChannel, on_new: int, on_old: int) -> None: ...

    def hang_timeout(self) -> float: ...

    def report_hang(self, detail: str) -> None: ...


class RemoteFeed(InferenceOutcomes):
    def __init__(
        self,
        policy: SupervisedProcess,
        telemetry: Telemetry | None = None,
        window: BatchWindow | None = None,
    ) -> None:
        """window: how robots are batched (None: one request at a time)."""
        super().__init__(telemetry)
        self._t_process_step = (telemetry or Telemetry(enabled=False)).section(PROCESS_STEP)
        self.policy = policy
        self._window = window or BatchWindow(0, (1,))
        self._ready: collections.deque[RobotQueues] = collections.deque()
        self._in_flight: dict[int, InFlight] = {}  # by request id: one request, or one batch
        self._live: tuple[RequestChannel, ...] = ()  # the processes' channels, when last seen
        # Each robot's channel of its last request, by id(robot) (the robot is kept with it).
        self._bound: dict[int, tuple[RobotQueues, RequestChannel]] = {}
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
        self._in_flight = {}  # frames written in place hold their driver slot until dropped
        self._ready.clear()

    @contextlib.contextmanager
    def polled(self) -> Iterator[ProcessChannel | None]:
        """The channel a reply comes on, held (no restart closes it meanwhile), or None when no
        reply is awaited (or the process has gone: its closed end would wake every poll)."""
        if not self._in_flight:
            yield None
            return
        channel = next(iter(self._in_flight.values())).channel  # one batch, to one process
        with self.policy.routes() as routes:
            live = channel in routes.live and not channel.link.closed
            yield channel.link if live else None

    def service(self, until_ns: int) -> None:
        """Take the reply if it has come, then send the next request unless `until_ns` has
        passed (a remote driver's frames are copied here: a few hundred microseconds)."""
        if not self._running:
            return
        if not self._in_flight and not self._ready and not self.policy.swapping:
            return
        try:
            self._service(until_ns)
        except Exception as exc:  # noqa: BLE001 - a bug of ours, or a malformed message: the
            # control loop runs this and must outlive it; the request in flight is given up.
            self.failures += 1
            flights, self._in_flight = self._in_flight, {}
            for flight in flights.values():
                flight.session.counters["inference_failures"] += 1
            self._warn(f"the inference channel failed ({type(exc).__name__}: {exc}); the "
                       "request in flight is dropped")  # fmt: skip

    def _service(self, until_ns: int) -> None:
        with self.policy.routes() as routes:
            self._take_reply(routes)
            # Down, a reply just said fatal, or another process serves now (a hot standby took
            # over; not a swap's new process becoming the serving one): what waits was observed
            # before it, and gets no action from it.
            channel = routes.serving
            replaced = bool(self._live) and channel not in self._live
            self._live = routes.live
            if channel is None or not self.policy.serving or replaced:
                self._fail_waiting()
                return
            if routes.incoming is not None:
                self._count_robots(routes.incoming)
            while not self._in_flight and self._ready and time.monotonic_ns() < until_ns:
                if not self._send_next(channel, routes.incoming, until_ns):
                    return  # the window says wait: the next wake-up looks again

    def _take_reply(self, routes: Routes) -> None:
        flights = self._in_flight
        if not flights:
            return
        channel = next(iter(flights.values())).channel
        if channel not in routes.live:
            # The process went down (and maybe a new one serves).
            self._in_flight = {}
            stopped = InferenceUnavailable("the inference process stopped during this step")
            for flight in flights.values():
                self.failed(flight.session, flight.request, stopped)
            return
        while flights and (reply := channel.receive()) is not None:
            if reply.id not in flights:
                continue  # an answer to a request that was given up on
            flight = flights.pop(reply.id)
            if isinstance(reply, ChunkReply):
                self._t_process_step.record_ns(reply.step_ns)
            try:  # the channel has told the policy of the reply (status, a fatal one)
                prediction = prediction_of(reply)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and told
                self.failed(flight.session, flight.request, exc)
                continue
            if not flight.session.closed:
                self.finished(
                    flight.session,
                    flight.request,
                    prediction,
                    flight.started_ns,
                    checkpoint=channel.checkpoint,
                )
        # A swap's new process that hangs is the supervisor's to abort (episode_swap): the
        # serving one is not to blame.
        if channel is routes.incoming:
            return
        if flights and time.monotonic_ns() > min(f.give_up_ns for f in flights.values()):
            # The supervisor's heartbeat check should have ended it first; never wait forever.
            started = min(f.started_ns for f in flights.values())
            waited_s = (time.monotonic_ns() - started) / 1e9
            self.policy.report_hang(f"no answer to a step within {waited_s:.0f} s")

    def _send_next(
        self, serving: RequestChannel, incoming: RequestChannel | None, until_ns: int
    ) -> bool:
        """Send the next request, or batch, to the serving process or (during a swap) the new
        one; False when the window says wait for more."""
        sessions = self._waiting_sessions()
        channel = serving
        if incoming is not None and sessions:
            # One process per batch: the first robot's; the others wait for the next.
            channel = self._route(sessions[0], serving, incoming)
            sessions = [s for s in sessions if self._route(s, serving, incoming) is channel]
        now = time.monotonic_ns()
        if sessions and self._window.largest > 1:
            waiting = [Waiting(r.received_ns, r.budget_ns) for r in _peek(sessions)]
            wait_ns = self._window.wait_ns(waiting, now)
            if wait_ns > 0 and now + wait_ns >= until_ns:
                return False  # the next tick's service comes before the batch must leave
        chosen = {id(s) for s in sessions}
        self._ready = collections.deque(s for s in self._ready if id(s) not in chosen)
        batch = [(s, r) for s in sessions if (r := s.requests.take()) is not None]
        if not batch:
            return True
        started = [self.began(request) for _, request in batch]
        try:
            sent = channel.send_batch([(r.images, r.context) for _, r in batch])
        except Exception as exc:  # noqa: BLE001 - e.g. the process stopped taking messages
            for session, request in batch:
                self.failed(session, request, exc)
            if isinstance(exc, ProcessStuck) and channel is serving:  # else: as above
                self.policy.report_hang(str(exc))
            return True
        give_up = int((self.policy.hang_timeout() + 1.0) * 1e9)
        for (session, request), request_id, began in zip(batch, sent, started, strict=True):
            if isinstance(request_id, Exception):  # e.g. a frame of the wrong shape for the slot
                self.failed(session, request, request_id)
                continue
            flight = InFlight(session, request, request_id, began, began + give_up, channel)
            self._in_flight[request_id] = flight
            if id(session) not in self._bound:
                self._forget_closed()  # a robot first served: forget those that left
            self._bound[id(session)] = (session, channel)
        return True

    def _forget_closed(self) -> None:
        for key, (session, _) in list(self._bound.items()):
            if session.closed:
                del self._bound[key]

    def _route(
        self, session: RobotQueues, serving: RequestChannel, incoming: RequestChannel
    ) -> RequestChannel:
        """The process this robot's waiting request goes to during a swap (the module doc)."""
        request = session.requests.peek()
        bound = self._bound.get(id(session))
        if (request is not None and request.context.episode_start) or (
            bound is not None and bound[1] is incoming
        ):
            return incoming
        return serving

    def _count_robots(self, incoming: RequestChannel) -> None:
        """Tell the policy how many robots are on the new process and how many still on the
        old one (a request in flight to it counts); robots that left are forgotten."""
        self._forget_closed()
        on_new = on_old = 0
        for _, channel in self._bound.values():
            if channel is incoming:
                on_new += 1
            else:  # the old process's, or one before it (the robot has not asked since)
                on_old += 1
        self.policy.swap_progress(incoming, on_new, on_old)

    def _waiting_sessions(self) -> list[RobotQueues]:
        """Distinct robots with a request waiting, in order of arrival, up to the largest
        batch (robots that left, or whose request was sent already, are skipped)."""
        sessions: list[RobotQueues] = waiting_sessions(self._ready, self._window.largest)
        if not sessions:
            self._ready.clear()  # only entries of robots already served or gone
        return sessions

    def _fail_waiting(self) -> None:
        """The process is down: every waiting request fails now, as a policy that is down does."""
        down = InferenceUnavailable("the inference process is restarting; robots are held")
        while self._ready:
            session = self._ready.popleft()
            request = session.requests.take()
            if request is not None and not session.closed:
                self.failed(session, request, down)


def _peek(sessions: list[RobotQueues]) -> list[InferenceRequest]:
    return [r for s in sessions if (r := s.requests.peek()) is not None]
