"""The recorder's records as it files them: their frames, their sizes and the names of its
files (controller.record.writer)."""

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


def file_part(robot: str) -> str:
    """A robot's name as part of a file name (its letters, digits, - and _)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in robot)[:64]
