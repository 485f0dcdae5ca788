"""One MCAP file being written: its schemas and channels registered as first used, its
messages, its size so far (for rotation). Camera frames are sensor_msgs/msg/Image in CDR
(controller/record/image_cdr.py), or CompressedImage (jpeg_frames); every other record is JSON
under its JSON schema."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any, cast

from mcap.writer import CompressionType, Writer

from controller.record import image_cdr, jpeg_frames
from controller.record.direct_file import DirectFile
from controller.record.private_files import make_private_dir
from controller.record.schemas import METADATA, PROFILE, SCHEMAS

# Chunks are compressed and written out at this size, so the file's size on disk follows its
# content closely enough to rotate on (a chunk is at most this plus one message).
CHUNK_BYTES = 256 * 1024
# How often the chunks finished so far go from DirectFile's block into the file: a process
# killed mid-file loses about this much besides the chunk being built.
FLUSH_S = 1.0


COMPRESSION = {"lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD,
               "none": CompressionType.NONE}  # fmt: skip


class McapFile:
    def __init__(self, path: Path, metadata: dict[str, str], compression: str = "lz4") -> None:
        """`compression`: of the chunks, record.compression's name."""
        self.path = path
        make_private_dir(path.parent)  # record.dir again, if it was removed: 0700
        self._stream = DirectFile(path)
        try:
            self._writer = Writer(  # the writer takes any stream with write and tell
                cast(IO[bytes], self._stream),
                chunk_size=CHUNK_BYTES,
                compression=COMPRESSION[compression],
            )
            self._writer.start(profile=PROFILE, library="tempo")
            self._writer.add_metadata(METADATA, metadata)
        except BaseException:
            self._stream.close()
            raise
        self._flushed = time.monotonic()
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._sequence = 0
        self.messages = 0

    def write(
        self, topic: str, schema: str, log_ns: int, publish_ns: int, data: bytes | memoryview
    ) -> None:
        """`schema`: image_cdr.SCHEMA (`data` from image_cdr.encode_image), jpeg_frames.SCHEMA
        (from jpeg_frames.compressed_from_image) or one of SCHEMAS.
        `data` is copied before this returns (into the chunk being built), so its buffer can
        be used again."""
        channel = self._channels.get(topic)
        if channel is None:
            schema_id = self._schemas.get(schema)
            if schema_id is None:
                schema_id = self._writer.register_schema(schema, *_schema_of(schema))
                self._schemas[schema] = schema_id
            encoding = "json" if schema in SCHEMAS else image_cdr.MESSAGE_ENCODING
            channel = self._writer.register_channel(topic, encoding, schema_id)
            self._channels[topic] = channel
        self._sequence += 1
        # mcap's add_message is typed for bytes and writes any buffer into the chunk's BytesIO.
        self._writer.add_message(
            channel, log_ns, cast(bytes, data), publish_ns, self._sequence & 0xFFFFFFFF
        )
        self.messages += 1
        now = time.monotonic()
        if now - self._flushed >= FLUSH_S:  # finished chunks into the file, not only the block
            self._stream.flush()
            self._flushed = now

    @property
    def size(self) -> int:
        """Bytes written so far: on disk, or in the block DirectFile gathers (the chunk being
        built is not counted: at most CHUNK_BYTES)."""
        return self._stream.tell()

    def close(self) -> None:
        try:
            self._writer.finish()
        finally:
            self._stream.close()


def _schema_of(schema: str) -> tuple[str, bytes]:
    """A schema's encoding and its text, as the file declares it."""
    if schema == image_cdr.SCHEMA:
        return image_cdr.SCHEMA_ENCODING, image_cdr.DEFINITION.encode()
    if schema == jpeg_frames.SCHEMA:
        return image_cdr.SCHEMA_ENCODING, jpeg_frames.DEFINITION.encode()
    return "jsonschema", json.dumps(SCHEMAS[schema]).encode()


def metadata_of(values: dict[str, Any]) -> dict[str, str]:
    """MCAP metadata holds strings: each value as JSON."""
    return {name: json.dumps(value) for name, value in values.items()}
