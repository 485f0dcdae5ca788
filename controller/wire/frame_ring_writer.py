"""The driver's side of frames in place: the ring of frame slots the daemon offered in
`welcome`, which slot comes next, and the slot a camera is writing into (TempoClient's
`frame_buffers`). Only numpy and the standard library (a driver imports this). The ring is the
daemon's sealed memory, opened by its /proc path; memory that is not sealed is refused (frames
then go on the socket), since a file someone truncated would kill the driver with SIGBUS.

The slot rule: the driver writes a slot only while the daemon holds nothing there (`free`),
round robin; a slot is the daemon's from the `obs` that names it (the driver marks it held in
flight, negative, until the daemon's own hold replaces that) until the daemon has finished
with that observation. When the daemon holds every slot, frames go on the socket.
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
# never read (the send failed, the message was dropped unread) is taken back after this long.
IN_FLIGHT_GRACE_NS = 1_000_000_000


class FrameRingWriter:
    """Writes one driver's camera frames into the daemon's ring (see the module doc)."""

    def __init__(self, ring: SlotRing, camera_names: list[str]) -> None:
        self.ring = ring
        self.next = 0  # the slot to try first
        self._camera_names = camera_names
        self._claimed: dict[str, np.ndarray] | None = None  # buffers() not yet sent
        self._named_ns: dict[int, int] = {}  # slot -> when an observation last named it

    @classmethod
    def attach(
        cls, offer: Any, camera_shapes: Mapping[str, tuple[int, int, int]], required: bool
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
        return cls(ring, list(camera_shapes))

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
        """The next slot round robin that the daemon does not hold, or None (all held)."""
        ring = self.ring
        now = time.monotonic_ns()
        for offset in range(ring.count):
            index = (self.next + offset) % ring.count
            if ring.free(index) or (
                ring.held(index) < 0 and now - self._named_ns.get(index, 0) > IN_FLIGHT_GRACE_NS
            ):
                return index
        return None

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
        self._named_ns[index] = time.monotonic_ns()
        self.next = (index + 1) % ring.count
        return {"index": index, "generation": generation}

    def close(self) -> None:
        self.ring.close()
        self._claimed = None
