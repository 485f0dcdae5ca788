"""The recorder's direct-write stream (controller/record/direct_file.py): the file holds exactly
what was written, across block boundaries, through the page cache or past it; tell counts every
byte; an existing file is never overwritten; a file system refusing O_DIRECT still gets the
file, through the page cache."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from controller.record import direct_file
from controller.record.direct_file import BLOCK_BYTES, DirectFile


@pytest.mark.parametrize("direct", [True, False])
def test_the_file_holds_exactly_what_was_written(tmp_path, direct) -> None:
    rng = np.random.default_rng(0)
    sizes = [9, 1, BLOCK_BYTES - 10, 20, BLOCK_BYTES, 2 * BLOCK_BYTES + 7, 0, 300_000]
    pieces = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]
    stream = DirectFile(tmp_path / "a.mcap", direct)
    written = 0
    for piece in pieces:
        assert stream.write(memoryview(piece)) == len(piece)
        written += len(piece)
        assert stream.tell() == written
    stream.flush()
    stream.close()
    stream.close()  # a second close does nothing
    assert (tmp_path / "a.mcap").read_bytes() == b"".join(pieces)
    if not direct:
        assert not stream.direct


def test_an_existing_file_is_never_overwritten(tmp_path) -> None:
    (tmp_path / "taken.mcap").write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        DirectFile(tmp_path / "taken.mcap")
    assert (tmp_path / "taken.mcap").read_bytes() == b"someone else's"


def test_a_file_system_refusing_o_direct_gets_the_file_through_the_page_cache(
    tmp_path, monkeypatch
) -> None:
    real_open = os.open

    def refusing(path, flags, mode=0o777):  # type: ignore[no-untyped-def]
        if direct_file.O_DIRECT and flags & direct_file.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing)
    stream = DirectFile(tmp_path / "b.mcap")
    stream.write(b"x" * (BLOCK_BYTES + 5))
    stream.close()
    assert not stream.direct
    assert (tmp_path / "b.mcap").read_bytes() == b"x" * (BLOCK_BYTES + 5)
