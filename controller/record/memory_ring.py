"""Ring mode's memory: the last `ring_seconds` of records (at most `ring_max_mb`), packed, for
the next incident file to hold (controller.record.writer). Used by the writer thread alone."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from controller.record.frame_pool import FramePool
from controller.record.queue import Record
from controller.record.record_files import frames_of, nbytes

# A record as the ring keeps it: (time_ns, robot, kind, its message packed and the most bytes of
# JSON it makes (packed_json.pack), its frames, its size in bytes, whether its frames are the
# pool's). Only
# strings, ints, bytes and arrays, none of which the garbage collector tracks: 30 s of records
# held as Record objects and their dicts made the collector's pauses, in every thread, the
# largest part of the loop's tick lateness (ring p99 8.0-8.4 ms against 2.3-2.9 ms off).
RingEntry = tuple[int, str, str, bytes, int, tuple[tuple[str, Any], ...], int, bool]


class MemoryRing:
    def __init__(self, seconds: float, max_mb: int, frames: FramePool) -> None:
        """`frames`: the pool a record's frames go back to once it leaves the ring."""
        self._entries: collections.deque[RingEntry] = collections.deque()
        self._bytes = 0
        self._span_ns = int(seconds * 1e9)
        self._max_bytes = max_mb * 1024 * 1024
        self._frames = frames

    def keep(self, record: Record, packed: tuple[bytes, int]) -> None:
        """`record` (its message `packed`: bytes and its JSON's bound) kept; the oldest go past
        the seconds or the bytes."""
        message, bound = packed
        entries = self._entries
        size = nbytes(record) + len(message)
        pooled = bool(record.pooled_frames())
        frames = frames_of(record)
        entries.append((record.time_ns, record.robot, record.kind, message, bound, frames, size,
                        pooled))  # fmt: skip
        self._bytes += size
        oldest_kept = record.time_ns - self._span_ns
        while entries and (entries[0][0] < oldest_kept or self._bytes > self._max_bytes):
            *_, gone_frames, gone_size, gone_pooled = entries.popleft()
            self._bytes -= gone_size
            if gone_pooled:
                self._frames.give_back(frame for _, frame in gone_frames)

    def __iter__(self) -> Iterator[RingEntry]:
        """What the ring holds now, oldest first (a copy: the ring keeps them)."""
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """What its records take, as counted against `ring_max_mb`."""
        return self._bytes
