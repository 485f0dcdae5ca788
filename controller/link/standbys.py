"""The process that waits beside the serving inference process (`supervision.standby`).

    standbys = Standbys(spawner, "hot", start_timeout_s=900.0)
    standbys.refill()              # once a process serves: a spare, or a hot one built meanwhile
    child, said = standbys.take_spare()  # for a restart that builds: the spare if alive (and
                                         # whether it has said `standby`), else a new one
    hot = standbys.take_hot()      # a built process and its hello, or None while none is ready
    standbys.watch()               # the supervisor thread, every poll
    standbys.status()              # for `tempo status`
    standbys.close()

spare: a process that has imported Python, torch and Tempo and waits for `build`; a restart
hands it the build and saves the seconds the imports take. While it waits it reads the policy
onto the host where the build would read it there (a CPU policy, or reference weights kept on
the host) and imports torch's compiler, then says `prepared`: a restart's build then reads
nothing. It holds no GPU memory (host memory for the weights it read ahead).

hot: a process that has built the policy (loaded, warmed up, start-up checked and, on a GPU,
captured: everything the serving process did before its `hello`) and waits for the observation
slots (`process_server`). The supervisor hands it the slots the moment the serving process
dies, hangs or reports fatal: attaching them takes milliseconds, where a build takes seconds to
minutes. It costs as much memory as the serving process; what it reported of its own memory in
its `hello` (and its resident host memory now) is in `status()`. It is built in the background
(`HotBuild`, a thread waiting for its hello), starting `nice` steps below the control process
like every child (process_spawner); one whose build fails or that dies is built again after
REBUILD_AFTER_S.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from typing import Any, Literal

from controller.errors import PolicyError
from controller.link.process_spawner import (
    Child,
    Spawner,
    close_channel,
    end_child,
    expect,
    has_news,
    send_at_start,
)
from controller.process_protocol.process_channel import ChannelError
from controller.process_protocol.process_messages import (
    Build,
    Hello,
    MessageError,
    Prepared,
    Standby,
    decode,
)

log = logging.getLogger(__name__)

StandbyMode = Literal["off", "spare", "hot"]
STANDBY_GRACE_S = 0.2  # what a spare is given to exit at shutdown: it has nothing to finish
HOT_GRACE_S = 2.0  # a built one frees its device memory on the way out
REBUILD_AFTER_S = 10.0  # a hot standby that failed is built again after this long


def standby_mode(standby: bool | str) -> StandbyMode:
    """supervision.standby, or the older bool (True: spare, False: off)."""
    if standby is True:
        return "spare"
    if standby is False:
        return "off"
    if standby not in ("off", "spare", "hot"):
        raise ValueError(f"{standby!r} is not a standby mode (off, spare or hot)")
    return standby  # type: ignore[return-value]


def resident_bytes(pid: int) -> int | None:
    """A process's resident host memory (VmRSS), read from /proc; None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class HotBuild:
    """One inference process told to build at once, its `hello` awaited by a thread of its own
    (so the supervisor goes on watching the serving process meanwhile)."""

    def __init__(self, spawner: Spawner, start_timeout_s: float) -> None:
        self.child: Child = spawner.spawn()  # OSError when no process can be spawned
        self.hello: Hello | None = None
        self.error: str | None = None
        self.started = time.monotonic()
        self.done = threading.Event()
        self._cancel = threading.Event()
        self._timeout_s = start_timeout_s
        self._thread = threading.Thread(target=self._build, name="tempo-standby-build")
        self._thread.daemon = True
        self._thread.start()

    @property
    def pid(self) -> int:
        return self.child[1].pid

    def _build(self) -> None:
        link, process = self.child
        try:
            expect(link, process, Standby, self._timeout_s, self._cancel)
            send_at_start(link, Build())
            self.hello = expect(link, process, Hello, self._timeout_s, self._cancel)
        except PolicyError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. a malformed message: this build failed
            self.error = f"the standby inference process failed while building ({exc})"
        finally:
            self.done.set()

    def wait(self, timeout_s: float) -> Hello:
        """Its hello once built; PolicyError with the reason when the build failed."""
        if not self.done.wait(timeout_s):
            raise PolicyError(f"the new inference process was not built within {timeout_s:.0f} s")
        if self.hello is None:
            raise PolicyError(self.error or "the new inference process stopped while building")
        return self.hello

    @property
    def ready(self) -> bool:
        """Built, and still alive."""
        return self.hello is not None and self.child[1].poll() is None

    def cancel_build(self) -> None:
        """Stop waiting for the build (the thread ends)."""
        self._cancel.set()
        self._thread.join(timeout=1.0)

    def cancel(self, grace_s: float = HOT_GRACE_S) -> None:
        """Stop the build (or the built process) and wait for it to end."""
        self.cancel_build()
        end_child(self.child, grace_s)


