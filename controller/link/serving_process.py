"""The serving inference process as the control side holds it: one record, changed only here.

    record = ServingProcess(spawner, config_json, hang_timeout_s=5.0, batch_sizes=(1,))
    with record.requests() as channel: ...        # its request channel, held (None while down)
    with record.routes() as routes: ...           # and a swap's new process's (episode_swap)
    record.attach(child, hello, hand)             # a built process, handed the slots, attached
    record.resume()                               # it serves (robots hold one tick: `epoch`)
    record.fail("hung", "no heartbeat for 6 s")   # it does not any more (restart_ledger)
    old = record.detach()                         # out of use, its channel closed; still to end

RemotePolicy owns one; its supervisor (supervision), its episode-start switch (episode_swap)
and RemotePolicy itself read it and change it through these methods, never by setting its
attributes. The channel, the process and the slots change under `lock`, which the control loop
takes to send (keep holds short); a restart, a take-over or a swap's switch holds
`switch_lock` throughout. This module imports no torch.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from controller.errors import PolicyError
from controller.link.incoming import Incoming, Routes
from controller.link.process_spawner import (
    Child,
    Spawner,
    close_channel,
    expect,
    send_at_start,
    wait_or_kill,
)
from controller.link.request_channel import RequestChannel, StepReply
from controller.link.restart_ledger import RestartLedger
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import (
    AttachSlots,
    ChunkReply,
    Hello,
    Ready,
    RequestFailed,
)
from policies.base import PolicySpec

HANG_STEPS = 20  # a step this many times the slowest tier's start-up step time is a hang
SLOT_COUNT = 2  # per robot of the largest batch: one batch in flight, a torn read detectable
READY_TIMEOUT_S = 60.0  # a built process attaching (and pinning) the slots

# How a built process is handed its observation slots: it says whether it pinned them.
HandSlots = Callable[[Child, FrameSlots], bool]


def hand_slots(
    child: Child, slots: FrameSlots, stop: threading.Event, timeout_s: float = READY_TIMEOUT_S
) -> bool:
    """Hand a built process (it said `hello`) the observation slots and wait (up to
    `timeout_s`, or until `stop`) for `ready`; whether it pinned them."""
    link, process = child
    attach = AttachSlots(str(slots.path), slots.count)
    send_at_start(link, attach, fds=[slots.fileno()])  # the memory itself, no file
    return expect(link, process, Ready, timeout_s, stop).pinned


class ServingProcess:
    """The serving process's state: its channel and process, its observation slots and request
    channel, the spec and status it reported, the config it was built from, and during a swap
    at episode starts the new process beside it (see the module doc)."""

    def __init__(
        self,
        spawner: Spawner,
        config_json: str | None,
        *,
        hang_timeout_s: float,
        batch_sizes: Sequence[int],
    ) -> None:
        self.hang_timeout_s = hang_timeout_s
        self.slot_count = SLOT_COUNT * max(batch_sizes)
        self.lock = threading.Lock()  # the channel: one request at a time, or a change
        self.switch_lock = threading.Lock()  # a restart, a take-over or a swap: one at a time
        self.stop_requested = threading.Event()  # stop(): nothing switches to a new process
        self.ledger = RestartLedger()  # restarts and their causes, for status
        self._spawner = spawner
        self._config_json = config_json
        self._link: ProcessChannel | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._slots: FrameSlots | None = None
        self._spec: PolicySpec | None = None
        self._status: dict[str, Any] = {}  # the runner's, as the process last reported it
        self._memory: dict[str, Any] | None = None  # what the process said of its own
        self._channel: RequestChannel | None = None  # one per process
        self._incoming: Incoming | None = None  # a swap's new process beside it (episode_swap)
        self._pinned = False
        self._epoch = 0  # processes that have served (serving_watch)
        self._last_step_ns: int | None = None
        self._serving = threading.Event()
        self._failed = threading.Event()  # the process is gone: requests stop waiting

    # ---- what it is now ------------------------------------------------------------------

    @property
    def spawner(self) -> Spawner:
        """Spawns this policy's processes (restarts, standbys), a swapped-in config's once
        switched."""
        return self._spawner

    @property
    def config_json(self) -> str | None:
        return self._config_json

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._process

    @property
    def slots(self) -> FrameSlots | None:
        return self._slots

    @property
    def spec(self) -> PolicySpec | None:
        return self._spec

    @property
    def status(self) -> dict[str, Any]:
        """The runner's status as the process last reported it (its hello, then its chunks)."""
        return self._status

    @property
    def memory(self) -> dict[str, Any] | None:
        return self._memory

    @property
    def channel(self) -> RequestChannel | None:
        return self._channel

    @property
    def incoming(self) -> Incoming | None:
        return self._incoming

    @property
    def pinned(self) -> bool:
        """The process pinned its observation slots for DMA."""
        return self._pinned

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def last_step_ns(self) -> int | None:
        """The last step as the inference process timed it (request taken -> chunk ready)."""
        return self._last_step_ns

    @property
    def serving(self) -> bool:
        return self._serving.is_set()

    @property
    def failed(self) -> bool:
        """It has failed (or is stopped) and not served since: requests stop waiting."""
        return self._failed.is_set()

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

    @contextlib.contextmanager
    def requests(self) -> Iterator[RequestChannel | None]:
        """The request channel, held: nothing replaces or closes it until the block ends. None
        while the process is down or restarting."""
        with self.lock:
            yield self._channel if self._serving.is_set() else None

    @contextlib.contextmanager
    def routes(self) -> Iterator[Routes]:
        """The serving channel (None while down) and a swap's incoming one, held."""
        with self.lock:
            serving = self._channel if self._serving.is_set() else None
            incoming = self._incoming
            yield Routes(serving, incoming.channel if incoming is not None else None)

    def note_reply(self, reply: StepReply) -> None:
        """A step reply as it is taken (every request channel's `on_reply`): a chunk's status
        and step time are kept; a `fatal` reply (a poisoned CUDA context) fails the process."""
        if isinstance(reply, ChunkReply):
            if reply.status is not None:
                self._status = reply.status
            self._last_step_ns = reply.step_ns
        elif isinstance(reply, RequestFailed) and reply.cause == "fatal":
            self.fail("fatal", reply.error)

    # ---- changes ---------------------------------------------------------------------------

    def bind(self, child: Child) -> None:
        """A starting process is this policy's from now on (ended by `end`), before it serves."""
        with self.lock:
            self._link, self._process = child

    def attach(self, child: Child, hello: Hello, hand: HandSlots, new_spec: bool = False) -> None:
        """A built process (it said `hello`) is handed the observation slots (`hand`) and its
        request channel opened; `resume` then serves from it. `new_spec`: a swap's, checked by
        the caller; else it must be the spec served so far."""
        self.bind(child)
        spec = hello.spec
        if self._spec is not None and spec != self._spec and not new_spec:
            raise PolicyError("the restarted inference process serves a different policy spec")
        self._spec = spec
        self._status = hello.status
        self._memory = hello.status.get("memory")
        if self._slots is None:
            self._slots = FrameSlots.create(spec, self.slot_count)
        self._slots.reset()  # a fresh header per process: nothing scribbled there outlives it
        self._pinned = hand(child, self._slots)
        channel = RequestChannel(
            child[0],
            self._slots,
            spec,
            on_reply=self.note_reply,
            checkpoint=hello.status.get("checkpoint"),
        )
        with self.lock:  # a new process has attached no driver ring yet
            self._channel = channel

    def resume(self) -> None:
        """Serve from the process just attached."""
        self._epoch += 1  # the control loop drops every plan once (serving_watch)
        self._failed.clear()
        self._serving.set()

    def hold(self) -> None:
        """Take no more requests for now (a switch follows; those in flight fail)."""
        self._serving.clear()

    def new_epoch(self) -> None:
        """Robots hold a tick and drop their plans (a swap's new process was aborted)."""
        self._epoch += 1

    def fail(self, cause: str, detail: str) -> None:
        """The process failed (`cause`, said in `detail`): serving ends, the ledger records
        it, the supervisor restarts it or takes over. Once per failure."""
        if self._failed.is_set():
            return
        self._serving.clear()
        self._failed.set()
        self.ledger.failed(cause, detail)

    def stop(self) -> None:
        """At the policy's stop: nothing serves or switches any more."""
        self.stop_requested.set()
        self._serving.clear()
        self._failed.set()

    def detach(self) -> subprocess.Popen[bytes] | None:
        """Take the process out of use (its channel closed); returns it, still to be ended.
        The lock is held only meanwhile: the control loop takes it to send."""
        with self.lock:
            process, link = self._process, self._link
            self._process = self._link = self._channel = None
            if link is not None:
                link.close()
        return process

    def end(self, polite: bool) -> None:
        """Stop the process (asked to first when `polite`) and close its channel; a killed
        GPU process can take a while to exit."""
        with self.lock:
            process, link = self._process, self._link
            self._process = self._link = self._channel = None
            if link is not None:
                alive = process is not None and process.poll() is None
                close_channel(link, ask_to_stop=polite and alive)
        if process is not None:
            wait_or_kill(process, 2.0 if polite else 0.0)

    def close_slots(self) -> None:
        """At stop, once the process has ended: free the observation slots."""
        with self.lock:
            slots, self._slots = self._slots, None
        if slots is not None:
            slots.close()

    def build_from(self, spawner: Spawner, config_json: str) -> None:
        """Restarts and standbys build from `config_json` (a swapped-in policy's) from now on."""
        self._spawner, self._config_json = spawner, config_json

    # ---- a swap's new process beside it (episode_swap) ------------------------------------

    def begin_incoming(self, incoming: Incoming) -> None:
        """Robots at their episode start are served by `incoming` from now on."""
        with self.lock:
            self._incoming = incoming

    def drop_incoming(self, ask_to_stop: bool) -> Incoming | None:
        """A swap's new process out of use (its channel closed); returns it, still to end."""
        with self.lock:
            incoming, self._incoming = self._incoming, None
            if incoming is not None:
                close_channel(incoming.channel.link, ask_to_stop=ask_to_stop)
        return incoming

    def adopt(self, incoming: Incoming) -> subprocess.Popen[bytes] | None:
        """The swap's new process becomes the serving one, in one hold of the lock (the feed
        never sees neither); returns the old process, its channel closed, still to be ended."""
        with self.lock:
            old, link, old_slots = self._process, self._link, self._slots
            if link is not None:
                link.close()
            self._link, self._process = incoming.child
            self._channel, self._slots = incoming.channel, incoming.slots
            self._incoming = None
        if old_slots is not None:
            old_slots.close()
        self._spec = incoming.hello.spec
        self._status = incoming.hello.status
        self._memory = incoming.hello.status.get("memory")
        self._pinned = incoming.pinned
        self.build_from(incoming.spawner, incoming.config_json)
        return old
