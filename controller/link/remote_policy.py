"""The policy as the control process sees it: an inference process it starts, feeds and watches.

    policy = RemotePolicy(command, hang_timeout_s=5.0)   # command: how to start the process
    policy.start(progress)          # spawn; wait until it has loaded, warmed up and checked
    prediction = policy.predict(images, context)          # the Policy contract, from the worker
    policy.serving                  # False while the process is down or restarting: hold robots
    policy.stop()

RemotePolicy is a `Policy`: `predict` copies the observation into a shared-memory slot
(`frame_slots`), sends the rest of the context in a small message (`process_messages`) and
waits for the chunk. The daemon does not wait: its control loop sends and takes replies itself,
between ticks, through `requests()` (`remote_feed`), so no second thread of the control
process competes with the loop for the GIL. Frames a same-host driver wrote in place
(`SlotFrames` of its session's ring) are not copied: the inference process attaches that ring
(and pins it) and reads the driver's slot itself (`request_channel`); a generation check after
the reply refuses the observation if the driver wrote it since.

Supervision (a thread of its own): the process exiting, or its heartbeat stopping for
`hang_timeout()` while serving (a hung step; it is then killed), or a `fatal` reply (a poisoned
CUDA context) ends `serving` at once and starts a fresh process, which loads from the warm compile
cache and passes the start-up parity checks again before `serving` returns. Each restart is
recorded with its cause in `status()` (`restart_ledger`; a restart that keeps failing says
why, how often and when it tries next). This module imports no torch.

A spare process stands by (`standby`, on by default): started once a process serves, it has
imported Python, torch and Tempo and waits; a restart hands it the build, which saves the
seconds those imports take (about 3.5 s on an H100 machine). It holds no GPU memory while it
waits: CUDA starts only with the build.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from controller.errors import PolicyError
from controller.link.batch_window import BatchWindow, step_times_of
from controller.link.frame_slots import FrameSlots
from controller.link.process_channel import ProcessChannel
from controller.link.process_messages import (
    AttachSlots,
    Build,
    ChunkReply,
    Hello,
    Ready,
    RequestFailed,
    Standby,
)
from controller.link.process_spawner import (
    Child,
    Spawner,
    close_channel,
    end_child,
    expect,
    has_news,
    send_at_start,
    wait_or_kill,
)
from controller.link.remote_feed import RemoteFeed
from controller.link.request_channel import (
    InferenceUnavailable,
    ProcessFatal,
    RequestChannel,
    StepReply,
    prediction_of,
)
from controller.link.restart_ledger import Restart, RestartLedger
from controller.observe.telemetry import Telemetry
from policies.base import PolicySpec, Prediction, RobotContext

log = logging.getLogger(__name__)

SLOT_COUNT = 2  # per robot of the largest batch: one batch in flight, a torn read detectable
POLL_MS = 20
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)  # then the ladder starts over
STANDBY_GRACE_S = 0.2  # a spare has nothing to finish: what it is given to exit at shutdown
HANG_STEPS = 20  # a step this many times the slowest tier's start-up step time is a hang


class RemotePolicy:
    """A policy served by a supervised inference process (see the module doc)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        hang_timeout_s: float = 5.0,
        start_timeout_s: float = 900.0,
        env: Mapping[str, str] | None = None,
        standby: bool = True,
        config_json: str | None = None,
        nice: int = 0,
        batching: tuple[Sequence[int], int] = ((1,), 0),
    ) -> None:
        # `config_json`: every process's stdin (held here, so that restarts need no file);
        # `nice`: how far below the control loop's CPU priority they run (process_spawner);
        # `batching`: inference.batch_sizes (the process's too) and batch_window_us.
        stdin = config_json.encode() if config_json is not None else None
        self._spawner = Spawner(command, env, stdin, nice)
        self._use_standby = standby
        self._batching = batching
        self._standby: Child | None = None
        self._standby_ready = False  # it said `standby` (seen by the supervisor thread)
        self.hang_timeout_s = hang_timeout_s
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()  # the channel: one request at a time, or a restart
        self._link: ProcessChannel | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._slots: FrameSlots | None = None
        self._spec: PolicySpec | None = None
        self._status: dict[str, Any] = {}
        # The last step as the inference process timed it (request taken -> chunk in its host
        # memory), for benchmarks; the daemon records every one in telemetry (remote_feed).
        self.last_step_ns: int | None = None
        # The last `predict`'s trips (ns): request sent -> taken there, chunk ready there ->
        # reply here. Both processes read one clock (CLOCK_MONOTONIC is system-wide).
        self.last_trips_ns: tuple[int, int] | None = None
        self._channel: RequestChannel | None = None  # the serving process's (one per process)
        self._serving = threading.Event()
        self._failed = threading.Event()  # the serving process is gone: requests stop waiting
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self._ledger = RestartLedger()  # restarts and their causes, for status
        self.pinned = False
        self._stopped = False

    # ---- life cycle ----------------------------------------------------------------------

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Start the process and wait until it serves; PolicyError with its reason if it
        cannot (a bad checkpoint, no tier passing), after which nothing is left running."""
        try:
            self._launch(progress)
        except OSError as exc:  # no room for the slots in /dev/shm, no process to spawn
            self.stop()
            raise PolicyError(
                f"the inference process cannot start: {exc.strerror or exc}"
            ) from None
        except BaseException:  # Ctrl-C during a long compile too: leave nothing running
            self.stop()
            raise
        self._watch = threading.Thread(target=self._supervise, name="tempo-supervisor")
        self._watch.daemon = True
        self._watch.start()

    def stop(self) -> None:
        """End the process and free everything; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        self._serving.clear()
        self._failed.set()
        if self._watch is not None and self._watch is not threading.current_thread():
            self._watch.join(timeout=2.0)
        with self._lock:
            spare, self._standby = self._standby, None
        if spare is not None:  # asked first, so it exits while the serving process does
            close_channel(spare[0], ask_to_stop=True)
        self._end_process(polite=True)
        with self._lock:
            if self._slots is not None:
                self._slots.close()
                self._slots = None
        if spare is not None:  # it holds nothing (imports only): one still importing is killed
            wait_or_kill(spare[1], STANDBY_GRACE_S)

    @property
    def serving(self) -> bool:
        return self._serving.is_set()

    def feed(self, telemetry: Telemetry) -> RemoteFeed:
        """Fed by the control loop's own thread between ticks (remote_feed says why)."""
        sizes, window_us = self._batching
        window = BatchWindow(window_us, sizes, lambda: step_times_of(self._status))
        return RemoteFeed(self, telemetry, window)

    def attach_telemetry(self, telemetry: Telemetry) -> None:
        """Nothing to attach here: the process times its own step, and each chunk brings that
        time back (the feed records it as process_step)."""

    @property
    def restarts(self) -> collections.deque[Restart]:
        """The newest restarts, each with its cause (RESTARTS_KEPT of them)."""
        return self._ledger.restarts

    @property
    def restart_count(self) -> int:
        return self._ledger.count

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def standby_pid(self) -> int | None:
        """The spare process's pid (see the module doc); None when there is none."""
        spare = self._standby
        return spare[1].pid if spare is not None else None

    # ---- the Policy contract ---------------------------------------------------------------

    @property
    def spec(self) -> PolicySpec:
        if self._spec is None:
            raise PolicyError("the inference process has not started: call start() first")
        return self._spec

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        """One observation through the inference process, waiting for its chunk (the daemon's
        loop does not wait: it uses `requests()`, see remote_feed). ValueError when the
        observation is at fault (that robot's problem), InferenceUnavailable while the process
        is down, PolicyError when the policy failed on it."""
        with self.requests() as channel:
            if channel is None:
                raise InferenceUnavailable("the inference process is restarting; robots are held")
            self.last_trips_ns = None  # until this step's reply says when it was taken
            sent_ns = time.monotonic_ns()
            request_id = channel.send(images, context)
            reply = self._await_reply(channel, request_id)
            answered_ns = time.monotonic_ns()
        if isinstance(reply, ChunkReply):
            taken_ns, step_ns = reply.received_ns, reply.step_ns
            self.last_trips_ns = (taken_ns - sent_ns, answered_ns - taken_ns - step_ns)
        return self.prediction(reply)

    @contextlib.contextmanager
    def requests(self) -> Iterator[RequestChannel | None]:
        """The serving process's request channel, held: no restart replaces or closes it until
        the block ends (keep blocks short: a restart waits for them). None while the process
        is down or restarting."""
        with self._lock:
            yield self._channel if self._serving.is_set() else None

    def prediction(self, reply: StepReply) -> Prediction:
        """A step reply as a Prediction (see `request_channel.prediction_of`); a `fatal` reply
        (a poisoned CUDA context) ends serving and starts a fresh process."""
        if isinstance(reply, ChunkReply):
            if reply.status is not None:
                self._status = reply.status
            self.last_step_ns = reply.step_ns
        try:
            return prediction_of(reply)
        except ProcessFatal as exc:
            self._fail("fatal", reply.error if isinstance(reply, RequestFailed) else str(exc))
            raise InferenceUnavailable(str(exc)) from None

    def _await_reply(self, channel: RequestChannel, request_id: int) -> StepReply:
        # Its own deadline too: if the supervisor thread were gone, nothing else would end it.
        deadline = time.monotonic() + self.hang_timeout() + 1.0
        while True:
            gone = False
            if channel.link.poll(POLL_MS):
                reply = channel.receive()  # else a ring's answer, or an earlier request's
                if reply is not None and reply.id == request_id:
                    return reply
                gone = reply is None and channel.link.closed  # nothing more will come
            if gone or self._failed.is_set():
                raise InferenceUnavailable("the inference process stopped during this step")
            if time.monotonic() > deadline:
                self._fail("hung", f"no answer to a step within {self.hang_timeout() + 1:.0f} s")
                raise InferenceUnavailable("the inference process did not answer this step")

    # ---- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The runner's status as the inference process last reported it, and the process's."""
        process, channel = self._process, self._channel
        return {
            **self._status,
            "process": {
                "pid": process.pid if process is not None else None,
                "serving": self.serving,
                "standby_pid": self.standby_pid,
                "standby_ready": self._standby_ready if self._use_standby else None,
                "pinned_slots": self.pinned,
                # Same-host drivers' frame rings read in place, and how many are pinned.
                "driver_rings": len(channel.rings) if channel is not None else 0,
                "pinned_driver_rings": len(channel.pinned_rings) if channel is not None else 0,
                **self._ledger.status(),  # restart_count, restarts, restart_failure
            },
        }

    # ---- supervision ---------------------------------------------------------------------

    def hang_timeout(self) -> float:
        """How long a step may keep the process silent: `hang_timeout_s`, or
        HANG_STEPS x the slowest ready tier's measured step when that is longer (a big model on
        a CPU; a re-promotion, which re-checks tiers within a step), so a slow policy is not
        taken for a hung one."""
        steps = [
            t.get("step_s") or 0.0
            for t in self._status.get("tiers") or []
            if isinstance(t, dict) and t.get("state") == "ready"
        ]
        return max(self.hang_timeout_s, HANG_STEPS * max(steps, default=0.0))

    def _supervise(self) -> None:
        while not self._stop.wait(POLL_MS / 1000):
            process = self._process
            if process is None:
                continue
            code = process.poll()
            if code is not None:
                self._fail("exited", f"the inference process exited with code {code}")
            elif self._serving.is_set() and self._slots is not None:
                silent_s = (time.monotonic_ns() - self._slots.last_beat_ns()) / 1e9
                if silent_s > self.hang_timeout():
                    self._fail("hung", f"no heartbeat for {silent_s:.1f} s; killed")
            if self._failed.is_set() and not self._stop.is_set():
                self._restart()
            spare = self._standby  # its channel is this thread's once the first start is done
            if spare is not None and not self._standby_ready and has_news(spare[0]):
                self._standby_ready = True  # its message stays queued for _launch

    def report_hang(self, detail: str) -> None:
        """A caller waited too long for a step: the process is taken for hung and restarted."""
        self._fail("hung", detail)

    def _fail(self, cause: str, detail: str) -> None:
        if self._failed.is_set():
            return
        self._serving.clear()
        self._failed.set()
        self._ledger.failed(cause, detail)

    def _restart(self) -> None:
        backoffs = (0.0, *RESTART_BACKOFF_S)
        for attempt, backoff in enumerate(backoffs):
            if attempt and self._stop.wait(backoff):
                return
            try:
                self._end_process(polite=False)
                self._launch(None)
                self._ledger.restarted()
                log.info("inference process restarted (pid %s); serving again", self.pid)
                return
            except Exception as exc:  # noqa: BLE001 - log it and try again with a back-off
                next_s = backoffs[attempt + 1] if attempt + 1 < len(backoffs) else 0.0
                self._ledger.restart_failed(str(exc), next_s)
        log.error("the inference process could not be restarted yet; robots stay held, retrying")

    def _end_process(self, polite: bool) -> None:
        """Stop the process (asked to first when `polite`) and close its channel. The lock is
        held only while they are taken out of use: the control loop takes it to send, and a
        killed GPU process can take a while to exit."""
        with self._lock:
            process, link = self._process, self._link
            self._process = self._link = self._channel = None
            if link is not None:
                alive = process is not None and process.poll() is None
                close_channel(link, ask_to_stop=polite and alive)
        if process is not None:
            wait_or_kill(process, 2.0 if polite else 0.0)

    def _take_standby(self) -> Child:
        """The spare process if it is still alive, else a fresh one."""
        spare, self._standby = self._standby, None
        self._standby_ready = False
        if spare is not None and spare[1].poll() is None:
            return spare
        if spare is not None:
            log.warning("the standby inference process had exited (code %s)", spare[1].poll())
            spare[0].close()
        return self._spawner.spawn()

    def _launch(self, progress: Callable[[str], None] | None) -> None:
        """Take the standby process (or spawn one), tell it to build, wait for its hello, hand
        it the slots, wait for ready; then start the next standby."""
        link, process = self._take_standby()
        with self._lock:
            self._link, self._process = link, process
        expect(link, process, Standby, self.start_timeout_s, self._stop)
        send_at_start(link, Build())
        hello = expect(link, process, Hello, self.start_timeout_s, self._stop)
        spec = hello.spec
        if self._spec is not None and spec != self._spec:
            raise PolicyError("the restarted inference process serves a different policy spec")
        self._spec = spec
        self._status = hello.status
        if self._slots is None:
            self._slots = FrameSlots.create(spec, SLOT_COUNT * max(self._batching[0]))
        self._slots.reset()  # a fresh header per process: nothing scribbled there outlives it
        slots = AttachSlots(str(self._slots.path), self._slots.count)
        send_at_start(link, slots, fds=[self._slots.fileno()])  # the memory itself, no file
        ready = expect(link, process, Ready, 60.0, self._stop)
        self.pinned = ready.pinned
        with self._lock:  # a new process has attached no driver ring yet
            self._channel = RequestChannel(link, self._slots, spec)
        if progress is not None:
            progress(f"inference process {process.pid} ready")
        self._failed.clear()
        self._serving.set()
        if self._use_standby and not self._stop.is_set():
            try:  # spawned outside the lock, which the control loop takes to send
                spare: Child | None = self._spawner.spawn()
            except OSError as exc:  # the serving process is fine: go on without one
                log.warning("no standby inference process (%s); a restart will start a "
                            "fresh one", exc)  # fmt: skip
                return
            with self._lock:  # stop() takes the standby under this lock: never one left behind
                if not self._stop.is_set():
                    self._standby, spare = spare, None
            end_child(spare, 1.0)