class Standbys:
    """The one standing-by process of `mode` (see the module doc). Its methods are called by
    the supervisor thread (and by start and stop, which never run beside it)."""

    def __init__(self, spawner: Spawner, mode: StandbyMode, start_timeout_s: float) -> None:
        self.spawner = spawner
        self.mode = mode
        self.start_timeout_s = start_timeout_s
        self._lock = threading.Lock()  # stop() may take them from another thread
        self._spare: Child | None = None
        self._spare_ready = False  # it said `standby` (imports done)
        self._spare_prepared: Prepared | None = None  # its wait's work done (read ahead?)
        self._spare_broken = False  # it said something malformed: a fresh one is spawned
        self._hot: HotBuild | None = None
        self._hot_failure: str | None = None
        self._rebuild_at: float | None = None
        self._closed = False

    # ---- spare ---------------------------------------------------------------------------

    def take_spare(self) -> tuple[Child, bool]:
        """The spare process if it is still alive, else a freshly spawned one (either waits
        for the build), and whether it has said `standby` already (heard by `watch`; else it
        is still to come)."""
        with self._lock:
            spare, self._spare = self._spare, None
            said, broken = self._spare_ready, self._spare_broken
            self._spare_ready, self._spare_prepared, self._spare_broken = False, None, False
        if spare is not None and spare[1].poll() is None and not broken:
            return spare, said
        if spare is not None:
            why = "said something malformed" if broken else f"had exited (code {spare[1].poll()})"
            log.warning("the standby inference process %s", why)
            end_child(spare, 0.0)
        return self.spawner.spawn(), False

    # ---- hot -----------------------------------------------------------------------------

    @property
    def hot_pending(self) -> bool:
        """A hot standby is built or building (and alive)."""
        hot = self._hot
        return hot is not None and hot.child[1].poll() is None and not hot.error

    def take_hot(
        self, wait_s: float = 0.0, stop: threading.Event | None = None
    ) -> tuple[Child, Hello] | None:
        """The built standby and its hello, taken (the caller attaches or ends it); one still
        building is waited for up to `wait_s` (or until `stop`): it was started earlier than
        any fresh one could be. None when there is none, or it failed or did not finish."""
        hot = self._hot
        if hot is None:
            return None
        deadline = time.monotonic() + wait_s
        while not hot.done.wait(0.05):
            if time.monotonic() > deadline or (stop is not None and stop.is_set()):
                return None
        with self._lock:
            if self._hot is not hot or not hot.ready or hot.hello is None:
                return None
            self._hot = None
        return hot.child, hot.hello

    # ---- both ----------------------------------------------------------------------------

    def refill(self) -> None:
        """Start the next standby, unless one is there (called once a process serves)."""
        if self.mode == "off" or self._closed:
            return
        try:  # spawned outside our lock: a spawn takes milliseconds
            if self.mode == "spare" and self._spare is None:
                spare: Child | None = self.spawner.spawn()
                with self._lock:
                    if not self._closed:
                        self._spare, spare = spare, None
                end_child(spare, 1.0)
            elif self.mode == "hot" and self._hot is None:
                hot: HotBuild | None = HotBuild(self.spawner, self.start_timeout_s)
                with self._lock:
                    if not self._closed:
                        self._hot, hot = hot, None
                        self._rebuild_at = None
                if hot is not None:
                    hot.cancel(STANDBY_GRACE_S)
        except OSError as exc:  # the serving process is fine: go on without one
            log.warning("no standby inference process (%s); a restart will start a fresh one",
                        exc)  # fmt: skip
            self._rebuild_at = time.monotonic() + REBUILD_AFTER_S

    def watch(self) -> None:
        """Note a spare's readiness; end a hot standby that failed or died, and build the next
        one after REBUILD_AFTER_S."""
        spare = self._spare
        if spare is not None and self._spare_prepared is None and not self._spare_broken:
            self._hear_spare(spare)
        hot = self._hot
        if hot is not None and hot.done.is_set() and not hot.ready:
            code = hot.child[1].poll()
            why = hot.error or f"it exited with code {code}"
            log.warning("the hot standby inference process (pid %s) failed: %s; building "
                        "another in %.0f s", hot.pid, why, REBUILD_AFTER_S)  # fmt: skip
            with self._lock:
                self._hot = None
            self._hot_failure = why
            self._rebuild_at = time.monotonic() + REBUILD_AFTER_S
            hot.cancel(0.0)
        if self._rebuild_at is not None and time.monotonic() >= self._rebuild_at:
            self._rebuild_at = None
            self.refill()

    def _hear_spare(self, spare: Child) -> None:
        """Take what the spare has said: `standby` (imported), then `prepared` (its wait's
        work done). Never raises: a malformed message marks it for replacing at the restart."""
        link = spare[0]
        while has_news(link) and not link.closed:
            try:
                data = link.receive(timeout_ms=0)
                if data is None:
                    return
                message = decode(data)
            except (ChannelError, MessageError) as exc:
                log.warning("the standby inference process said something malformed (%s)", exc)
                self._spare_broken = True
                return
            if isinstance(message, Standby):
                self._spare_ready = True
            elif isinstance(message, Prepared):
                self._spare_prepared = message
                return

    def replace(self, spawner: Spawner) -> None:
        """From now on standbys are spawned by `spawner` (a swapped policy's config): the one
        waiting, built from the old config, is ended and the next one started."""
        self.discard()
        self.spawner = spawner
        self.refill()

    def discard(self) -> None:
        """End the standby there is, if any."""
        with self._lock:
            spare, self._spare = self._spare, None
            hot, self._hot = self._hot, None
            self._spare_ready, self._spare_prepared = False, None
        if spare is not None:
            end_child(spare, STANDBY_GRACE_S)
        if hot is not None:
            hot.cancel()

    def close(self) -> list[tuple[subprocess.Popen[bytes], float]]:
        """No new standby from now on; the one there is asked to stop (its channel closed) and
        returned with the grace it gets to exit, for the caller to wait for (`wait_or_kill`)
        once the serving process is asked too, so that both exit at once."""
        with self._lock:
            self._closed = True
            spare, self._spare = self._spare, None
            hot, self._hot = self._hot, None
        ending: list[tuple[subprocess.Popen[bytes], float]] = []
        if spare is not None:  # it holds nothing (imports only): one still importing is killed
            close_channel(spare[0], ask_to_stop=True)
            ending.append((spare[1], STANDBY_GRACE_S))
        if hot is not None:
            hot.cancel_build()
            close_channel(hot.child[0], ask_to_stop=True)
            ending.append((hot.child[1], HOT_GRACE_S))
        return ending

    @property
    def pid(self) -> int | None:
        spare, hot = self._spare, self._hot
        if spare is not None:
            return spare[1].pid
        return hot.pid if hot is not None else None

    def status(self) -> dict[str, Any]:
        """standby (the mode), standby_pid, standby_ready (a spare: imported and prepared; a
        hot one: built), for a spare whether it read the policy ahead (`standby_read_ahead`),
        and for a hot one what it reported of its own memory once built (`standby_memory`) and
        why the last one failed."""
        hot = self._hot
        if self.mode == "hot":
            ready = hot is not None and hot.ready
            memory: dict[str, Any] | None = None
            if hot is not None:
                reported = (hot.hello.status if hot.hello is not None else {}).get("memory")
                memory = {**(reported or {}), "host_resident_bytes": resident_bytes(hot.pid)}
        else:
            ready = self._spare_prepared is not None if self.mode == "spare" else False
            memory = None
        prepared = self._spare_prepared
        return {
            "standby": self.mode,
            "standby_pid": self.pid,
            "standby_ready": ready if self.mode != "off" else None,
            "standby_read_ahead": prepared.read_ahead if prepared is not None else None,
            "standby_memory": memory,
            "standby_failure": self._hot_failure if self.mode == "hot" else None,
        }
