"""How RemotePolicy supervises its inference process: watch it, and when it fails, switch to
the hot standby or restart it; a swap switches the same way (see remote_policy's doc).

    class RemotePolicy(ProcessSupervision): ...   # the state is RemotePolicy's (its __init__)

Everything here runs on the supervisor thread (a swap's switch on the swap's thread, under the
same `_switch` lock), except `_launch` at start. This module imports no torch.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from controller.errors import PolicyError
from controller.link.process_spawner import (
    Child,
    Spawner,
    close_channel,
    end_child,
    expect,
    send_at_start,
    wait_or_kill,
)
from controller.link.request_channel import RequestChannel
from controller.link.restart_ledger import RestartLedger
from controller.link.standbys import Standbys
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import AttachSlots, Build, Hello, Ready, Standby
from policies.base import PolicySpec

log = logging.getLogger(__name__)

POLL_MS = 20
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)  # then the ladder starts over
HANG_STEPS = 20  # a step this many times the slowest tier's start-up step time is a hang
SLOT_COUNT = 2  # per robot of the largest batch: one batch in flight, a torn read detectable
READY_TIMEOUT_S = 60.0  # a built process attaching (and pinning) the slots
# A hot standby taking over attaches in well under a second; one silent this long is wedged
# (say, by the fault that ended the serving one), and a restart is quicker than waiting on.
TAKEOVER_READY_S = 5.0


class ProcessSupervision:
    """The supervision half of RemotePolicy (which sets every attribute below)."""

    hang_timeout_s: float
    start_timeout_s: float
    epoch: int  # processes that have served so far: a switch is seen by the loop
    pinned: bool
    _spawner: Spawner
    _config_json: str | None
    _standbys: Standbys
    _batching: tuple[Any, int]
    _lock: threading.Lock
    _switch: threading.Lock
    _link: ProcessChannel | None
    _process: subprocess.Popen[bytes] | None
    _slots: FrameSlots | None
    _spec: PolicySpec | None
    _status: dict[str, Any]
    _memory: dict[str, Any] | None
    _channel: RequestChannel | None
    _serving: threading.Event
    _failed: threading.Event
    _stop: threading.Event
    _ledger: RestartLedger

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
            # A swap switching processes holds `_switch`: the process read here is the one
            # serving, never one a swap has just replaced (and is ending).
            if not self._switch.acquire(blocking=False):
                continue
            try:
                self._check()
                self._check_incoming()
                if self._failed.is_set() and not self._stop.is_set():
                    # A swap's new process first, then the hot standby, then a restart.
                    if self._promote_incoming():
                        pass
                    elif not self._take_over() and not self._stop.is_set():
                        self._restart()
                # Under `_switch` too: a swap's switch replaces the standbys (from another
                # thread), and the two must not interleave.
                self._standbys.watch()
            finally:
                self._switch.release()

    def _check(self) -> None:
        """Fail the serving process if it exited, or stopped beating while serving."""
        process = self._process
        if process is None:
            return
        code = process.poll()
        if code is not None:
            self._fail("exited", f"the inference process exited with code {code}")
        elif self._serving.is_set() and self._slots is not None:
            silent_s = (time.monotonic_ns() - self._slots.last_beat_ns()) / 1e9
            if silent_s > self.hang_timeout():
                self._fail("hung", f"no heartbeat for {silent_s:.1f} s; killed")

    def _check_incoming(self) -> None:
        """A swap's new process serving beside this one: checked too (episode_swap)."""

    def _promote_incoming(self) -> bool:
        """The serving process failed: a swap's new process takes over (episode_swap)."""
        return False

    def report_hang(self, detail: str) -> None:
        """A caller waited too long for a step: the process is taken for hung and restarted."""
        self._fail("hung", detail)

    def _fail(self, cause: str, detail: str) -> None:
        if self._failed.is_set():
            return
        self._serving.clear()
        self._failed.set()
        self._ledger.failed(cause, detail)

    def _take_over(self) -> bool:
        """Switch to the hot standby, if there is one: the failed process is killed, the
        standby (waited for if it is still building) is handed the slots and serves, with no
        build of its own. False when there is none or it cannot take over (it is ended; a
        restart follows)."""
        if not self._standbys.hot_pending:
            return False
        failed = self._detach()
        if failed is not None:
            failed.kill()  # before the standby attaches: it can read no slot any more
        try:
            hot = self._standbys.take_hot(self.start_timeout_s, self._stop)
            if hot is None:
                return False
            child, hello = hot
            try:
                self._attach(child, hello, None, ready_timeout_s=TAKEOVER_READY_S)
            except Exception as exc:  # noqa: BLE001 - a restart builds a fresh one instead
                log.warning("the hot standby could not take over (%s); restarting instead", exc)
                self._detach()
                end_child(child, 0.0)
                return False
        finally:
            if failed is not None:
                wait_or_kill(failed, 0.0)
        self._ledger.took_over(child[1].pid)
        self._resume()
        self._standbys.refill()  # the next one builds in the background, niced
        return True

    def _restart(self) -> None:
        backoffs = (0.0, *RESTART_BACKOFF_S)
        for attempt, backoff in enumerate(backoffs):
            if attempt and self._stop.wait(backoff):
                return
            try:
                self._end_process(polite=False)
                self._launch(None)
                self._ledger.restarted()
                process = self._process
                log.info("inference process restarted (pid %s); serving again",
                         process.pid if process is not None else None)  # fmt: skip
                return
            except Exception as exc:  # noqa: BLE001 - log it and try again with a back-off
                next_s = backoffs[attempt + 1] if attempt + 1 < len(backoffs) else 0.0
                self._ledger.restart_failed(str(exc), next_s)
        log.error("the inference process could not be restarted yet; robots stay held, retrying")

    def _detach(self) -> subprocess.Popen[bytes] | None:
        """Take the serving process out of use (its channel closed); returns it, still to be
        ended. The lock is held only meanwhile: the control loop takes it to send."""
        with self._lock:
            process, link = self._process, self._link
            self._process = self._link = self._channel = None
            if link is not None:
                link.close()
        return process

    def _end_process(self, polite: bool) -> None:
        """Stop the process (asked to first when `polite`) and close its channel; a killed
        GPU process can take a while to exit."""
        with self._lock:
            process, link = self._process, self._link
            self._process = self._link = self._channel = None
            if link is not None:
                alive = process is not None and process.poll() is None
                close_channel(link, ask_to_stop=polite and alive)
        if process is not None:
            wait_or_kill(process, 2.0 if polite else 0.0)

    def _launch(self, progress: Callable[[str], None] | None) -> None:
        """Take the spare process (or spawn one), tell it to build, wait for its hello, then
        attach it; then start the next standby."""
        link, process = child = self._standbys.take_spare()
        with self._lock:
            self._link, self._process = link, process
        expect(link, process, Standby, self.start_timeout_s, self._stop)
        send_at_start(link, Build())
        hello = expect(link, process, Hello, self.start_timeout_s, self._stop)
        self._attach(child, hello, progress)
        self._resume()
        if not self._stop.is_set():
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
        (`_resume` then serves from it). `new_spec`: a swap's, checked by the caller; else it
        must be the same."""
        link, process = child
        with self._lock:
            self._link, self._process = link, process
        spec = hello.spec
        if self._spec is not None and spec != self._spec and not new_spec:
            raise PolicyError("the restarted inference process serves a different policy spec")
        self._spec = spec
        self._status = hello.status
        self._memory = hello.status.get("memory")
        if self._slots is None:
            self._slots = FrameSlots.create(spec, SLOT_COUNT * max(self._batching[0]))
        self._slots.reset()  # a fresh header per process: nothing scribbled there outlives it
        self.pinned = self._hand_slots(child, self._slots, ready_timeout_s)
        with self._lock:  # a new process has attached no driver ring yet
            self._channel = RequestChannel(link, self._slots, spec)
        if progress is not None:
            progress(f"inference process {process.pid} ready")

    def _hand_slots(
        self, child: Child, slots: FrameSlots, timeout_s: float = READY_TIMEOUT_S
    ) -> bool:
        """Hand a built process the observation slots and wait (up to `timeout_s`) for
        `ready`; whether it pinned them."""
        link, process = child
        attach = AttachSlots(str(slots.path), slots.count)
        send_at_start(link, attach, fds=[slots.fileno()])  # the memory itself, no file
        return expect(link, process, Ready, timeout_s, self._stop).pinned

    def _resume(self) -> None:
        """Serve from the process just attached."""
        self.epoch += 1  # the control loop drops every plan once (serving_watch)
        self._failed.clear()
        self._serving.set()

    def switch_to(self, child: Child, hello: Hello, spawner: Spawner, config_json: str) -> float:
        """A swap's switch (policy_swap; under `_switch`, while serving): the serving process
        stops taking requests (those in flight fail), the new one is handed the slots and
        serves, the old one is asked to stop, and restarts and standbys build from
        `config_json` from now on. If the new one cannot attach, the old config is restarted
        (a failure is recorded). Returns when (wall clock) the new one began to serve."""
        self._serving.clear()
        old = self._detach()
        try:
            self._attach(child, hello, None, new_spec=True)
        except Exception as exc:  # noqa: BLE001 - told by the swap; the supervisor restarts
            self._detach()  # the caller ends the new process
            self._fail("swap_failed", f"the swapped-in process could not attach ({exc})")
            raise PolicyError(
                f"the new inference process could not take over ({exc}); the old policy is "
                "being restarted"
            ) from None
        finally:
            if old is not None:  # its channel is closed: it exits on its own (or is killed),
                # waited for beside serving, not before it (robots hold until _resume).
                ending = threading.Thread(target=wait_or_kill, args=(old, 2.0), daemon=True)
                ending.start()
        self._spawner, self._config_json = spawner, config_json
        self._resume()
        switched = time.time()  # wall clock, for status (and benchmarks) to read
        self._standbys.replace(spawner)
        return switched
