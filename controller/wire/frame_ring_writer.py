"""The driver's side of frames in place: the ring of frame slots the daemon offered in
`welcome`, which slot comes next, and the slot a camera is writing into (TempoClient's
`frame_buffers`). Only numpy and the standard library (a driver imports this). The ring is the
daemon's sealed memory, opened by its /proc path; memory that is not sealed is refused (frames
then go on the socket), since a file someone truncated would kill the driver with SIGBUS.

The slot rule: the driver writes a slot only while the daemon holds nothing there (`free`),
round robin; a slot is the daemon's from the `obs` that names it (the driver marks it held in
flight, negative, until the daemon's own hold replaces that) until the daemon has finished
with that observation. When the daemon holds every slot, frames go on the socket.

A slot still marked in flight is taken back only when its observation will never be read: the
daemon has read an observation named after it (one connection keeps the order, so the daemon
skipped this one: refused or dropped unread), or nothing was read for UNREAD_GIVE_UP_NS. Never
merely because the daemon reads late: rewriting the slot then would make the daemon drop the
observation still queued for it (`observations_superseded`), and a daemon that stays behind
would drop one observation per slot in every grace period. A slot taken back before the daemon
read it is counted (`overwritten_unread`, the client's `frames_lost_unread`) and logged: the
driver knows that observation is lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from controller.errors import ErrorCode, HandshakeRefused
from controller.wire.slot_ring import SlotRing

log = logging.getLogger(__name__)

# A slot named in an observation stays the daemon's until the daemon has read it; one the daemon
# skipped (refused or dropped the message unread) is taken back once it has read a later one, and
# no sooner than this long after it was named.
IN_FLIGHT_GRACE_NS = 1_000_000_000
# ... and taken back after this long in any case: a daemon that has read nothing of this session
# for so long has stopped the robot (guards.stop_after_ms) or dropped the session.
UNREAD_GIVE_UP_NS = 10_000_000_000
OVERWRITE_LOG_EVERY_NS = 10_000_000_000  # lines about slots taken back unread: at most this often


class FrameRingWriter:
    """Writes one driver's camera frames into the daemon's ring (see the module doc)."""

    def __init__(self, ring: SlotRing, camera_names: list[str], counters: Any = None) -> None:
        """`counters`: the client's ClientCounters (frames_lost_unread), if any."""
        self.ring = ring
        self.counters = counters
        self.next = 0  # the slot to try first
        self._camera_names = camera_names
        self._claimed: dict[str, np.ndarray] | None = None  # buffers() not yet sent
        # Slots named in an observation the daemon may not have read yet: slot -> (naming
        # order, generation, when). Dropped once the daemon has taken it (or it never left).
        self._named: dict[int, tuple[int, int, int]] = {}
        self._names = 0  # observations named so far (their order)
        self._read_past = 0  # the daemon has read the observation of this order (and before)
        self.overwritten_unread = 0  # slots taken back before the daemon read their observation
        self._logged_ns = -OVERWRITE_LOG_EVERY_NS
        self._unlogged = 0

    @classmethod
    def attach(
        cls,
        offer: Any,
        camera_shapes: Mapping[str, tuple[int, int, int]],
        required: bool,
        counters: Any = None,
    ) -> FrameRingWriter | None:
        """Map the ring offered in welcome; its camera parts must be this driver's. None (frames
        on the socket, logged) when it cannot be mapped here, unless it is `required`:
        HandshakeRefused then, as when the ring holds other cameras."""
        try:
            parts = [
                (str(n), tuple(int(d) for d in shape), str(t)) for n, shape, t in offer["parts"]
            ]
            ring = SlotRing.attach(str(offer["path"]), parts, int(offer["slots"]))
        except (KeyError, TypeError, ValueError, OSError) as exc:
            if required:
                raise HandshakeRefused(
                    ErrorCode.FRAME_SLOT.value,
                    f"the daemon's frame ring cannot be used here ({exc}); run the driver as "
                    "the daemon's user on its host, where /proc shows the daemon, or pass "
                    "frames_in_place=False",
                ) from None
            log.warning("frames go through the socket: the daemon's frame ring cannot be "
                        "used here (%s)", exc)  # fmt: skip
            return None
        declared = {name: (shape, "uint8") for name, shape in camera_shapes.items()}
        offered = {name: (shape, dtype) for name, shape, dtype in ring.parts}
        if any(offered.get(name) != part for name, part in declared.items()):
            ring.close()
            raise HandshakeRefused(
                ErrorCode.FRAME_SLOT.value,
                "the daemon's frame ring does not hold this driver's cameras; upgrade the "
                "older of driver and daemon",
            )
        return cls(ring, list(camera_shapes), counters)

    def buffers(self) -> dict[str, np.ndarray] | None:
        """Writable views of the next free slot (the same dict until it is sent), or None
        while the daemon holds every slot."""
        if self._claimed is None:
            index = self.free_slot()
            if index is None:
                return None
            self.ring.begin(index)  # odd: a daemon reading it now would refuse it
            arrays = self.ring.arrays(index)
            self.next = index
            self._claimed = {name: arrays[name] for name in self._camera_names}
        return self._claimed

    def claimed(self, images: Mapping[str, np.ndarray]) -> bool:
        """Whether `images` are the buffers handed out by `buffers()` (frames written in place)."""
        return self._claimed is not None and images is self._claimed

    def free_slot(self) -> int | None:
        """The next slot round robin that the daemon does not hold; else one whose observation
        the daemon will never read (see the module doc); else None (frames go on the socket)."""
        ring = self.ring
        self._note_reads()
        for offset in range(ring.count):
            index = (self.next + offset) % ring.count
            if ring.free(index):
                return index
        now = time.monotonic_ns()
        for offset in range(ring.count):
            index = (self.next + offset) % ring.count
            named = self._named.get(index)
            if named is None:
                continue
            order, _, named_ns = named
            age = now - named_ns
            if age > UNREAD_GIVE_UP_NS or (age > IN_FLIGHT_GRACE_NS and order < self._read_past):
                self._taken_back_unread(index, now)
                return index
        return None

    def _note_reads(self) -> None:
        """Forget the slots the daemon has taken (its hold replaced our mark, and may be
        released since), remembering the latest of them: the daemon has read every message
        up to that one, so a slot named earlier that it did not take was skipped."""
        ring = self.ring
        for index, (order, generation, _) in list(self._named.items()):
            if ring.held(index) != -generation:
                del self._named[index]
                self._read_past = max(self._read_past, order)

    def unsent(self, index: int, generation: int) -> None:
        """The message naming slot `index` never left (not a read by the daemon): free again."""
        named = self._named.get(index)
        if named is not None and named[1] == generation:
            del self._named[index]
        self.ring.unsent(index, generation)

    def _taken_back_unread(self, index: int, now: int) -> None:
        """Slot `index` is rewritten before the daemon read the observation naming it: that
        observation is lost (dropped by the daemon as superseded if it ever arrives). Counted,
        and logged at most every OVERWRITE_LOG_EVERY_NS."""
        self.ring.unsent(index, self._named.pop(index)[1])
        self.overwritten_unread += 1
        if self.counters is not None:
            self.counters.frames_lost_unread += 1
        self._unlogged += 1
        if now - self._logged_ns >= OVERWRITE_LOG_EVERY_NS:
            log.warning(
                "frames in place: %d observation(s) lost since the last line, their frame slot "
                "taken back before the daemon read them (%d in all); the daemon refused or "
                "dropped them unread, or has read nothing of this robot for %.0f s",
                self._unlogged,
                self.overwritten_unread,
                UNREAD_GIVE_UP_NS / 1e9,
            )
            self._logged_ns, self._unlogged = now, 0

    def place(self, arrays: dict[str, np.ndarray], in_place: bool) -> dict[str, int] | None:
        """The observation's frames into a slot: the claimed one (`in_place`), or copied from
        `arrays` into the next free one (they leave `arrays`). Returns the `frame_slot` field,
        or None when the daemon holds every slot (the frames stay in `arrays`, for the socket)."""
        ring = self.ring
        if in_place:
            index: int | None = self.next
        else:
            if self._claimed is not None:  # buffers taken but frames sent otherwise
                ring.end(self.next)
                self._claimed = None
            index = self.free_slot()
        if index is None:
            return None
        if in_place:
            generation = ring.end(index)
            self._claimed = None
        else:
            generation = ring.write(index, {n: arrays.pop(n) for n in self._camera_names})
        # Not free until the daemon has read this observation: rewriting the slot before then
        # supersedes it, and a daemon that reads late would then supersede every observation.
        ring.hold_in_flight(index, generation)
        self._names += 1
        self._named[index] = (self._names, generation, time.monotonic_ns())
        self.next = (index + 1) % ring.count
        return {"index": index, "generation": generation}

    def close(self) -> None:
        self.ring.close()
        self._claimed = None
