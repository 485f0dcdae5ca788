"""A swap that moves each robot at its next episode start (`tempo swap` without --now).

    class RemotePolicy(EpisodeSwitch): ...      # the state is RemotePolicy's (its __init__)
    policy._begin_incoming(child, hello, spawner, config_json)   # the swap's, under `_switch`
    with policy.routes() as routes: ...          # the feed: routes.serving, routes.incoming
    policy.swap_progress(routes.incoming, on_new=2, on_old=0)    # the feed's count of robots
    policy._finish_incoming(incoming)            # the swap's, once no robot is on the old one

Between `_begin_incoming` and the end of the swap two processes serve: the old one (`_channel`,
still "the serving process") and the new one (`_incoming`, with observation slots of its own,
so that neither process reads or beats in the other's). The feed (remote_feed) sends a robot's
request to the new one from its episode start on (a robot that connects now starts an episode
too), else to the one that served it last, and counts the robots on each. The swap ends in one
of three ways:

- every robot bound to the old process has moved or left: the new one becomes the serving
  process (`_finish_incoming`), the old one is asked to stop; nothing holds;
- the old process fails: the new one takes over at once, as a hot standby does
  (`_promote_incoming`, on the supervisor thread): every robot holds a tick and starts afresh;
- the new process fails (exits, or stops beating): the swap is aborted (`_check_incoming`), the
  old one serves every robot again; the robots hold a tick, so that no robot goes on with a plan
  of the new policy.

This module imports no torch (it runs in the control process).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from controller.link.process_spawner import Child, Spawner, close_channel, end_child, wait_or_kill
from controller.link.request_channel import RequestChannel
from controller.link.supervision import SLOT_COUNT, ProcessSupervision
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_messages import Hello

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Routes:
    """The channels a request may go to now: the serving process's (None while it is down)
    and, during a swap at episode starts, the new process's."""

    serving: RequestChannel | None
    incoming: RequestChannel | None = None

    @property
    def live(self) -> tuple[RequestChannel, ...]:
        return tuple(c for c in (self.serving, self.incoming) if c is not None)


@dataclass(eq=False)
class Incoming:
    """The new process of a swap at episode starts, serving beside the old one."""

    child: Child
    hello: Hello
    slots: FrameSlots
    channel: RequestChannel
    pinned: bool
    spawner: Spawner
    config_json: str
    on_new: int = 0  # robots the new process serves (the feed's count)
    on_old: int | None = None  # robots still bound to the old one (None: not counted yet)
    all_moved: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None  # why the swap was aborted
    outcome: str = ""  # how it ended

    @property
    def pid(self) -> int:
        return self.child[1].pid

    def end(self, outcome: str, failure: str | None = None) -> None:
        """The swap ended: `outcome` says how, `failure` why it was aborted (None: done)."""
        self.outcome, self.failure = outcome, failure
        self.ended.set()


