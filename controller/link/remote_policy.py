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

Supervision (a thread of its own, `supervision`): the process exiting, or its heartbeat stopping for
`hang_timeout()` while serving (a hung step; it is then killed), or a `fatal` reply (a poisoned
CUDA context) ends `serving` at once and starts a fresh process, which loads from the warm compile
cache and passes the start-up parity checks again before `serving` returns. Each restart is
recorded with its cause in `status()` (`restart_ledger`; a restart that keeps failing says
why, how often and when it tries next). This module imports no torch.

What stands by beside the serving process (`supervision.standby`, `standbys`): a spare that
has imported Python, torch and Tempo (the default: a restart hands it the build, which saves
the seconds those imports take, about 3.5 s on an H100 machine; it holds no GPU memory), a hot
standby that has built the policy and takes over the moment the serving process fails (the
channel is switched to it: no build; requests in flight at the fault fail and robots send a
new observation; the next hot standby is then built in the background), or nothing.

`swap(path, now=...)` builds a new checkpoint in a new process the same way, checks it
(`policy_swap`) and switches every robot to it at once (`now`), or each robot at its next
episode start (`episode_swap`: both processes serve meanwhile); a swap that fails changes
nothing.
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
from controller.feed.batch_window import BatchWindow, step_times_of
from controller.link.episode_swap import EpisodeSwitch, Incoming
from controller.link.policy_swap import Swapper
from controller.link.process_spawner import Child, Spawner, wait_or_kill
from controller.link.remote_feed import RemoteFeed
from controller.link.request_channel import (
    InferenceUnavailable,
    ProcessFatal,
    RequestChannel,
    StepReply,
    prediction_of,
)
from controller.link.restart_ledger import Restart, RestartLedger
from controller.link.standbys import Standbys, resident_bytes, standby_mode
from controller.link.supervision import POLL_MS
from controller.observe.telemetry import Telemetry
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import ChunkReply, Hello, RequestFailed
from policies.base import PolicySpec, Prediction, RobotContext

log = logging.getLogger(__name__)

SWITCH_WAIT_S = 10.0  # at stop, for a swap's switch under way to finish


class RemotePolicy(EpisodeSwitch):
    """A policy served by a supervised inference process (see the module doc)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        hang_timeout_s: float = 5.0,
        start_timeout_s: float = 900.0,
        env: Mapping[str, str] | None = None,
        standby: bool | str = True,
        config_json: str | None = None,
        nice: int = 0,
        batching: tuple[Sequence[int], int] = ((1,), 0),
    ) -> None:
        # `config_json`: every process's stdin (held here, so that restarts need no file);
        # `nice`: how far below the control loop's CPU priority they run (process_spawner);
        # `batching`: inference.batch_sizes (the process's too) and batch_window_us;
        # `standby`: supervision.standby (off, spare, hot; True/False: spare/off).
        stdin = config_json.encode() if config_json is not None else None
        self._spawner = Spawner(command, env, stdin, nice)
        self._config_json = config_json
        self._standbys = Standbys(self._spawner, standby_mode(standby), start_timeout_s)
        self._batching = batching
        self.hang_timeout_s = hang_timeout_s
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()  # the channel: one request at a time, or a restart
        self._switch = threading.Lock()  # a restart, a take-over or a swap: one at a time
        self._link: ProcessChannel | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._slots: FrameSlots | None = None
        self._spec: PolicySpec | None = None
        self._status: dict[str, Any] = {}
        self._memory: dict[str, Any] | None = None  # what the serving process said of its own
        # The last step as the inference process timed it (request taken -> chunk in its host
        # memory), for benchmarks; the daemon records every one in telemetry (remote_feed).
        self.last_step_ns: int | None = None
        # The last `predict`'s trips (ns): request sent -> taken there, chunk ready there ->
        # reply here. Both processes read one clock (CLOCK_MONOTONIC is system-wide).
        self.last_trips_ns: tuple[int, int] | None = None
        self._channel: RequestChannel | None = None  # the serving process's (one per process)
        self._incoming: Incoming | None = None  # a swap's new process beside it (episode_swap)
        self._serving = threading.Event()
        self._failed = threading.Event()  # the serving process is gone: requests stop waiting
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self._ledger = RestartLedger()  # restarts and their causes, for status
        self.pinned = False
        self.epoch = 0  # processes that have served (serving_watch)
        self._stopped = False
        self._swapper = Swapper(self)

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
        # A swap's switch under way finishes first (it attaches a process and its slots, which
        # must not escape the teardown below); bounded, should a stop come from inside one.
        switching = self._switch.acquire(timeout=SWITCH_WAIT_S)
        try:
            standbys = self._standbys.close()  # asked first: they exit while the serving one does
            self._swapper.close()
            self._end_incoming()
            self._end_process(polite=True)
            with self._lock:
                if self._slots is not None:
                    self._slots.close()
                    self._slots = None
        finally:
            if switching:
                self._switch.release()
        for process, grace_s in standbys:
            wait_or_kill(process, grace_s)

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
        """The standby process's pid (see the module doc); None when there is none."""
        return self._standbys.pid

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
        memory = None
        if process is not None:  # as it reported it once built, and its resident memory now
            memory = {**(self._memory or {}), "host_resident_bytes": resident_bytes(process.pid)}
        return {
            **self._status,
            "process": {
                "pid": process.pid if process is not None else None,
                "serving": self.serving,
                "memory": memory,
                **self._standbys.status(),  # standby, standby_pid, standby_ready, its memory
                "swap": self._swapper.status(),
                "pinned_slots": self.pinned,
                # Same-host drivers' frame rings read in place, and how many are pinned.
                "driver_rings": len(channel.rings) if channel is not None else 0,
                "pinned_driver_rings": len(channel.pinned_rings) if channel is not None else 0,
                **self._ledger.status(),  # restart_count, restarts, restart_failure
            },
        }

    # ---- swap ----------------------------------------------------------------------------

    def swap(self, path: str, *, now: bool, name: str) -> dict[str, Any]:
        """Start swapping the served policy for the checkpoint at `path` (see policy_swap);
        returns the swap's state, which `status()` follows. PolicyError (one sentence) when it
        is refused at once."""
        return self._swapper.start(path, now=now, name=name)

    # What the swap (policy_swap.Swapper) reads and calls; `switch_to` is supervision's.

    @property
    def config_json(self) -> str | None:
        """The config (JSON) every inference process reads at start, a swapped-in policy's
        once switched; None: none was given (nothing to build a swap from)."""
        return self._config_json

    @property
    def stopping(self) -> bool:
        """`stop()` was called: nothing may switch to a new process any more."""
        return self._stop.is_set()

    @property
    def switch_lock(self) -> threading.Lock:
        """Held while the serving process changes (a restart, a take-over, a swap's switch):
        one at a time."""
        return self._switch

    def spawner_for(self, config_json: str) -> Spawner:
        """Spawns inference processes as this policy's do, reading `config_json` instead."""
        return self._spawner.with_stdin(config_json.encode())

    def begin_incoming(
        self, child: Child, hello: Hello, spawner: Spawner, config_json: str
    ) -> Incoming:
        """Under `switch_lock`, while serving: the built process `child` serves each robot
        from its episode start beside the serving one (episode_swap)."""
        return self._begin_incoming(child, hello, spawner, config_json)

    def finish_incoming(self, incoming: Incoming) -> bool:
        """Under `switch_lock`: no robot is left on the old process, the new one serves
        (episode_swap); False if the swap ended otherwise meanwhile."""
        return self._finish_incoming(incoming)
