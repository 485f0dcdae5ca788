"""The recorder's side of its file process (controller.record.file_process): a file there is
opened, written and closed through `RecordingFiles`. Messages go down a pipe as they are (a
frame's pixels straight from its buffer, the lock released while the kernel copies them); only
closing waits for an answer. Writes block while the process is behind, which holds the
recorder's thread, never the control loop's: the recorder's bounded queue drops, and counts,
what does not fit."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Sequence
from pathlib import Path

from controller.record import image_cdr, jpeg_frames
from controller.record.file_process import (
    CLOSE,
    COMMAND,
    OPEN,
    WRITE,
    WRITE_HEAD,
    WRITE_JPEG,
    WRITE_JSON,
)

PIPE_BYTES = 1 << 20  # a 480x640 frame in one write where the system allows it
MESSAGE_OVERHEAD = 64  # bytes a message adds on disk besides its data (record, index entries)
# A JPEG frame's size is known only in the file process: counted as this share of the raw frame,
# which a noisy image can near at the best qscale (a 480x640 camera-like frame at qscale 2 was
# 31 KB of its 900 KB), so that a file never passes max_file_mb.
JPEG_SHARE = 0.5
EXIT_WAIT_S = 30.0
# glibc's malloc for the file process: buffers of a frame's size (the MCAP library builds a chunk
# and its record in fresh ones, about five per frame) come from a heap it keeps instead of each
# being mapped, first touched page by page and unmapped. 300 480x640 frames took 2.2 s of CPU
# (1.3 s of it in the kernel) without these and 0.9 s with them, on a 2-core machine. Other C
# libraries ignore the names; values already in the environment are kept.
MALLOC_SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
    "MALLOC_TOP_PAD_": str(16 << 20),
}


class FileProcessError(RuntimeError):
    """The file process failed (what it said) or went away."""


class RecordingFile:
    """A file being written in the file process: its path, the messages sent to it and an
    estimate of its size on disk (for rotation: at least what compression leaves)."""

    def __init__(self, files: RecordingFiles, path: Path, jpeg: bool = False) -> None:
        self._files, self.path = files, path
        self._jpeg = jpeg  # camera frames written as JPEG (record.frames: jpeg)
        self.messages = 0
        self.size = 0

    def write_frame(
        self, topic: str, log_ns: int, publish_ns: int, parts: Sequence[bytes | memoryview]
    ) -> None:
        """One camera frame, its raw message (image_cdr.image_parts) the concatenation of
        `parts`: written as it is, or as JPEG by the file process."""
        if not self._jpeg:
            self.write(topic, image_cdr.SCHEMA, log_ns, publish_ns, parts)
            return
        length = self._send(WRITE_JPEG, topic, jpeg_frames.SCHEMA, log_ns, publish_ns, parts)
        self._count(int(length * JPEG_SHARE))

    def write(
        self,
        topic: str,
        schema: str,
        log_ns: int,
        publish_ns: int,
        parts: Sequence[bytes | memoryview],
    ) -> None:
        """One message, its data the concatenation of `parts`."""
        length = self._send(WRITE, topic, schema, log_ns, publish_ns, parts)
        self._count(length)

    def write_json(
        self, topic: str, schema: str, log_ns: int, publish_ns: int, packed: tuple[bytes, int]
    ) -> None:
        """One message whose data is the JSON of `packed` (controller.record.packed_json.pack's
        bytes and bound), made by the file process."""
        self._send(WRITE_JSON, topic, schema, log_ns, publish_ns, (packed[0],))
        self._count(packed[1])

    def _send(
        self,
        op: int,
        topic: str,
        schema: str,
        log_ns: int,
        publish_ns: int,
        parts: Sequence[bytes | memoryview],
    ) -> int:
        names = topic.encode(), schema.encode()
        length = sum(len(part) for part in parts)
        head = WRITE_HEAD.pack(len(names[0]), len(names[1]), log_ns, publish_ns)
        body = WRITE_HEAD.size + len(names[0]) + len(names[1]) + length
        self._files.send(COMMAND.pack(op, body) + head + names[0] + names[1], *parts)
        return length

    def _count(self, length: int) -> None:
        self.messages += 1
        # lz4 can grow data that does not compress by a fraction of a percent.
        self.size += length + length // 100 + MESSAGE_OVERHEAD

    def close(self) -> None:
        self._files.close_file()


class RecordingFiles:
    """The file process, started on first use; one file open at a time."""

    def __init__(self, jpeg_qscale: int | None = None) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._failure: str | None = None  # what the process said when it failed, kept
        self._jpeg_qscale = jpeg_qscale  # None: camera frames raw

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The file process, once started (None before the first file and after stop)."""
        return self._process

    def open(self, path: Path, metadata: dict[str, str], compression: str) -> RecordingFile:
        spec = json.dumps({"path": str(path), "metadata": metadata, "compression": compression,
                           "jpeg_qscale": self._jpeg_qscale})  # fmt: skip
        body = spec.encode()
        self.send(COMMAND.pack(OPEN, len(body)) + body)
        return RecordingFile(self, path, jpeg=self._jpeg_qscale is not None)

    def close_file(self) -> None:
        """Finish the open file; returns once it is complete on disk."""
        self.send(COMMAND.pack(CLOSE, 0))
        answer = self._answer()
        if not answer.startswith("closed"):
            raise self._failed(answer)

    def send(self, *parts: bytes | memoryview) -> None:
        """Every byte of `parts` into the pipe. After a failure, every call raises it again:
        the process said why once, and what came after would only say that it ended."""
        if self._failure is not None:
            raise FileProcessError(self._failure)
        process = self._started()
        fd = process.stdin.fileno()  # type: ignore[union-attr]
        try:
            for part in parts:
                view = memoryview(part).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
        except OSError:  # BrokenPipeError: the process ended
            raise self._failed(self._answer()) from None

    def _failed(self, reason: str) -> FileProcessError:
        self._failure = reason
        return FileProcessError(reason)

    def check(self) -> None:
        """FileProcessError if the process has ended (it ends only on an error, or when told)."""
        if self._failure is not None:
            raise FileProcessError(self._failure)
        if self._process is not None and self._process.poll() is not None:
            raise self._failed(self._answer())

    def stop(self) -> None:
        """End of input: the process finishes the open file and exits."""
        process, self._process = self._process, None
        if process is not None:
            _end(process)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            command = [sys.executable, "-m", "controller.record.file_process"]
            # A session of its own: a terminal's Ctrl-C is for the daemon, which ends this
            # process (closing its input) once the recorder has sent what it holds.
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
                env={**MALLOC_SETTINGS, **os.environ},  # an operator's own win
            )
            try:
                fcntl.fcntl(process.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)  # type: ignore[union-attr]
            except OSError:
                pass  # the system's cap is lower: writes are split, nothing else changes
            weakref.finalize(self, _end, process)
            self._process = process
        return self._process

    def _answer(self) -> str:
        """The process's next line; what it said before it went away, or that it did."""
        process = self._process
        line = process.stdout.readline() if process is not None else b""  # type: ignore[union-attr]
        if line:
            return line.decode(errors="replace").strip().removeprefix("error ")
        code = process.wait(EXIT_WAIT_S) if process is not None else None
        return f"the recording's file process ended (exit status {code})"


def _end(process: subprocess.Popen[bytes]) -> None:
    try:
        process.stdin.close()  # type: ignore[union-attr]
    except OSError:
        pass
    try:
        process.wait(EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()
