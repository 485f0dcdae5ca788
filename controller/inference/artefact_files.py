"""A built artefact's files (an AOTInductor package and its manifest) opened as Tempo loads
them: once, by descriptor, and checked on that descriptor, never by path and then opened again.

    with open_artefact(package, "package") as opened:
        if opened.sha256() != recorded: ...
        loader(opened.path_for_loader)     # /proc/self/fd/N: the inode checked and hashed
    record = read_manifest(manifest)       # JSON, bounded, checked as the package is

A package is code that runs in the inference process, so a file that another user owns (root
aside) or that others may write, a symbolic link, or anything but a regular file, is refused
with one clause (ArtefactRefused); so is a manifest, which says which checksum is good. The
folder is checked apart (artefact_identity.trusted_folder).

AOTInductor's loader takes a path, not a descriptor: it is handed /proc/self/fd/N, which opens
the inode that was checked and hashed even if the name is replaced meanwhile; no one else may
write that inode, so its bytes are the hashed ones. Copying the verified bytes to a private
0600 file would do too, at a cost: for a 1.5 MB package on the 2-core machine (AOTInductor
loader, median of 20 loads), by name 3.1 ms, by /proc/self/fd 3.0 ms, copied then loaded
9.2 ms; a large model's package is tens of MB. So the descriptor's path is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from controller.bounded_file import MAX_JSON_BYTES, decode, parse_nested, read_fd, regular_fd
from controller.inference.artefact_identity import ArtefactRefused

_HASH_CHUNK = 1 << 20


class OpenedArtefact:
    """One artefact file, open and checked: its descriptor, and the path its loader opens."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path
        self.path_for_loader = Path(f"/proc/self/fd/{fd}")

    def sha256(self) -> str:
        """The SHA-256 of the bytes behind the descriptor (read with pread, from the start)."""
        digest = hashlib.sha256()
        offset = 0
        while block := os.pread(self.fd, _HASH_CHUNK, offset):
            digest.update(block)
            offset += len(block)
        return digest.hexdigest()


@contextmanager
def open_artefact(path: Path, what: str) -> Iterator[OpenedArtefact]:
    """`path` open for reading, refused (ArtefactRefused) unless it is a regular file, not a
    link, owned by this process's user or root, and writable by no one else."""
    fd = regular_fd(path, ArtefactRefused, what, follow_links=False)
    try:
        _check_owner(fd, path)
        os.set_blocking(fd, True)
        yield OpenedArtefact(fd, path)
    finally:
        os.close(fd)


def read_manifest(path: Path) -> dict[str, Any]:
    """A manifest's JSON object, read from one checked descriptor with the bounded reader's
    limits (size, depth); ArtefactRefused with the reason otherwise."""
    with open_artefact(path, "manifest") as opened:
        data = read_fd(opened.fd, MAX_JSON_BYTES, ArtefactRefused, "manifest", path)
    text = decode(data, path, ArtefactRefused, "a manifest")
    try:
        record = parse_nested(json.loads, text, path.name, ArtefactRefused)
    except ValueError as exc:
        raise ArtefactRefused(f"its manifest is unreadable: {exc}") from None
    if not isinstance(record, dict):
        raise ArtefactRefused("its manifest is unreadable: not a JSON object")
    return record


def unusable_slots(folder: Path) -> list[tuple[Path, str]]:
    """(Manifest, why) for each slot in `folder` that serve could not use as it stands: a
    manifest it would refuse to read, or a package that route says to load and that would be
    refused (`tempo build` checks what it leaves behind). Identities are not compared: a slot
    for another model is only ignored."""
    unusable: list[tuple[Path, str]] = []
    for manifest in sorted(folder.glob("step-*.json")):
        try:
            record = read_manifest(manifest)
            if record.get("route") == "aoti":
                with open_artefact(manifest.with_suffix(".pt2"), "package") as opened:
                    if opened.sha256() != record.get("sha256"):
                        raise ArtefactRefused("its package does not match its checksum")
        except ArtefactRefused as exc:
            unusable.append((manifest, str(exc)))
    return unusable


def _check_owner(fd: int, path: Path) -> None:
    info = os.fstat(fd)
    if info.st_uid not in (os.getuid(), 0):
        raise ArtefactRefused(f"{path.name} belongs to another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(info.st_mode)
        raise ArtefactRefused(f"{path.name} is writable by other users (mode {mode:04o})")
