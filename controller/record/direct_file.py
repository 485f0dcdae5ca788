"""A new file written past the page cache (O_DIRECT), in aligned blocks: the stream the
recorder's MCAP files are written through (controller.record.mcap_file).

Why: a recording of three raw 480x640 cameras at 30 Hz writes about 80 MB a second. Through the
page cache, once it is full of earlier recordings, each write also has the kernel reclaim pages:
on a 2-core machine the file process spent 28-33% of a core in the kernel, almost all of it in
`write`; 1,200 MB took 4.65 s of system time buffered with the cache full (0.34 s with room)
and 0.12 s written directly in 4 MB blocks.

Bytes are gathered in a page-aligned block and written when it fills; `close` writes the rest
(not direct: the tail is not a whole block). A process killed mid-file loses at most the block
being gathered; the MCAP reader replays what came before. Where the file system refuses
O_DIRECT (tmpfs, some network and FUSE file systems), the same blocks go through the page
cache, and `direct` says so.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from pathlib import Path

BLOCK_BYTES = 4 << 20
O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux; elsewhere the page cache


class DirectFile:
    """A binary stream for one new file: write, tell, flush, close (what the MCAP writer uses)."""

    def __init__(self, path: Path, direct: bool = True) -> None:
        """Creates `path` (FileExistsError if it exists: a recording never overwrites one)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        self.direct = bool(direct and O_DIRECT)
        fd = -1
        if self.direct:
            try:
                fd = os.open(path, flags | O_DIRECT, 0o644)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = False
        if fd < 0:
            fd = os.open(path, flags, 0o644)
        self._fd = fd
        self._block = mmap.mmap(-1, BLOCK_BYTES)  # page-aligned, as O_DIRECT needs
        self._view = memoryview(self._block)
        self._filled = 0
        self._written = 0  # bytes in the file

    def write(self, data: bytes | bytearray | memoryview) -> int:
        source = memoryview(data).cast("B")
        total = len(source)
        while source:
            take = min(len(source), BLOCK_BYTES - self._filled)
            self._view[self._filled : self._filled + take] = source[:take]
            self._filled += take
            source = source[take:]
            if self._filled == BLOCK_BYTES:
                self._write_out(self._view)
                self._filled = 0
        return total

    def tell(self) -> int:
        return self._written + self._filled

    def flush(self) -> None:
        """Nothing: a part of a block cannot be written directly (close writes it)."""

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            if self._filled:
                if self.direct:  # the tail is not a whole block
                    status = fcntl.fcntl(self._fd, fcntl.F_GETFL)
                    fcntl.fcntl(self._fd, fcntl.F_SETFL, status & ~O_DIRECT)
                self._write_out(self._view[: self._filled])
                self._filled = 0
        finally:
            os.close(self._fd)
            self._fd = -1
            self._view.release()
            self._block.close()

    def _write_out(self, data: memoryview) -> None:
        while data:
            done = os.write(self._fd, data)
            self._written += done
            data = data[done:]
