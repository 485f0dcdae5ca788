"""The recorder's records as it files them: their frames and sizes, the ring's entries, and
the names of its files (controller.record.writer)."""

from __future__ import annotations

import datetime
from typing import Any

from controller.record.queue import Record

RECORD_OVERHEAD_BYTES = 1024  # what a record costs in the ring besides its arrays


def stamp(wall_ns: int) -> str:
    moment = datetime.datetime.fromtimestamp(wall_ns / 1e9, tz=datetime.timezone.utc)
    return moment.strftime("%Y%m%dT%H%M%S.%fZ")


def frames_of(record: Record) -> tuple[tuple[str, Any], ...]:
    """An observation's (camera, frame) pairs; nothing for other records."""
    images = record.fields.get("images") if record.kind == "observation" else None
    return tuple(images.items()) if images else ()


def nbytes(record: Record) -> int:
    frames = sum(frame.nbytes for _, frame in frames_of(record))
    return frames + RECORD_OVERHEAD_BYTES


# A record as the ring keeps it: (time_ns, robot, kind, its message packed and the most bytes of
# JSON it makes (packed_json.pack), its frames, its size in bytes, whether its frames are the
# pool's). Only
# strings, ints, bytes and arrays, none of which the garbage collector tracks: 30 s of records
# held as Record objects and their dicts made the collector's pauses, in every thread, the
# largest part of the loop's tick lateness (ring p99 8.0-8.4 ms against 2.3-2.9 ms off).
RingEntry = tuple[int, str, str, bytes, int, tuple[tuple[str, Any], ...], int, bool]


def file_part(robot: str) -> str:
    """A robot's name as part of a file name (its letters, digits, - and _)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in robot)[:64]
