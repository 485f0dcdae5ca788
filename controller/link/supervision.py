"""How RemotePolicy's inference process is supervised: watched, and when it fails, switched to
the hot standby or restarted; a swap switches the same way (see remote_policy's doc).

    supervisor = Supervisor(record, standbys, episodes, start_timeout_s=900.0)
    supervisor.launch(progress)        # at start: the first process, built and serving
    supervisor.start()                 # the supervisor thread
    supervisor.switch_to(child, hello, spawner, config_json)   # a swap's, under switch_lock
    supervisor.join(2.0)               # at stop, once the record is stopped

Everything here runs on the supervisor thread (a swap's switch on the swap's thread, under the
record's `switch_lock`), except `launch` at start. The state is the serving process's record
(serving_process); this class holds only its thread. This module imports no torch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from controller.errors import PolicyError
from controller.link.episode_swap import EpisodeSwitch
from controller.link.process_spawner import (
    Child,
    Spawner,
    end_child,
    expect,
    send_at_start,
    wait_or_kill,
)
from controller.link.serving_process import READY_TIMEOUT_S, ServingProcess, hand_slots
from controller.link.standbys import Standbys
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_messages import Build, Hello, Standby

log = logging.getLogger(__name__)

POLL_MS = 20
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)  # then the ladder starts over
# A hot standby taking over attaches in well under a second; one silent this long is wedged
# (say, by the fault that ended the serving one), and a restart is quicker than waiting on.
TAKEOVER_READY_S = 5.0


class Supervisor:
    """The supervisor thread of one serving process (see the module doc)."""

    def __init__(
        self,
        record: ServingProcess,
        standbys: Standbys,
        episodes: EpisodeSwitch,
        start_timeout_s: float,
    ) -> None:
        self._record = record
        self._standbys = standbys
        self._episodes = episodes
        self._start_timeout_s = start_timeout_s
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch the serving process on a thread of its own until the record is stopped."""
        self._thread = threading.Thread(target=self._supervise, name="tempo-supervisor")
        self._thread.daemon = True
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Wait for the thread to end (the record stopped), unless called from it."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)

    def _supervise(self) -> None:
        record = self._record
        stop = record.stop_requested
        while not stop.wait(POLL_MS / 1000):
            # A swap switching processes holds `switch_lock`: the process read here is the one
            # serving, never one a swap has just replaced (and is ending).
            if not record.switch_lock.acquire(blocking=False):
                continue
            try:
                self._check()
                self._episodes.check()
                if record.failed and not stop.is_set():
                    # A swap's new process first, then the hot standby, then a restart.
                    if self._episodes.promote():
                        pass
                    elif not self._take_over() and not stop.is_set():
                        self._restart()
                # Under `switch_lock` too: a swap's switch replaces the standbys (from another
                # thread), and the two must not interleave.
                self._standbys.watch()
            finally:
                record.switch_lock.release()

    def _check(self) -> None:
        """Fail the serving process if it exited, or stopped beating while serving."""
        record = self._record
        process, slots = record.process, record.slots
        if process is None:
            return
        code = process.poll()
        if code is not None:
            record.fail("exited", f"the inference process exited with code {code}")
        elif record.serving and slots is not None:
            silent_s = (time.monotonic_ns() - slots.last_beat_ns()) / 1e9
            if silent_s > record.hang_timeout():
                record.fail("hung", f"no heartbeat for {silent_s:.1f} s; killed")

    def _take_over(self) -> bool:
        """Switch to the hot standby, if there is one: the failed process is killed, the
        standby (waited for if it is still building) is handed the slots and serves, with no
        build of its own. False when there is none or it cannot take over (it is ended; a
        restart follows)."""
        record = self._record
        if not self._standbys.hot_pending:
            return False
        failed = record.detach()
        if failed is not None:
            failed.kill()  # before the standby attaches: it can read no slot any more
        try:
            hot = self._standbys.take_hot(self._start_timeout_s, record.stop_requested)
            if hot is None:
                return False
            child, hello = hot
            try:
                self._attach(child, hello, None, ready_timeout_s=TAKEOVER_READY_S)
            except Exception as exc:  # noqa: BLE001 - a restart builds a fresh one instead
                log.warning("the hot standby could not take over (%s); restarting instead", exc)
                record.detach()
                end_child(child, 0.0)
                return False
        finally:
            if failed is not None:
                wait_or_kill(failed, 0.0)
        record.ledger.took_over(child[1].pid)
        record.resume()
        self._standbys.refill()  # the next one builds in the background, niced
        return True

    def _restart(self) -> None:
        record = self._record
        backoffs = (0.0, *RESTART_BACKOFF_S)
        for attempt, backoff in enumerate(backoffs):
            if attempt and record.stop_requested.wait(backoff):
                return
            try:
                record.end(polite=False)
                self.launch(None)
                record.ledger.restarted()
                process = record.process
                log.info("inference process restarted (pid %s); serving again",
                         process.pid if process is not None else None)  # fmt: skip
                return
            except Exception as exc:  # noqa: BLE001 - log it and try again with a back-off
                next_s = backoffs[attempt + 1] if attempt + 1 < len(backoffs) else 0.0
                record.ledger.restart_failed(str(exc), next_s)
        log.error("the inference process could not be restarted yet; robots stay held, retrying")

    def launch(self, progress: Callable[[str], None] | None) -> None:
        """Take the spare process (or spawn one), tell it to build, wait for its hello, then
        attach it and serve; then start the next standby."""
        record = self._record
        stop = record.stop_requested
        child, said_standby = self._standbys.take_spare()
        link, process = child
        record.bind(child)  # from now on ended by the record, should the start be cut short
        if not said_standby:
            expect(link, process, Standby, self._start_timeout_s, stop)
        send_at_start(link, Build())
        hello = expect(link, process, Hello, self._start_timeout_s, stop)
        self._attach(child, hello, progress)
        record.resume()
        if not stop.is_set():
            self._standbys.refill()

    def _attach(
        self,
        child: Child,
        hello: Hello,
        progress: Callable[[str], None] | None,
        new_spec: bool = False,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        """Hand a built process (it said `hello`) the observation slots and wait for ready
        (`resume` then serves from it)."""
        stop = self._record.stop_requested

        def hand(child: Child, slots: FrameSlots) -> bool:
            return hand_slots(child, slots, stop, ready_timeout_s)

        self._record.attach(child, hello, hand, new_spec=new_spec)
        if progress is not None:
            progress(f"inference process {child[1].pid} ready")

    def switch_to(self, child: Child, hello: Hello, spawner: Spawner, config_json: str) -> float:
        """A swap's switch (policy_swap; under `switch_lock`, while serving): the serving
        process stops taking requests (those in flight fail), the new one is handed the slots
        and serves, the old one is asked to stop, and restarts and standbys build from
        `config_json` from now on. If the new one cannot attach, the old config is restarted
        (a failure is recorded). Returns when (wall clock) the new one began to serve."""
        record = self._record
        record.hold()
        old = record.detach()
        try:
            self._attach(child, hello, None, new_spec=True)
        except Exception as exc:  # noqa: BLE001 - told by the swap; the supervisor restarts
            record.detach()  # the caller ends the new process
            record.fail("swap_failed", f"the swapped-in process could not attach ({exc})")
            raise PolicyError(
                f"the new inference process could not take over ({exc}); the old policy is "
                "being restarted"
            ) from None
        finally:
            if old is not None:  # its channel is closed: it exits on its own (or is killed),
                # waited for beside serving, not before it (robots hold until resume).
                ending = threading.Thread(target=wait_or_kill, args=(old, 2.0), daemon=True)
                ending.start()
        record.build_from(spawner, config_json)
        record.resume()
        switched = time.time()  # wall clock, for status (and benchmarks) to read
        self._standbys.replace(spawner)
        return switched
