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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcap.exceptions import McapError
from mcap.records import Channel, Message, Metadata, Schema
from mcap.stream_reader import StreamReader

from controller.errors import TempoError
from controller.record import image_cdr, jpeg_frames
from controller.record.schemas import METADATA

# What a damaged or cut file raises from inside the reader (zstd and lz4 errors are these too).
_DAMAGE = (McapError, EOFError, struct.error, ValueError, KeyError, IndexError, RuntimeError)
MAX_RECORD_BYTES = 1 << 30  # a record's length field past this is damage, not a frame


class RecordingError(TempoError):
    """A recording that cannot be read at all."""


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
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise RecordingError(f"cannot read the recording {path}: {exc.strerror}") from None
    with stream:
        try:
            reader = StreamReader(stream, record_size_limit=MAX_RECORD_BYTES)
            for record in reader.records:
                if isinstance(record, Schema):
                    schemas[record.id] = record.name
                elif isinstance(record, Channel):
                    schema = schemas.get(record.schema_id, "")
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
