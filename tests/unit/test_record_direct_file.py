"""The recorder's direct-write stream (controller/record/direct_file.py): the file holds exactly
what was written, across block boundaries, past the page cache or through it; tell counts every
byte; flush puts whole pages in the file; an existing file is never overwritten. Faults are
made as the kernel makes them: a file system that refuses O_DIRECT does so once the file exists
(or at a write), and the file is then finished through the page cache; a full disk is an
OSError saying so, from write and from close, never a BufferError."""

from __future__ import annotations

import errno
import fcntl
import os

import numpy as np
import pytest

from controller.record import direct_file
from controller.record.direct_file import BLOCK_BYTES, PAGE_BYTES, DirectFile

needs_o_direct = pytest.mark.skipif(not direct_file.O_DIRECT, reason="O_DIRECT is Linux's")


def pieces_of(sizes: list[int]) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]


@pytest.mark.parametrize("direct", [True, False])
def test_the_file_holds_exactly_what_was_written(tmp_path, direct) -> None:
    sizes = [9, 1, BLOCK_BYTES - 10, 20, BLOCK_BYTES, 2 * BLOCK_BYTES + 7, 0, 300_000]
    pieces = pieces_of(sizes)
    stream = DirectFile(tmp_path / "a.mcap", direct)
    written = 0
    for index, piece in enumerate(pieces):
        assert stream.write(memoryview(piece)) == len(piece)
        written += len(piece)
        assert stream.tell() == written
        if index == 3:
            stream.flush()
            assert stream.tell() == written
    stream.close()
    stream.close()  # a second close does nothing
    assert (tmp_path / "a.mcap").read_bytes() == b"".join(pieces)
    if not direct:
        assert not stream.direct


@pytest.mark.parametrize("direct", [True, False])
def test_flush_puts_the_whole_pages_gathered_in_the_file(tmp_path, direct) -> None:
    (piece,) = pieces_of([2 * PAGE_BYTES + 100])
    stream = DirectFile(tmp_path / "a.mcap", direct)
    stream.write(piece)
    assert os.path.getsize(tmp_path / "a.mcap") == 0
    stream.flush()
    on_disk = 2 * PAGE_BYTES if stream.direct else len(piece)
    assert (tmp_path / "a.mcap").read_bytes() == piece[:on_disk]
    stream.write(piece)
    stream.close()
    assert (tmp_path / "a.mcap").read_bytes() == piece + piece


def test_an_existing_file_is_never_overwritten(tmp_path) -> None:
    (tmp_path / "taken.mcap").write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        DirectFile(tmp_path / "taken.mcap")
    assert (tmp_path / "taken.mcap").read_bytes() == b"someone else's"


@needs_o_direct
def test_a_file_system_refusing_o_direct_gets_the_file_through_the_page_cache(
    tmp_path, monkeypatch
) -> None:
    real_fcntl = fcntl.fcntl

    def refusing(fd, command, arg=0):  # type: ignore[no-untyped-def]
        if command == fcntl.F_SETFL and arg & direct_file.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_fcntl(fd, command, arg)

    monkeypatch.setattr(fcntl, "fcntl", refusing)
    stream = DirectFile(tmp_path / "b.mcap")
    stream.write(b"x" * (BLOCK_BYTES + 5))
    stream.close()
    assert not stream.direct
    assert (tmp_path / "b.mcap").read_bytes() == b"x" * (BLOCK_BYTES + 5)
    assert os.listdir(tmp_path) == ["b.mcap"]


@needs_o_direct
def test_a_direct_write_refused_goes_on_through_the_page_cache(tmp_path, monkeypatch) -> None:
    real_write = os.write
    refused = []

    def refusing_direct(fd, data):  # type: ignore[no-untyped-def]
        if fcntl.fcntl(fd, fcntl.F_GETFL) & direct_file.O_DIRECT:
            refused.append(len(data))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", refusing_direct)
    pieces = pieces_of([BLOCK_BYTES + 100, 50])
    stream = DirectFile(tmp_path / "c.mcap")
    for piece in pieces:
        stream.write(piece)
    stream.close()
    assert not stream.direct
    assert refused in ([], [BLOCK_BYTES])  # [] where this file system has no O_DIRECT
    assert (tmp_path / "c.mcap").read_bytes() == b"".join(pieces)


@pytest.mark.parametrize("direct", [True, False])
def test_a_full_disk_is_said_from_write_and_from_close(tmp_path, monkeypatch, direct) -> None:
    def full(fd, data):  # type: ignore[no-untyped-def]
        raise OSError(errno.ENOSPC, "No space left on device")

    stream = DirectFile(tmp_path / "d.mcap", direct)
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        stream.write(b"y" * (BLOCK_BYTES + 1))
    with pytest.raises(OSError, match="No space left"):
        stream.close()
    stream.close()  # closed once, even so
