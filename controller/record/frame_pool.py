"""Buffers the recorder copies frames written in place into, used again once written.

A frame the driver wrote in place must be copied before its slot goes back to the driver. A
fresh 480x640 array for each copy costs its pages' first touch: four frames took 2.4-2.7 ms on
a 2-core machine against 0.25-0.3 ms into buffers already touched. The writer thread copies
into buffers from here and gives them back once their frames are written (continuous) or leave
the ring (ring mode). Copies go in pieces: numpy holds the interpreter for one whole copy, and
the control loop's thread must not wait for a frame's to get it back.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

import numpy as np

MAX_FREE_PER_SHAPE = 64  # kept for use again per frame shape; more are left to the allocator
COPY_PIECE_BYTES = 128 * 1024


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
        if frame.nbytes <= COPY_PIECE_BYTES or not frame.flags.c_contiguous:
            np.copyto(buffer, frame)
            return buffer
        source, target = frame.reshape(-1), buffer.reshape(-1)
        step = max(COPY_PIECE_BYTES // frame.itemsize, 1)
        for start in range(0, source.size, step):
            np.copyto(target[start : start + step], source[start : start + step])
        return buffer

    def give_back(self, frames: Iterable[np.ndarray]) -> None:
        """Frames from `copy` whose record is done with them: nothing reads them again."""
        for frame in frames:
            free = self._free.get((frame.shape, frame.dtype.str))
            if free is not None and len(free) < MAX_FREE_PER_SHAPE:
                free.append(frame)

    def free_count(self) -> int:
        return sum(len(free) for free in list(self._free.values()))
