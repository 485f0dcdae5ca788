"""A swap that moves each robot at its next episode start (`tempo swap` without --now).

    switch = EpisodeSwitch(record, standbys)     # record: the serving process (serving_process)
    incoming = switch.begin(child, hello, spawner, config_json)   # the swap's, under switch_lock
    switch.swap_progress(channel, on_new=2, on_old=0)             # the feed's count of robots
    switch.finish(incoming)                      # the swap's, once no robot is on the old one
    switch.abandon(incoming, "cancelled")        # or: replaced, cancelled, timed out

Between `begin` and the end of the swap two processes serve: the old one (the record's channel,
still "the serving process") and the new one (the record's `incoming`, with observation slots
of its own, so that neither process reads or beats in the other's). The feed (remote_feed)
sends a robot's request to the new one from its episode start on (a robot that connects now
starts an episode too), else to the one that served it last, and counts the robots on each.
The swap ends in one of four ways:

- every robot bound to the old process has moved or left: the new one becomes the serving
  process (`finish`), the old one is asked to stop; nothing holds;
- the old process fails: the new one takes over at once, as a hot standby does (`promote`, on
  the supervisor thread): every robot holds a tick and starts afresh;
- the new process fails (exits, or stops beating): the swap is aborted (`check`), the old one
  serves every robot again; the robots hold a tick, so that no robot goes on with a plan of the
  new policy;
- the swap is replaced by a later one, cancelled (`tempo swap --cancel`) or times out (a robot
  that never starts an episode; policy_swap decides which): `abandon`, as an abort, its process
  asked to stop first.

This module imports no torch (it runs in the control process).
"""

from __future__ import annotations

import logging
import time

from controller.link.incoming import Incoming
from controller.link.process_spawner import Child, Spawner, end_child, wait_or_kill
from controller.link.request_channel import RequestChannel
from controller.link.serving_process import ServingProcess, hand_slots
from controller.link.standbys import Standbys
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_messages import Hello

log = logging.getLogger(__name__)


class EpisodeSwitch:
    """The episode-start swaps of one serving process (see the module doc)."""

    def __init__(self, record: ServingProcess, standbys: Standbys) -> None:
        self._record = record
        self._standbys = standbys

    @property
    def swapping(self) -> bool:
        """A new process serves robots at their episode start beside the old one."""
        return self._record.incoming is not None

    def swap_progress(self, channel: RequestChannel, on_new: int, on_old: int) -> None:
        """The feed's count of robots on the new process (`channel`) and on the old one; none
        left on the old one ends the swap (the swap thread switches)."""
        incoming = self._record.incoming
        if incoming is None or incoming.channel is not channel:
            return  # counted for a swap that has ended meanwhile
        incoming.count(on_new, on_old)

    def begin(self, child: Child, hello: Hello, spawner: Spawner, config_json: str) -> Incoming:
        """Hand the built process slots of its own and serve robots at their episode start
        from it (under `switch_lock`, while serving; the caller ends the process on an error)."""
        record = self._record
        slots = FrameSlots.create(hello.spec, record.slot_count)
        # Its header laid out with a heartbeat of now, as the serving process's slots are:
        # else `check` reads a beat of 0 until the process first beats and aborts the swap.
        slots.reset()
        try:
            pinned = hand_slots(child, slots, record.stop_requested)
            channel = RequestChannel(
                child[0],
                slots,
                hello.spec,
                on_reply=record.note_reply,
                checkpoint=hello.status.get("checkpoint"),
            )
            # The driver rings the serving process reads in place, attached (and pinned) by the
            # new one now, before any robot moves: else a robot's first request to it, the
            # first of its episode, waits behind that attach and has its frames copied (a tick
            # later on an H200).
            with record.lock:  # the loop changes the serving channel's rings under this lock
                serving = record.channel
                rings = [ring for _, ring in serving.rings.values()] if serving is not None else []
            channel.attach_rings(rings)
        except BaseException:
            slots.close()
            raise
        incoming = Incoming(child, hello, slots, channel, pinned, spawner, config_json)
        record.begin_incoming(incoming)
        return incoming

    def check(self) -> None:
        """Abort the swap if the new process exited or stopped beating (supervisor thread)."""
        record = self._record
        incoming = record.incoming
        if incoming is None:
            return
        code = incoming.child[1].poll()
        silent_s = (time.monotonic_ns() - incoming.slots.last_beat_ns()) / 1e9
        if code is not None:
            why = f"the new inference process exited with code {code}"
        elif silent_s > record.hang_timeout():
            why = f"the new inference process sent no heartbeat for {silent_s:.1f} s"
        else:
            return
        record.drop_incoming(ask_to_stop=False)
        end_child(incoming.child, 0.0)
        self._back_to_old(incoming)
        log.warning("swap aborted: %s; the old policy serves every robot again", why)
        incoming.end("aborted", f"{why}; every robot is served by the old policy again")

    def abandon(self, incoming: Incoming, why: str) -> bool:
        """End the swap `incoming` serves although it has not failed (replaced, cancelled or
        timed out, `why`; the swap's thread, under `switch_lock`, which says so): its process
        is asked to stop, robots on it return to the old one. False if it ended otherwise
        meanwhile."""
        record = self._record
        if record.incoming is not incoming:
            return False
        record.drop_incoming(ask_to_stop=True)
        wait_or_kill(incoming.child[1], 2.0)
        self._back_to_old(incoming)
        incoming.end("aborted", why)
        return True

    def _back_to_old(self, incoming: Incoming) -> None:
        """After the new process is out of use: its slots freed, and the robots it served
        hold a tick and drop its plans (serving_watch) on their way back to the old one."""
        incoming.slots.close()
        self._record.new_epoch()

    def promote(self) -> bool:
        """The serving process failed during a swap: the new one serves every robot from now
        on, as a hot standby takes over (supervisor thread). False when no swap is under way."""
        record = self._record
        incoming = record.incoming
        if incoming is None:
            return False
        failed = record.adopt(incoming)
        if failed is not None:
            failed.kill()
            wait_or_kill(failed, 0.0)
        record.ledger.swap_took_over(incoming.pid)
        record.resume()  # every robot holds a tick and starts afresh on the new process
        self._standbys.replace(incoming.spawner)
        incoming.end("the old process failed during the swap; every robot moved at once")
        return True

    def finish(self, incoming: Incoming) -> bool:
        """No robot is left on the old process: the new one is the serving process, the old
        one is asked to stop (the swap's thread, under `switch_lock`). False if the swap ended
        otherwise meanwhile."""
        record = self._record
        if record.incoming is not incoming or not record.serving:
            return False
        old = record.adopt(incoming)
        if old is not None:  # its channel is closed: it exits on its own (or is killed)
            wait_or_kill(old, 2.0)
        self._standbys.replace(incoming.spawner)
        incoming.end("every robot moved at its episode start")
        return True

    def end(self) -> None:
        """At stop: end the new process of a swap under way."""
        incoming = self._record.drop_incoming(ask_to_stop=True)
        if incoming is not None:
            wait_or_kill(incoming.child[1], 2.0)
            incoming.slots.close()
            incoming.end("aborted", "the daemon stopped during the swap")
