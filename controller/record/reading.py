"""A recording read back: every message that can be read, in file order, and why reading
stopped early if it did (a file cut short by a crash or a full disk, or damaged).

    recording = read_recording(path)     # RecordingError: not an MCAP file, or unreadable
    recording.problem                    # None, or one sentence: where it stopped and why
    for message in recording.messages: message.topic, message.publish_ns, message.data

Read from start to end without the file's index (which a cut file lacks), so whatever was
written before the damage is used.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcap.exceptions import McapError
from mcap.records import Channel, Chunk, Message, Metadata, Schema
from mcap.stream_reader import StreamReader, breakup_chunk

from controller.bounded_file import open_regular
from controller.record import image_cdr, jpeg_frames
from controller.record.recorded_names import RecordingError, checked_name, checked_robot
from controller.record.schemas import METADATA

try:
    from zstandard import ZstdError
except ModuleNotFoundError:  # mcap reads zstd chunks only with zstandard installed

    class ZstdError(Exception):  # type: ignore[no-redef]
        """Never raised."""


# What a damaged or cut file raises from inside the reader (lz4's errors are RuntimeErrors).
_DAMAGE = (
    McapError, EOFError, struct.error, ValueError, KeyError, IndexError, RuntimeError, ZstdError,
    MemoryError,
)  # fmt: skip
MAX_RECORD_BYTES = 1 << 30  # a record's length field past this is damage, not a frame
# A chunk's declared uncompressed size past this is damage: the writer closes chunks at 256 KiB
# (plus one message, a camera frame at most), and the size is allocated before decompressing.
MAX_CHUNK_BYTES = 256 << 20

__all__ = ["RecordedMessage", "Recording", "RecordingError", "read_recording"]


@dataclass(frozen=True)
class RecordedMessage:
    topic: str
    schema: str
    log_ns: int  # wall clock
    publish_ns: int  # the daemon's monotonic clock when it happened
    data: dict[str, Any]

    @property
    def robot(self) -> str:
        return self.topic.split("/")[1]

    @property
    def name(self) -> str:
        """The topic under the robot: `observation`, `chunk`, `camera/front`, ..."""
        return self.topic.split("/", 2)[2]


@dataclass
class Recording:
    path: Path
    messages: list[RecordedMessage] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def _decode(data: bytes, schema: str, encoding: str) -> dict[str, Any]:
    """A message's dict: a camera frame's from CDR (image_cdr.decode_image, or
    jpeg_frames.decode_compressed for a JPEG one), the rest JSON."""
    if encoding == image_cdr.MESSAGE_ENCODING and schema == image_cdr.SCHEMA:
        return image_cdr.decode_image(data)
    if encoding == image_cdr.MESSAGE_ENCODING and schema == jpeg_frames.SCHEMA:
        return jpeg_frames.decode_compressed(data)
    if encoding != "json":
        raise ValueError(f"a message of schema {schema!r} encoded as {encoding!r}")
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("a JSON message that is not an object")
    return value


def read_recording(path: Path) -> Recording:
    recording = Recording(Path(path))
    schemas: dict[int, str] = {}
    channels: dict[int, tuple[str, str, str]] = {}  # id: topic, schema, message encoding
    stream = open_regular(Path(path), RecordingError, "the recording")
    with stream:
        try:
            reader = StreamReader(stream, record_size_limit=MAX_RECORD_BYTES, emit_chunks=True)
            for record in _unchunked(reader):
                if isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Channel):
                    schema = schemas.get(record.schema_id, "")
                    _check_topic(record.topic, path)
                    channels[record.id] = (record.topic, schema, record.message_encoding)
                elif isinstance(record, Message):
                    topic, schema, encoding = channels[record.channel_id]
                    data = _decode(record.data, schema, encoding)
                    recording.messages.append(
                        RecordedMessage(topic, schema, record.log_time, record.publish_time, data)
                    )
                elif isinstance(record, Metadata) and record.name == METADATA:
                    recording.metadata = {k: json.loads(v) for k, v in record.metadata.items()}
        except _DAMAGE as exc:
            if not recording.messages and not recording.metadata:
                raise RecordingError(
                    f"{path} is not a readable MCAP recording ({type(exc).__name__})"
                ) from None
            recording.problem = (
                f"{path} is cut short or damaged after {len(recording.messages)} readable "
                f"messages ({type(exc).__name__}); what could be read is used"
            )
    return recording


def _unchunked(reader: StreamReader) -> Iterator[Any]:
    """The reader's records with each chunk's records in its place, a chunk declaring more
    than MAX_CHUNK_BYTES refused before its size is allocated."""
    for record in reader.records:
        if not isinstance(record, Chunk):
            yield record
            continue
        if record.uncompressed_size > MAX_CHUNK_BYTES:
            raise ValueError(f"a chunk declaring {record.uncompressed_size} bytes")
        yield from breakup_chunk(record)


def _check_topic(topic: str, path: Path) -> None:
    """A topic is /<robot>/<name> or /<robot>/camera/<camera>, every name a safe one."""
    parts = topic.split("/")
    if len(parts) < 3 or parts[0]:
        raise RecordingError(f"{path} holds a topic {topic[:80]!r} that Tempo does not write")
    checked_robot(parts[1], path)
    if parts[2] == "camera" and len(parts) >= 4:
        checked_name("/".join(parts[3:]), "camera", path)
    elif len(parts) != 3 or not parts[2].replace("_", "").isalnum():
        raise RecordingError(f"{path} holds a topic {topic[:80]!r} that Tempo does not write")
