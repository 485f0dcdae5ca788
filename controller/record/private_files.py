"""Recordings are private to the daemon's user: they hold camera frames. Files are 0600 in a
0700 folder, set explicitly (chmod, not the open's mode alone), whatever the process's umask."""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_private_dir(path: Path) -> None:
    """`path` and its missing parents created; `path` itself made 0700 when this call created
    it (a folder that was there is the operator's: its mode is left as it is)."""
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:  # made meanwhile (another thread or process): not ours to change
        if path.is_dir():
            return
        raise  # a file where the folder should be: the write error says so
    os.chmod(path, DIR_MODE)  # the umask may have taken bits the mode asked for, never added


def make_private_file(fd: int) -> None:
    """A file just created through `fd`: 0600, owner read and write only."""
    os.fchmod(fd, FILE_MODE)
