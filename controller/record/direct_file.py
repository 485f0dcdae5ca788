"""A new file written past the page cache (O_DIRECT), in aligned blocks: the stream the
recorder's MCAP files are written through (controller.record.mcap_file).

Why: a recording of three raw 480x640 cameras at 30 Hz writes about 80 MB a second. Through the
page cache, once it is full of earlier recordings, each write also has the kernel reclaim pages:
on a 2-core machine the file process spent 28-33% of a core in the kernel, almost all of it in
`write`; 1,200 MB took 4.65 s of system time buffered with the cache full (0.34 s with room)
and 0.12 s written directly in 4 MB blocks.

Bytes are gathered in a page-aligned block and written when it fills; `flush` writes the whole
pages gathered so far (McapFile calls it about once a second, so a killed process loses at most
that much and a part of a page), `close` the rest. A direct write blocks until the device has
the data: the recorder's queue, not the page cache, absorbs a slow disk's stalls.

Where the file system refuses O_DIRECT (when it is turned on, or at a write), the file goes on
through the page cache and `direct` says so; nothing is lost or written twice.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
from pathlib import Path

from controller.record.private_files import FILE_MODE, make_private_file

BLOCK_BYTES = 4 << 20
PAGE_BYTES = 4096  # what O_DIRECT aligns offsets, lengths and memory to here
O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux; elsewhere the page cache


class DirectFile:
    """A binary stream for one new file: write, tell, flush, close (what the MCAP writer uses)."""

    def __init__(self, path: Path, direct: bool = True) -> None:
        """Creates `path` (FileExistsError if it exists: a recording never overwrites one)."""
        # os.open's descriptors are not inherited by children already (PEP 446).
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            make_private_file(self._fd)  # 0600 whatever the umask: it holds camera frames
            # Turned on after the file exists: an open with O_DIRECT on a file system without
            # it creates the file and then fails, and a second open would find it there.
            self.direct = bool(direct and O_DIRECT) and self._set_direct(True)
            self._block = mmap.mmap(-1, BLOCK_BYTES)  # page-aligned, as O_DIRECT needs
        except BaseException:
            os.close(self._fd)
            raise
        self._filled = 0  # bytes gathered in the block
        self._sent = 0  # of those, bytes already in the file (whole pages while direct)
        self._written = 0  # bytes in the file

    def write(self, data: bytes | bytearray | memoryview) -> int:
        with memoryview(data) as view, view.cast("B") as source:
            total, offset = len(source), 0
            while offset < total:
                take = min(total - offset, BLOCK_BYTES - self._filled)
                self._block[self._filled : self._filled + take] = source[offset : offset + take]
                self._filled += take
                offset += take
                if self._filled == BLOCK_BYTES:
                    self._send(BLOCK_BYTES)
                    self._filled = self._sent = 0
        return total

    def tell(self) -> int:
        return self._written + self._filled - self._sent

    def flush(self) -> None:
        """Into the file: the whole pages gathered so far (everything, through the cache)."""
        self._send(self._filled - self._filled % PAGE_BYTES if self.direct else self._filled)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            if self._filled > self._sent:
                if self.direct:  # the tail is not a whole page
                    self.direct = self._set_direct(False)
                self._send(self._filled)
        finally:
            fd, self._fd = self._fd, -1
            try:
                os.close(fd)
            finally:
                try:
                    self._block.close()
                except BufferError:  # a view still alive somewhere: the mapping goes with it
                    pass

    def _send(self, end: int) -> None:
        """The block's bytes from what is already sent up to `end` into the file."""
        while self._sent < end:
            try:
                with memoryview(self._block) as block, block[self._sent : end] as part:
                    done = os.write(self._fd, part)
            except OSError as exc:
                # A direct write refused (EINVAL) wrote nothing: the page cache from here on.
                if exc.errno != errno.EINVAL or not self.direct:
                    raise
                self.direct = self._set_direct(False)
                continue
            self._sent += done
            self._written += done
            if self.direct and done % PAGE_BYTES:  # a short write leaves the rest unaligned
                self.direct = self._set_direct(False)

    def _set_direct(self, on: bool) -> bool:
        """O_DIRECT on or off; False when the file system refuses it (EINVAL)."""
        status = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETFL, status | O_DIRECT if on else status & ~O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            return False
        return on
