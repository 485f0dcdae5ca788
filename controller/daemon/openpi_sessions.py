"""openpi clients as sessions of the daemon: each websocket connection (controller.openpi's
server) is one session of a policy's lane, with its own queues to the lane's inference feed (the
same feed, batching and process supervision as the ZeroMQ robots), its own episode context
(state history, the policy's memory, its prompt) and recording, counted against
server.max_robots and the policy's admission like a robot. A client executes its chunks itself:
the daemon answers one chunk per request, through the guard chain row by row
(controller.action.chunk_limits), and streams nothing.

Threads: the server's thread opens connections and submits requests (`Backend`, `Connection`);
the loop's thread alone touches the feed and the recording (this is a `SideChannel` the
transport services while it waits, polled on a pipe that every submission, and every chunk or
refusal the feed hands back, writes a byte to), then hands each answer back with `done`.

    sessions = OpenpiSessions(lane, guards, ...)
    server = OpenpiServer(sessions, settings)          # Backend: open, metadata
    transport.receive_until(until_ns, handle, side)    # side includes `sessions`
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from controller.action.chunk_limits import ChunkLimits
from controller.daemon.episode_context import EpisodeContext
from controller.daemon.prompts import RobotPrompts
from controller.errors import ErrorCode, ProtocolError
from controller.feed.inference_feed import Chunk, InferenceFeed, InferenceQueues, InferenceRequest
from controller.feed.pending_requests import PendingObservation
from controller.observe.log_safety import shown
from controller.openpi.websocket_server import Answer, OpenpiRequest
from controller.record.queue import PolicyRecording
from controller.record.tick_observer import NOT_RECORDED, TickObserver
from policies.base import PolicySpec

log = logging.getLogger(__name__)

# What the feed counts on a session when a request fails without a chunk or a refusal.
FAILURES = ("inference_failures", "chunks_rejected")
RESTARTING = "the policy's inference process is restarting; send the request again in a moment"


class _Wake:
    """A pipe the loop's poll watches: a byte written wakes it (from any thread)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def filenos(self) -> list[int]:
        return [self.read_fd]

    def poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):  # full: it wakes already
            os.write(self.write_fd, b"\0")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.read_fd, 4096):
                pass

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class _WakingDeque(collections.deque):  # type: ignore[type-arg]
    """A session's chunks or refusals: what the feed appends wakes the loop's poll, and is
    shown to `on_append` first (on the feed's thread)."""

    def __init__(self, wake: _Wake, on_append: Callable[[Any], None]) -> None:
        super().__init__()
        self._wake = wake
        self._on_append = on_append

    def append(self, item: Any) -> None:
        super().append(item)
        self._on_append(item)
        self._wake.poke()


@dataclass
class _Flight:
    """The request of a connection being served."""

    obs_seq: int
    done: Callable[[Answer], None]
    failures: int  # the feed's failure counters when it was submitted


class OpenpiConnection:
    """One openpi client: a session of the lane (see the module doc)."""

    def __init__(self, owner: OpenpiSessions, number: int, peer: str) -> None:
        self.owner = owner
        # A robot's name (recordings read only those); no ZeroMQ hello takes it meanwhile.
        self.robot = f"openpi-{number}"
        self.peer = peer
        self.id = f"openpi-{number}"
        self.opened_ns = time.monotonic_ns()
        self.counters: collections.Counter[str] = collections.Counter()
        self.queues = InferenceQueues(self.robot, owner.spec, self.counters)
        self.queues.chunks = _WakingDeque(owner.wake, self._answer_early)
        self.queues.refused = _WakingDeque(owner.wake, lambda refusal: None)
        self.context = EpisodeContext(self.robot, owner.spec)
        self.guards: collections.Counter[str] = collections.Counter()  # the chunks' limits
        self.recording: TickObserver = NOT_RECORDED
        self.task: str | None = None
        self.last_request_ns = 0
        self.sent = 0
        self._seq = itertools.count(1)
        self._flight: _Flight | None = None  # loop thread only
        self._cancelled = False

    # -- the server's thread (controller.openpi.websocket_server.Connection) ----------------

    def submit(self, request: OpenpiRequest, done: Callable[[Answer], None]) -> None:
        self.last_request_ns = request.received_ns
        self.owner.ask(lambda: self.owner.start(self, request, done))

    def cancel(self) -> None:
        self.counters["requests_timed_out"] += 1
        self._cancelled = True
        self.owner.wake.poke()

    def refused(self, code: str) -> None:
        self.counters[f"refused_{code}"] += 1
        self.owner.refusals[code] += 1

    def finish(self, request: OpenpiRequest, answer: Answer) -> Answer:
        """The chunk as the client may execute it: through the guard chain, row by row."""
        if answer.actions is None:
            return answer
        try:
            actions, counts = self.owner.limits.apply(answer.actions, request.state)
        except ValueError as exc:
            return Answer(refused=f"the chunk was not sent: {exc}", code=ErrorCode.INTERNAL.value)
        self.guards.update({k: v for k, v in counts.items() if v})
        self.sent += 1
        self.owner.served += 1  # the server's thread alone writes it
        return Answer(actions=actions, infer_ns=answer.infer_ns)

    def close(self) -> None:
        self.owner.ask(lambda: self.owner.end(self))

    # -- the feed's thread --------------------------------------------------------------------

    def _answer_early(self, chunk: Chunk) -> None:
        """The chunk of the request in flight goes to the client as it lands, from the feed's
        thread, without waiting for the loop's next pass; the loop lands it in the context and
        the recording as before, and its own `done` then is a no-op (answered once)."""
        flight = self._flight  # one read: the loop's thread may clear it meanwhile
        if flight is not None and chunk.obs_seq == flight.obs_seq and not self._cancelled:
            flight.done(Answer(actions=chunk.actions, infer_ns=chunk.inference_ns))

    # -- the loop's thread ------------------------------------------------------------------

    def next_seq(self) -> int:
        return next(self._seq)

    @property
    def flight(self) -> _Flight | None:
        return self._flight

    def fly(self, flight: _Flight | None) -> None:
        self._flight = flight
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def failures(self) -> int:
        return sum(self.counters[name] for name in FAILURES)