class EpisodeSwitch(ProcessSupervision):
    """The episode-start swap half of RemotePolicy (see the module doc)."""

    _incoming: Incoming | None

    @contextlib.contextmanager
    def routes(self) -> Iterator[Routes]:
        """The serving channel (None while down or restarting) and the incoming one, held: no
        restart or switch replaces or closes them until the block ends (keep it short)."""
        with self._lock:
            serving = self._channel if self._serving.is_set() else None
            incoming = self._incoming
            yield Routes(serving, incoming.channel if incoming is not None else None)

    @property
    def swapping(self) -> bool:
        """A new process serves robots at their episode start beside the old one."""
        return self._incoming is not None

    def swap_progress(self, channel: RequestChannel, on_new: int, on_old: int) -> None:
        """The feed's count of robots on the new process (`channel`) and on the old one; none
        left on the old one ends the swap (the swap thread switches)."""
        incoming = self._incoming
        if incoming is None or incoming.channel is not channel:
            return  # counted for a swap that has ended meanwhile
        incoming.on_new, incoming.on_old = on_new, on_old
        if on_old == 0:
            incoming.all_moved.set()

    def _begin_incoming(
        self, child: Child, hello: Hello, spawner: Spawner, config_json: str
    ) -> Incoming:
        """Hand the built process slots of its own and serve robots at their episode start
        from it (under `_switch`, while serving; the caller ends the process on an error)."""
        slots = FrameSlots.create(hello.spec, SLOT_COUNT * max(self._batching[0]))
        try:
            pinned = self._hand_slots(child, slots)
        except BaseException:
            slots.close()
            raise
        channel = RequestChannel(child[0], slots, hello.spec)
        # The driver rings the serving process reads in place, attached (and pinned) by the new
        # one now, before any robot moves: else a robot's first request to it, the first of its
        # episode, waits behind that attach and has its frames copied (a tick later on an H200).
        with self._lock:  # the loop changes the serving channel's rings under this lock
            serving = self._channel
            rings = [ring for _, ring in serving.rings.values()] if serving is not None else []
        try:
            channel.attach_rings(rings)
        except BaseException:
            slots.close()
            raise
        incoming = Incoming(child, hello, slots, channel, pinned, spawner, config_json)
        with self._lock:
            self._incoming = incoming
        return incoming

    def _check_incoming(self) -> None:
        """Abort the swap if the new process exited or stopped beating (supervisor thread)."""
        incoming = self._incoming
        if incoming is None:
            return
        code = incoming.child[1].poll()
        silent_s = (time.monotonic_ns() - incoming.slots.last_beat_ns()) / 1e9
        if code is not None:
            why = f"the new inference process exited with code {code}"
        elif silent_s > self.hang_timeout():
            why = f"the new inference process sent no heartbeat for {silent_s:.1f} s"
        else:
            return
        with self._lock:
            self._incoming = None
            close_channel(incoming.channel.link, ask_to_stop=False)
        end_child(incoming.child, 0.0)
        incoming.slots.close()
        self.epoch += 1  # robots it served hold a tick and drop its plans (serving_watch)
        log.warning("swap aborted: %s; the old policy serves every robot again", why)
        incoming.end("aborted", f"{why}; every robot is served by the old policy again")

    def _promote_incoming(self) -> bool:
        """The serving process failed during a swap: the new one serves every robot from now
        on, as a hot standby takes over (supervisor thread). False when no swap is under way."""
        incoming = self._incoming
        if incoming is None:
            return False
        failed = self._adopt(incoming)
        if failed is not None:
            failed.kill()
            wait_or_kill(failed, 0.0)
        self._ledger.swap_took_over(incoming.pid)
        self._resume()  # every robot holds a tick and starts afresh on the new process
        self._standbys.replace(incoming.spawner)
        incoming.end("the old process failed during the swap; every robot moved at once")
        return True

    def _finish_incoming(self, incoming: Incoming) -> bool:
        """No robot is left on the old process: the new one is the serving process, the old
        one is asked to stop (the swap's thread, under `_switch`). False if the swap ended
        otherwise meanwhile."""
        if self._incoming is not incoming or not self._serving.is_set():
            return False
        old = self._adopt(incoming)
        if old is not None:  # its channel is closed: it exits on its own (or is killed)
            wait_or_kill(old, 2.0)
        self._standbys.replace(incoming.spawner)
        incoming.end("every robot moved at its episode start")
        return True

    def _end_incoming(self) -> None:
        """At stop: end the new process of a swap under way."""
        with self._lock:
            incoming, self._incoming = self._incoming, None
            if incoming is not None:
                close_channel(incoming.channel.link, ask_to_stop=True)
        if incoming is not None:
            wait_or_kill(incoming.child[1], 2.0)
            incoming.slots.close()
            incoming.end("aborted", "the daemon stopped during the swap")

    def _adopt(self, incoming: Incoming) -> subprocess.Popen[bytes] | None:
        """The new process becomes the serving one, in one hold of the channel lock (the feed
        never sees neither); returns the old process, its channel closed, still to be ended."""
        with self._lock:
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
        self.pinned = incoming.pinned
        self._spawner, self._config_json = incoming.spawner, incoming.config_json
        return old
