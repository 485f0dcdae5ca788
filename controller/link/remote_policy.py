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

The serving process's state is one record (`serving_process.ServingProcess`, `serving_process`
here), which three parts receive and change through its methods: the supervisor
(`supervision`), the episode-start switch (`episode_swap`) and the swapper (`policy_swap`).

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
episode start (`episode_swap`: both processes serve meanwhile; a later swap replaces it,
`cancel_swap()` ends it, and it times out); a swap that fails changes nothing.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from controller.errors import PolicyError
from controller.feed.batch_window import BatchWindow, step_times_of
from controller.link.episode_swap import EpisodeSwitch
from controller.link.incoming import Incoming, Routes
from controller.link.policy_swap import EPISODE_SWAP_TIMEOUT_S, Swapper
from controller.link.process_spawner import Child, Spawner, wait_or_kill
from controller.link.remote_feed import RemoteFeed
from controller.link.request_channel import (
    InferenceUnavailable,
    RequestChannel,
    StepReply,
    prediction_of,
)
from controller.link.restart_ledger import Restart
from controller.link.serving_process import ServingProcess
from controller.link.standbys import Standbys, resident_bytes, standby_mode
from controller.link.supervision import POLL_MS, Supervisor
from controller.observe.telemetry import Telemetry
from controller.process_protocol.process_messages import ChunkReply, Hello
from policies.base import PolicySpec, Prediction, RobotContext

SWITCH_WAIT_S = 10.0  # at stop, for a swap's switch under way to finish