class OpenpiSessions:
    """The lane's openpi clients; a Backend for the server and a SideChannel for the loop."""

    def __init__(
        self,
        policy_name: str,
        spec: PolicySpec,
        feed: InferenceFeed,
        limits: ChunkLimits,
        *,
        serving: Callable[[], bool],
        current_step: Callable[[], int],
        admit: Callable[[int], None],
        occupied: Callable[[], int],
        max_robots: int,
        max_connections: int,
        budget_ns: int | None,
        recorder: PolicyRecording | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """`admit(robots)`: the policy's admission (raises ProtocolError `full`), `occupied()`:
        the robots of every policy, ZeroMQ and openpi (what `max_robots` bounds)."""
        self.policy_name = policy_name
        self.spec = spec
        self.feed = feed
        self.limits = limits
        self._serving = serving
        self._current_step = current_step
        self._admit = admit
        self._occupied = occupied
        self.max_robots = max_robots
        self.max_connections = max_connections
        self.budget_ns = budget_ns
        self.recorder = recorder
        self._metadata = metadata or {}
        self.prompts = RobotPrompts(spec)
        self.wake = _Wake()
        self.refusals: collections.Counter[str] = collections.Counter()  # by error code
        self.served = 0  # chunks sent to clients
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._connections: dict[str, OpenpiConnection] = {}
        self._asks: collections.deque[Callable[[], None]] = collections.deque()
        self._said_no_prompt = False

    # -- the server's thread ----------------------------------------------------------------

    @property
    def connections(self) -> list[OpenpiConnection]:
        with self._lock:
            return list(self._connections.values())

    def holds(self, robot: str) -> bool:
        """Whether a connected client goes by this robot name."""
        return any(c.robot == robot for c in self.connections)

    @property
    def count(self) -> int:
        """The clients connected (no lock: admission reads it while holding one)."""
        return len(self._connections)

    def check_room(self) -> None:
        with self._lock:
            self._refuse_when_full(len(self._connections))

    def _refuse_when_full(self, count: int) -> None:
        if count >= self.max_connections:
            raise ProtocolError(
                ErrorCode.FULL,
                f"this daemon already serves {count} openpi clients "
                "(server.openpi.max_connections); try again when one has gone",
            )
        if self._occupied() >= self.max_robots:
            raise ProtocolError(
                ErrorCode.FULL,
                f"this daemon already serves {self._occupied()} robots and clients "
                "(server.max_robots); try again when one has gone",
            )

    def open(self, peer: str) -> OpenpiConnection:
        with self._lock:
            count = len(self._connections)
            self._refuse_when_full(count)
            self._admit(count)
            connection = OpenpiConnection(self, next(self._numbers), peer)
            if self.recorder is not None:
                connection.recording = self.recorder.robot(connection.robot, connection.id)
            self._connections[connection.id] = connection
        self.ask(lambda: self._opened(connection))
        return connection

    def metadata(self) -> dict[str, Any]:
        return dict(self._metadata)

    def ask(self, work: Callable[[], None]) -> None:
        """Run `work` on the loop's thread, at its next service (appends are atomic)."""
        self._asks.append(work)
        self.wake.poke()

    # -- the loop's thread: the SideChannel ---------------------------------------------------

    @contextlib.contextmanager
    def polled(self) -> Iterator[_Wake]:
        yield self.wake

    def service(self, until_ns: int) -> None:
        """Chunks landed first (a client's next request must see the memory its last chunk
        left), then the requests and connections that came."""
        self.wake.drain()
        with self._lock:
            connections = list(self._connections.values())
        serving = None
        for connection in connections:
            flight = connection.flight
            if flight is None:
                continue
            if serving is None:
                serving = self._serving()
            self._check(connection, flight, serving)
        asks = self._asks
        while asks:
            work = asks.popleft()
            try:
                work()
            except Exception:  # a bug of ours must not stop the loop
                log.exception("an openpi client's request failed on the loop's thread")

    def _opened(self, connection: OpenpiConnection) -> None:
        connection.recording.hello(None)
        log.info("openpi client %s connected from %s", connection.robot, shown(connection.peer))

    def start(
        self, connection: OpenpiConnection, request: OpenpiRequest, done: Callable[[Answer], None]
    ) -> None:
        """Hand one request to the feed (or answer at once why not)."""
        if connection.queues.closed:
            return
        if not self._serving():
            done(Answer(refused=RESTARTING, code=ErrorCode.INTERNAL.value))
            return
        try:
            self._use_prompt(connection, request.prompt)
        except ProtocolError as exc:
            done(Answer(refused=str(exc), code=exc.code.value))
            return
        step = self._current_step()
        seq = connection.next_seq()
        now = time.monotonic_ns()
        context = connection.context
        window = context.push_state(request.state)
        pending = PendingObservation(step, 1, seq, request.received_ns, request.images, window)
        inference = InferenceRequest(
            seq,
            request.received_ns,
            context.episode,
            request.images,
            context.robot_context(pending, None),
            budget_ns=self.budget_ns,
        )
        connection.counters["observations"] += 1
        connection.recording.observation(
            seq, step, now, request.received_ns, request.images, request.state, None,
            context.episode,
        )  # fmt: skip
        connection.recording.request(inference)
        connection.fly(_Flight(seq, done, connection.failures()))
        self.feed.submit(connection.queues, inference)

    def _use_prompt(self, connection: OpenpiConnection, prompt: str | None) -> None:
        if self.prompts.spec is None:
            if prompt is not None and not self._said_no_prompt:
                self._said_no_prompt = True
                log.info(
                    "policy %s reads no prompt; the prompts openpi clients send are not used "
                    "(the metadata frame says reads_prompt: false)",
                    self.policy_name,
                )
            return
        if connection.context.prompt is not None and prompt in (None, connection.task):
            return  # the same task (or none named): already tokenized
        connection.context.use_prompt(self.prompts.for_hello(prompt))
        connection.task = prompt

    def _check(self, connection: OpenpiConnection, flight: _Flight, serving: bool) -> None:
        """Answer the request in flight if its chunk, a refusal or a failure has come."""
        queues = connection.queues
        if connection.cancelled:
            queues.chunks.clear()
            connection.fly(None)
            return
        if not serving:
            queues.chunks.clear()
            connection.fly(None)
            flight.done(Answer(refused=RESTARTING, code=ErrorCode.INTERNAL.value))
            return
        step = self._current_step()
        while queues.chunks:
            chunk: Chunk = queues.chunks.popleft()
            landed = chunk.obs_seq == flight.obs_seq and connection.context.chunk_landed(
                chunk, step
            )
            connection.recording.chunk(chunk, step, 0 if landed else None)
            if landed:
                connection.fly(None)
                flight.done(Answer(actions=chunk.actions, infer_ns=chunk.inference_ns))
                return
        while queues.refused:
            refusal = queues.refused.popleft()
            if refusal.obs_seq == flight.obs_seq:
                connection.fly(None)
                flight.done(Answer(refused=refusal.reason, code=refusal.code))
                return
        if connection.failures() != flight.failures:
            connection.fly(None)
            flight.done(
                Answer(
                    refused="the policy failed on this request; the daemon's log says why",
                    code=ErrorCode.INTERNAL.value,
                )
            )

    def end(self, connection: OpenpiConnection) -> None:
        """A client has gone: its session ends (the feed skips its requests)."""
        connection.queues.closed = True
        connection.fly(None)
        with self._lock:
            self._connections.pop(connection.id, None)
        log.info("openpi client %s disconnected", connection.robot)

    def close(self) -> None:
        self.wake.close()
