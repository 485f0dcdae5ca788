"""Buffers the recorder copies frames written in place into, used again once written.

A frame the driver wrote in place must be copied before its slot goes back to the driver. A
fresh 480x640 array for each copy costs its pages' first touch: four frames took 2.4-2.7 ms on
a 2-core machine against 0.25-0.3 ms into buffers already touched. The writer thread copies
into buffers from here and gives them back once their frames are written (continuous) or leave
the ring (ring mode).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

import numpy as np

MAX_FREE_PER_SHAPE = 64  # kept for use again per frame shape; more are left to the allocator


class FramePool:
    """Used by the writer thread alone."""

    def __init__(self) -> None:
        self._free: dict[tuple[tuple[int, ...], str], collections.deque[np.ndarray]] = {}

    def copy(self, frame: np.ndarray) -> np.ndarray:
        """`frame` copied into a buffer of the pool (a new one when none of its shape is free)."""
        key = (frame.shape, frame.dtype.str)
        free = self._free.get(key)
        if free is None:
            free = self._free.setdefault(key, collections.deque())
        try:
            buffer = free.pop()
        except IndexError:
            buffer = np.empty(frame.shape, frame.dtype)
        np.copyto(buffer, frame)  # numpy lets go of the interpreter while it copies
        return buffer

    def give_back(self, frames: Iterable[np.ndarray]) -> None:
        """Frames from `copy` whose record is done with them: nothing reads them again."""
        for frame in frames:
            free = self._free.get((frame.shape, frame.dtype.str))
            if free is not None and len(free) < MAX_FREE_PER_SHAPE:
                free.append(frame)

    def own_slot_frames(self, fields: Any) -> bool:
        """An observation's frames still in the driver's slot (SlotFrames: not a plain dict)
        copied into the pool, and the slot let go (its last reference is the record's); False
        when the driver wrote over them before the copy (a driver ignoring holds): left out."""
        images = fields["images"]
        if type(images) is dict:
            return True
        copies = {name: self.copy(frame) for name, frame in images.items()}
        # Not SlotFrames.unchanged(): that one is False once the session ended and its ring
        # closed, and a session's last frames are often the ones an incident needs.
        written_as_read = getattr(images, "written_as_read", None)
        torn = written_as_read is not None and not written_as_read()
        if torn:
            self.give_back(copies.values())
            copies = {}
        # The record's own dict (queue.RobotRecording.observation): replacing its frames here
        # drops the slot's last reference, which gives the slot back to the driver now.
        fields["images"] = copies
        fields["pooled"] = bool(copies)
        return not torn

    def free_count(self) -> int:
        return sum(len(free) for free in list(self._free.values()))
