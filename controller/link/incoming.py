"""A swap's new process serving beside the old one, and where a request may go meanwhile.

    routes = Routes(serving_channel, incoming_channel)   # what the feed may send to now
    incoming = Incoming(child, hello, slots, channel, pinned, spawner, config_json)
    incoming.count(on_new=2, on_old=0)                    # the feed's count: all moved
    incoming.end("every robot moved at its episode start")

The episode-start switch (episode_swap) makes an Incoming; the serving process's record
(serving_process) holds it beside the serving channel, so that both are handed out under one
lock (`ServingProcess.routes`). This module imports no torch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from controller.link.process_spawner import Child, Spawner
from controller.link.request_channel import RequestChannel
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_messages import Hello


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

    def count(self, on_new: int, on_old: int) -> None:
        """The feed's count of robots on the new process and on the old one; none left on the
        old one: every robot has moved."""
        self.on_new, self.on_old = on_new, on_old
        if on_old == 0:
            self.all_moved.set()

    def end(self, outcome: str, failure: str | None = None) -> None:
        """The swap ended: `outcome` says how, `failure` why it was aborted (None: done)."""
        self.outcome, self.failure = outcome, failure
        self.ended.set()
