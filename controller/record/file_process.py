"""The process that writes the recorder's MCAP files, so that the daemon never runs the MCAP
library: its chunk building copies every message several times while holding the interpreter
lock, which the control loop's thread then waits for (on an H100 host, tick lateness p99 went
from 26 us with recording off to 850-890 us with camera frames recorded in-thread).

The daemon's recorder (controller.record.file_client) starts it with `python -m
controller.record.file_process` and sends commands on its stdin; it answers on stdout. Each
command is an operation byte and a body length (little-endian "<BQ"), then the body:

    OPEN   JSON {"path", "metadata", "compression", "jpeg_qscale"}: start a file (never
           overwriting one)
    WRITE  "<HHqq" topic and schema lengths, log and publish time (ns); topic; schema; the
           message (for a camera frame, its CDR head and pixels, sent as they are)
    WRITE_JSON  as WRITE, the message a value packed by controller.record.packed_json,
           written as its compact JSON: the JSON is made here, not in the daemon
    WRITE_JPEG  as WRITE, the message a raw camera frame's (image_cdr), written as a JPEG
           CompressedImage (jpeg_frames) at the "jpeg_qscale" the file was opened with; a
           frame that does not encode is left out and said on stderr (the daemon's log)
    CLOSE  empty: finish the open file; answers "closed <messages>"

An error (a full disk, a path that cannot be written, a message that cannot be JSON) is
answered "error <one sentence>" and ends the process; end of input finishes the open file and
ends it too. SIGINT and SIGTERM are ignored: the daemon ends it, by closing its input, once
the recorder has written what it holds.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
from pathlib import Path
from typing import BinaryIO

from controller.record.jpeg_frames import JpegEncoder, compressed_from_image
from controller.record.mcap_file import McapFile
from controller.record.packed_json import to_json

COMMAND = struct.Struct("<BQ")
NICENESS = 10  # added to the daemon's: the file process yields the CPU to the control loop
WRITE_HEAD = struct.Struct("<HHqq")
OPEN, WRITE, CLOSE, WRITE_JSON, WRITE_JPEG = 1, 2, 3, 4, 5


class Receiver:
    """Reads commands into one buffer used again for each (grown when a body is larger): a
    fresh 0.9 MB buffer per frame would be zero-filled and its pages first touched every time.
    A body stays valid until the next read; McapFile.write copies what it keeps."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._buffer = bytearray(1 << 16)

    def read(self, size: int) -> memoryview | None:
        """The next `size` bytes, or None at end of input (a partial command: the daemon went
        away)."""
        if size > len(self._buffer):
            self._buffer = bytearray(size)
        view, got = memoryview(self._buffer)[:size], 0
        while got < size:
            n = self._stream.readinto(view[got:])  # type: ignore[attr-defined]
            if not n:
                return None
            got += n
        return view


def serve(commands: BinaryIO, answers: BinaryIO) -> None:
    """Carry out commands until end of input."""
    file: McapFile | None = None
    jpeg: JpegEncoder | None = None
    receiver = Receiver(commands)
    try:
        while True:
            head = receiver.read(COMMAND.size)
            if head is None:
                return
            op, size = COMMAND.unpack(head)
            body = receiver.read(size)
            if body is None:
                return
            if op == OPEN:
                spec = json.loads(bytes(body))
                if file is not None:
                    file.close()
                file = McapFile(Path(spec["path"]), spec["metadata"], spec["compression"])
                if spec.get("jpeg_qscale") is not None and jpeg is None:
                    jpeg = JpegEncoder(spec["jpeg_qscale"])
            elif op in (WRITE, WRITE_JSON, WRITE_JPEG):
                if file is None:
                    raise RuntimeError("a message came before any file was opened")
                topic_n, schema_n, log_ns, publish_ns = WRITE_HEAD.unpack_from(body)
                at = WRITE_HEAD.size
                topic = bytes(body[at : at + topic_n]).decode()
                schema = bytes(body[at + topic_n : at + topic_n + schema_n]).decode()
                data = body[at + topic_n + schema_n :]
                if op == WRITE_JSON:
                    try:
                        data = memoryview(to_json(data))
                    except (ValueError, TypeError) as exc:  # the recorder refuses these first
                        raise RuntimeError(f"the {topic} message is not JSON: {exc}") from None
                elif op == WRITE_JPEG:
                    if jpeg is None:
                        raise RuntimeError("a JPEG frame came to a file opened without a qscale")
                    try:
                        data = memoryview(compressed_from_image(data, jpeg))
                    except Exception as exc:  # noqa: BLE001 - one frame lost, not the recording
                        sys.stderr.write(f"the recorder left out a {topic} frame that did not "
                                         f"encode as JPEG: {exc}\n")  # fmt: skip
                        continue
                file.write(topic, schema, log_ns, publish_ns, data)
            elif op == CLOSE:
                closing, file = file, None
                if closing is not None:
                    closing.close()
                answers.write(f"closed {closing.messages if closing else 0}\n".encode())
                answers.flush()
            else:
                raise RuntimeError(f"unknown command {op}")
    finally:
        if file is not None:
            file.close()


def main() -> int:
    # Ctrl-C and systemd's stop reach every process of the group: this one must outlive them
    # until the daemon's recorder has sent what it holds, then ends at the end of its input
    # (also when the daemon dies: the pipe closes).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Below the control loop on a busy CPU: a recording that falls behind fills its queue and
    # drops (counted, said in status); a tick waiting for the CPU would be late.
    os.nice(NICENESS)
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    except Exception as exc:
        sys.stdout.buffer.write(f"error {type(exc).__name__}: {exc}\n".encode())
        sys.stdout.buffer.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
