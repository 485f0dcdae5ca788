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

    def free_count(self) -> int:
        return sum(len(free) for free in list(self._free.values()))