class RemotePolicy:
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
        episode_swap_timeout_s: float = EPISODE_SWAP_TIMEOUT_S,
    ) -> None:
        # `config_json`: every process's stdin (held by the record, so that restarts need no
        # file); `nice`: how far below the control loop's CPU priority they run
        # (process_spawner); `batching`: execution.batch_sizes (the process's too) and
        # batch_window_us; `standby`: supervision.standby (off, spare, hot; True/False:
        # spare/off); `episode_swap_timeout_s`: supervision's, how long a swap at episode
        # starts may wait for the robots (policy_swap).
        stdin = config_json.encode() if config_json is not None else None
        spawner = Spawner(command, env, stdin, nice)
        self.start_timeout_s = start_timeout_s
        self.serving_process = ServingProcess(
            spawner, config_json, hang_timeout_s=hang_timeout_s, batch_sizes=batching[0]
        )
        self.standbys = Standbys(spawner, standby_mode(standby), start_timeout_s)
        self._batching = batching
        self._episodes = EpisodeSwitch(self.serving_process, self.standbys)
        self._supervisor = Supervisor(
            self.serving_process, self.standbys, self._episodes, start_timeout_s
        )
        self._swapper = Swapper(self, episode_swap_timeout_s)
        # The last `predict`'s trips (ns): request sent -> taken there, chunk ready there ->
        # reply here. Both processes read one clock (CLOCK_MONOTONIC is system-wide).
        self.last_trips_ns: tuple[int, int] | None = None
        self._stopped = False

    # ---- life cycle ----------------------------------------------------------------------

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Start the process and wait until it serves; PolicyError with its reason if it
        cannot (a bad checkpoint, no tier passing), after which nothing is left running."""
        try:
            self._supervisor.launch(progress)
        except OSError as exc:  # no room for the slots in /dev/shm, no process to spawn
            self.stop()
            raise PolicyError(
                f"the inference process cannot start: {exc.strerror or exc}"
            ) from None
        except BaseException:  # Ctrl-C during a long compile too: leave nothing running
            self.stop()
            raise
        self._supervisor.start()

    def stop(self) -> None:
        """End the process and free everything; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        record = self.serving_process
        record.stop()
        self._supervisor.join(2.0)
        # A swap's switch under way finishes first (it attaches a process and its slots, which
        # must not escape the teardown below); bounded, should a stop come from inside one.
        switching = record.switch_lock.acquire(timeout=SWITCH_WAIT_S)
        try:
            standbys = self.standbys.close()  # asked first: they exit while the serving one does
            self._swapper.close()
            self._episodes.end()
            record.end(polite=True)
            record.close_slots()
        finally:
            if switching:
                record.switch_lock.release()
        for process, grace_s in standbys:
            wait_or_kill(process, grace_s)

    @property
    def serving(self) -> bool:
        return self.serving_process.serving

    @property
    def epoch(self) -> int:
        """Processes that have served so far: a switch is seen by the loop (serving_watch)."""
        return self.serving_process.epoch

    @property
    def pinned(self) -> bool:
        """The serving process pinned its observation slots for DMA."""
        return self.serving_process.pinned

    @property
    def hang_timeout_s(self) -> float:
        return self.serving_process.hang_timeout_s

    @property
    def last_step_ns(self) -> int | None:
        """The last step as the inference process timed it (request taken -> chunk in its host
        memory), for benchmarks; the daemon records every one in telemetry (remote_feed)."""
        return self.serving_process.last_step_ns

    def hang_timeout(self) -> float:
        """How long a step may keep the process silent (ServingProcess.hang_timeout)."""
        return self.serving_process.hang_timeout()

    def report_hang(self, detail: str) -> None:
        """A caller waited too long for a step: the process is taken for hung and restarted."""
        self.serving_process.fail("hung", detail)

    def feed(self, telemetry: Telemetry) -> RemoteFeed:
        """Fed by the control loop's own thread between ticks (remote_feed says why)."""
        sizes, window_us = self._batching
        record = self.serving_process
        window = BatchWindow(window_us, sizes, lambda: step_times_of(record.status))
        return RemoteFeed(self, telemetry, window)

    def attach_telemetry(self, telemetry: Telemetry) -> None:
        """Nothing to attach here: the process times its own step, and each chunk brings that
        time back (the feed records it as process_step)."""

    @property
    def restarts(self) -> collections.deque[Restart]:
        """The newest restarts, each with its cause (RESTARTS_KEPT of them)."""
        return self.serving_process.ledger.restarts

    @property
    def restart_count(self) -> int:
        return self.serving_process.ledger.count

    @property
    def pid(self) -> int | None:
        process = self.serving_process.process
        return process.pid if process is not None else None

    @property
    def standby_pid(self) -> int | None:
        """The standby process's pid (see the module doc); None when there is none."""
        return self.standbys.pid

    # ---- the Policy contract ---------------------------------------------------------------

    @property
    def spec(self) -> PolicySpec:
        spec = self.serving_process.spec
        if spec is None:
            raise PolicyError("the inference process has not started: call start() first")
        return spec

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
            reply = self.wait_for_reply(channel, request_id)
            answered_ns = time.monotonic_ns()
        if isinstance(reply, ChunkReply):
            taken_ns, step_ns = reply.received_ns, reply.step_ns
            self.last_trips_ns = (taken_ns - sent_ns, answered_ns - taken_ns - step_ns)
        return prediction_of(reply)  # a fatal reply has failed the process (note_reply)

    def requests(self) -> contextlib.AbstractContextManager[RequestChannel | None]:
        """The serving process's request channel, held: no restart replaces or closes it until
        the block ends (keep blocks short: a restart waits for them). None while the process
        is down or restarting."""
        return self.serving_process.requests()

    def routes(self) -> contextlib.AbstractContextManager[Routes]:
        """The serving channel and, during a swap at episode starts, the new process's, held
        (ServingProcess.routes; the feed's)."""
        return self.serving_process.routes()

    @property
    def swapping(self) -> bool:
        """A new process serves robots at their episode start beside the old one."""
        return self._episodes.swapping

    def swap_progress(self, channel: RequestChannel, on_new: int, on_old: int) -> None:
        """The feed's count of robots on a swap's new process and on the old one."""
        self._episodes.swap_progress(channel, on_new, on_old)

    def wait_for_reply(self, channel: RequestChannel, request_id: int) -> StepReply:
        """`predict`'s wait for the reply to `request_id`; InferenceUnavailable if the process
        stops (its channel closed, or it failed) or does not answer within the hang bound."""
        # Its own deadline too: if the supervisor thread were gone, nothing else would end it.
        record = self.serving_process
        deadline = time.monotonic() + record.hang_timeout() + 1.0
        while True:
            gone = False
            if channel.link.poll(POLL_MS):
                reply = channel.receive()  # else a ring's answer, or an earlier request's
                if reply is not None and reply.id == request_id:
                    return reply
                gone = reply is None and channel.link.closed  # nothing more will come
            if gone or record.failed:
                raise InferenceUnavailable("the inference process stopped during this step")
            if time.monotonic() > deadline:
                limit_s = record.hang_timeout() + 1
                record.fail("hung", f"no answer to a step within {limit_s:.0f} s")
                raise InferenceUnavailable("the inference process did not answer this step")

    # ---- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The runner's status as the inference process last reported it, and the process's."""
        record = self.serving_process
        process, channel = record.process, record.channel
        memory = None
        if process is not None:  # as it reported it once built, and its resident memory now
            memory = {**(record.memory or {}), "host_resident_bytes": resident_bytes(process.pid)}
        return {
            **record.status,
            "process": {
                "pid": process.pid if process is not None else None,
                "serving": self.serving,
                "memory": memory,
                **self.standbys.status(),  # standby, standby_pid, standby_ready, its memory
                "swap": self._swapper.status(),
                "pinned_slots": record.pinned,
                # Same-host drivers' frame rings read in place, and how many are pinned.
                "driver_rings": len(channel.rings) if channel is not None else 0,
                "pinned_driver_rings": len(channel.pinned_rings) if channel is not None else 0,
                **record.ledger.status(),  # restart_count, restarts, restart_failure
            },
        }

    # ---- swap ----------------------------------------------------------------------------

    def swap(self, path: str, *, now: bool, name: str) -> dict[str, Any]:
        """Start swapping the served policy for the checkpoint at `path` (see policy_swap);
        returns the swap's state, which `status()` follows. PolicyError (one sentence) when it
        is refused at once."""
        return self._swapper.start(path, now=now, name=name)

    def cancel_swap(self) -> dict[str, Any]:
        """End the swap under way (`tempo swap --cancel`; policy_swap): the old policy serves
        every robot. Its state once ended; PolicyError when no swap is under way."""
        return self._swapper.cancel()

    # What the swap (policy_swap.Swapper) reads and calls.

    @property
    def config_json(self) -> str | None:
        """The config (JSON) every inference process reads at start, a swapped-in policy's
        once switched; None: none was given (nothing to build a swap from)."""
        return self.serving_process.config_json

    @property
    def stopping(self) -> bool:
        """`stop()` was called: nothing may switch to a new process any more."""
        return self.serving_process.stop_requested.is_set()

    @property
    def switch_lock(self) -> threading.Lock:
        """Held while the serving process changes (a restart, a take-over, a swap's switch):
        one at a time."""
        return self.serving_process.switch_lock

    def spawner_for(self, config_json: str) -> Spawner:
        """Spawns inference processes as this policy's do, reading `config_json` instead."""
        return self.serving_process.spawner.with_stdin(config_json.encode())

    def switch_to(self, child: Child, hello: Hello, spawner: Spawner, config_json: str) -> float:
        """Under `switch_lock`, while serving: every robot is served by the built process
        `child` from now on (Supervisor.switch_to); when (wall clock) it began to."""
        return self._supervisor.switch_to(child, hello, spawner, config_json)

    def begin_incoming(
        self, child: Child, hello: Hello, spawner: Spawner, config_json: str
    ) -> Incoming:
        """Under `switch_lock`, while serving: the built process `child` serves each robot
        from its episode start beside the serving one (episode_swap)."""
        return self._episodes.begin(child, hello, spawner, config_json)

    def finish_incoming(self, incoming: Incoming) -> bool:
        """Under `switch_lock`: no robot is left on the old process, the new one serves
        (episode_swap); False if the swap ended otherwise meanwhile."""
        return self._episodes.finish(incoming)

    def abandon_incoming(self, incoming: Incoming, why: str) -> bool:
        """Under `switch_lock`: the swap at episode starts is ended (replaced, cancelled, timed
        out: `why`), its robots return to the old process (episode_swap); False if it ended
        otherwise meanwhile."""
        return self._episodes.abandon(incoming, why)
