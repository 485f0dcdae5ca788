"""A ring of observation slots in shared memory, with generation counters: the one mechanism
by which frames cross a process boundary without a socket.

    ring = SlotRing.create(parts, count)             # the owner: a file in /dev/shm
    ring = SlotRing.attach(path, parts, count)       # another process: the same memory
    generation = ring.write(i, {"front": frame})     # copy named parts into slot i
    views = ring.arrays(i)                           # numpy views, no copy
    ring.unchanged(i, generation)                    # still that observation? (after reading)

`parts` name the arrays of one slot, in order: (name, shape, dtype). Two users build on it: the
control process's slots for its inference process (controller.link.frame_slots: camera
frames and the state history), and the ring a same-host driver writes its camera frames into
(controller.wire.client, frames in place; the daemon hands it over in `welcome`).

Layout: a 64-byte header for the whole region (int64s: a heartbeat, a fingerprint of the parts
and the slot count), then `count` slots of [64-byte slot header | each part, 64-byte aligned].
A slot's header holds its generation: odd while a writer is writing it, even when its contents
are complete, one more pair per observation. A reader compares the generation it was told with
the slot's after reading: a slot that changed in between (torn) or holds another observation
(stale) is refused, never served. Writers call `begin` / `end` around writing in place, or
`write` to copy.

A driver's ring also says who owns each slot: the reader (the daemon) `hold`s the generation it
accepted and `release`s it when it has finished with it (SlotFrames does, when the daemon drops
the observation); the driver writes only slots nobody holds (`free`), and marks the slot it
names in an observation held in flight (`hold_in_flight`: the negative generation) until the
daemon's own hold replaces the mark, so a message still in the sockets keeps its frames. The
generation check stays the guarantee: a driver that ignores the holds only gets its
observations refused.

Only numpy and the standard library (a driver imports this).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import secrets
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

ALIGN = 64
HEADER_BYTES = 64
# Frames are copied in pieces this size: numpy holds the GIL for one whole copy, and the
# control loop's thread must not wait for a 3-camera observation (about 0.3 ms) to get it back.
COPY_PIECE_BYTES = 128 * 1024
_HEARTBEAT = 0  # int64 indices in the region header: a monotonic_ns written by the reader,
_LAYOUT = 1  # and a fingerprint of the parts and slot count the region was laid out for
_GENERATION = 0  # int64 indices in a slot's header: its generation,
_HELD = 1  # and who holds it: the reader (generation), a message in flight (-generation), 0 none

Part = tuple[str, tuple[int, ...], str]  # name, shape, numpy dtype name


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _fingerprint(parts: Sequence[Part], count: int) -> int:
    text = repr([(name, list(shape), dtype) for name, shape, dtype in parts] + [count]).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


def ring_bytes(parts: Sequence[Part], count: int) -> int:
    """The size of a ring of `count` slots of `parts`."""
    slot = HEADER_BYTES + sum(_aligned(_nbytes(shape, dtype)) for _, shape, dtype in parts)
    return HEADER_BYTES + count * slot


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


class SlotRing:
    """`count` slots of `parts` in one shared mapping (see the module doc)."""

    def __init__(self, path: Path, parts: Sequence[Part], count: int, owner: bool) -> None:
        self.path = Path(path)
        self.parts = tuple((name, tuple(shape), str(dtype)) for name, shape, dtype in parts)
        self.count = count
        self._owner = owner
        self.slot_bytes = (ring_bytes(self.parts, 1) - HEADER_BYTES) if count else 0
        self.size = ring_bytes(self.parts, count)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if owner else 0)
        fd = os.open(self.path, flags, 0o600)
        self._owner_fd: int | None = None
        try:
            if owner:
                # The creator holds a shared lock for as long as the ring lives: a file nobody
                # locks is an orphan (remove_orphans), whatever pid namespace its creator had.
                fcntl.flock(fd, fcntl.LOCK_SH)
                self._owner_fd = os.dup(fd)
                _reserve(fd, self.size, self.path)
            elif os.fstat(fd).st_size != self.size:
                raise ValueError(
                    f"shared observation slots {self.path} have {os.fstat(fd).st_size} bytes, "
                    f"expected {self.size} for this policy's spec"
                )
            self._map = mmap.mmap(fd, self.size)
        except BaseException:
            if self._owner_fd is not None:
                os.close(self._owner_fd)
                self.path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        self.buffer = np.frombuffer(self._map, dtype=np.uint8)
        self._region = self.buffer[:HEADER_BYTES].view(np.int64)
        fingerprint = _fingerprint(self.parts, count)
        if owner:
            self._region[_LAYOUT] = fingerprint
        elif int(self._region[_LAYOUT]) != fingerprint:
            self.close()
            raise ValueError(
                f"shared observation slots {self.path} were laid out for another policy spec "
                "(other cameras, state or slot count)"
            )
        self._headers: list[np.ndarray] = []
        self._arrays: list[dict[str, np.ndarray]] = []
        for i in range(count):
            base = HEADER_BYTES + i * self.slot_bytes
            self._headers.append(self.buffer[base : base + HEADER_BYTES].view(np.int64))
            offset = base + HEADER_BYTES
            arrays = {}
            for name, shape, dtype in self.parts:
                n = _nbytes(shape, dtype)
                arrays[name] = self.buffer[offset : offset + n].view(dtype).reshape(shape)
                offset += _aligned(n)
            self._arrays.append(arrays)

    @classmethod
    def create(cls, parts: Sequence[Part], count: int, directory: str | None = None) -> SlotRing:
        """A new ring in a private file under /dev/shm (memory, not disk), or `directory`."""
        return cls(new_path(directory), parts, count, owner=True)

    @classmethod
    def attach(cls, path: str | Path, parts: Sequence[Part], count: int) -> SlotRing:
        return cls(Path(path), parts, count, owner=False)

    # ---- writers -------------------------------------------------------------------------

    def begin(self, index: int) -> None:
        """Slot `index` is being written (odd generation) until `end`."""
        header = self._headers[index]
        if header[0] % 2 == 0:
            header[0] += 1

    def end(self, index: int) -> int:
        """Slot `index` is complete; returns its new (even) generation."""
        header = self._headers[index]
        if header[0] % 2:
            header[0] += 1
        return int(header[0])

    def write(self, index: int, arrays: Mapping[str, np.ndarray]) -> int:
        """Copy the named parts into slot `index` (others keep their contents); returns its new
        generation. A wrong shape raises ValueError (the slot is then complete but unnamed by
        any request)."""
        self.begin(index)
        try:
            targets = self._arrays[index]
            for name, value in arrays.items():
                target = targets[name]
                source = np.asarray(value)
                if source.shape != target.shape:
                    raise ValueError(f"{name!r}: expected shape {list(target.shape)}")
                if source.nbytes <= COPY_PIECE_BYTES:
                    np.copyto(target, source)
                    continue
                flat_source = np.ascontiguousarray(source).reshape(-1)
                flat_target = target.reshape(-1)
                step = max(COPY_PIECE_BYTES // target.itemsize, 1)
                for start in range(0, flat_target.size, step):
                    np.copyto(flat_target[start : start + step], flat_source[start : start + step])
        finally:
            generation = self.end(index)
        return generation

    # ---- readers -------------------------------------------------------------------------

    def arrays(self, index: int) -> dict[str, np.ndarray]:
        """The slot's parts, as views into the shared memory (no copy)."""
        return self._arrays[index]

    def generation(self, index: int) -> int:
        return int(self._headers[index][_GENERATION])

    # ---- ownership (a driver's ring) -------------------------------------------------------

    # Readers take `self._headers` once into a local: close() on another thread swaps it for
    # an empty list, and a closed ring then holds nothing and has nothing unchanged.

    def hold(self, index: int, generation: int) -> None:
        """The reader keeps slot `index` (as `generation`): the writer leaves it alone. Another
        observation's in-flight mark (a newer one, named after this message's grace ran out)
        is left in place: this one is superseded anyway, and the newer one keeps its slot."""
        headers = self._headers
        if headers:
            held = int(headers[index][_HELD])
            if held >= 0 or held == -generation:
                headers[index][_HELD] = generation

    def hold_in_flight(self, index: int, generation: int) -> None:
        """The writer has named `generation` in a message the reader has not read yet (a
        negative hold): the slot is not free until the reader holds it and releases it."""
        headers = self._headers
        if headers:
            headers[index][_HELD] = -generation

    def unsent(self, index: int, generation: int) -> None:
        """The writer's message naming `generation` never left: the slot is free again (unless
        the reader holds it by now)."""
        headers = self._headers
        if headers and headers[index][_HELD] == -generation:
            headers[index][_HELD] = 0

    def held(self, index: int) -> int:
        """The generation held there: positive by the reader, negative while in flight, 0 none."""
        return int(self._headers[index][_HELD])

    def release(self, index: int, generation: int) -> None:
        """The reader is done with `generation` (a later hold of the slot stays)."""
        headers = self._headers
        if headers and headers[index][_HELD] == generation:
            headers[index][_HELD] = 0

    def free(self, index: int) -> bool:
        """Whether the writer may write slot `index` (the reader holds nothing there)."""
        return int(self._headers[index][_HELD]) == 0

    def unchanged(self, index: int, generation: int) -> bool:
        """Whether slot `index` still holds the complete observation `generation`."""
        headers = self._headers
        return bool(headers) and generation % 2 == 0 and int(headers[index][0]) == generation

    # ---- heartbeat ---------------------------------------------------------------------------

    def beat(self) -> None:
        """The reader says it is alive (the inference process, between requests)."""
        self._region[_HEARTBEAT] = time.monotonic_ns()

    def last_beat_ns(self) -> int:
        return int(self._region[_HEARTBEAT])

    @property
    def closed(self) -> bool:
        return not self._headers and self.count > 0

    def close(self) -> None:
        """Unmap (and, for the creator, remove the file). Views taken before become invalid."""
        self.buffer = np.empty(0, dtype=np.uint8)
        self._region = np.empty(0, dtype=np.int64)
        self._headers, self._arrays = [], []
        try:
            self._map.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with it
        if self._owner:
            self.path.unlink(missing_ok=True)
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None


def _reserve(fd: int, size: int, path: Path) -> None:
    """Give the file its memory now: a sparse file in a full /dev/shm would kill the process
    with SIGBUS at its first write instead. OSError (one sentence) when there is no room."""
    allocate = getattr(os, "posix_fallocate", None)  # Linux; not on macOS (drivers attach only)
    try:
        if allocate is not None:
            allocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
    except OSError as exc:
        raise OSError(
            exc.errno,
            f"no room for {size / 1e6:.1f} MB of shared observation slots in {path.parent} "
            f"({exc.strerror}); free space there or enlarge it (Docker: --shm-size)",
        ) from None


SLOT_FILE_PREFIX = "tempo-slots-"  # then the creating process's pid, "-", a random suffix


_SWEPT: set[str] = set()  # directories this process has already cleared of orphans


def new_path(directory: str | None = None) -> Path:
    """A fresh, unguessable file name under /dev/shm (or `directory`); slot files that dead
    processes left there are removed on this process's first ring there (a driver's hello
    creates one on the daemon's loop thread: the sweep is not repeated per hello)."""
    if directory is None:
        directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    if directory not in _SWEPT:
        _SWEPT.add(directory)
        remove_orphans(Path(directory))
    return Path(directory) / f"{SLOT_FILE_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"


def remove_orphans(directory: Path, min_age_s: float = 10.0) -> list[Path]:
    """Delete slot files that no live ring owns: a daemon that was killed (SIGKILL) cannot
    delete its own, and /dev/shm is memory. A file is owned while its creator holds its lock
    (works across pid namespaces: containers sharing /dev/shm); files younger than `min_age_s`
    are left alone, since their creator may not have taken the lock yet."""
    removed = []
    now = time.time()
    for path in directory.glob(f"{SLOT_FILE_PREFIX}*"):
        try:
            if now - path.stat().st_mtime < min_age_s:
                continue
            fd = os.open(path, os.O_RDONLY)
        except OSError:  # another user's, or removed meanwhile: not ours to worry about
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # locked: its ring is alive
            continue
        else:
            path.unlink(missing_ok=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


class SlotFrames(dict[str, np.ndarray]):
    """Camera frames that lie in slot `index` of `ring` (views, no copy), as the observation
    `generation` wrote them, held for as long as this object lives: whoever reads them checks
    `unchanged()` afterwards, and refuses what it read if the writer has touched the slot
    since."""

    def __init__(self, ring: SlotRing, index: int, generation: int, names: Sequence[str]) -> None:
        arrays = ring.arrays(index)
        super().__init__((name, arrays[name]) for name in names)
        self.ring = ring
        self.index = index
        self.generation = generation
        ring.hold(index, generation)

    def unchanged(self) -> bool:
        return not self.ring.closed and self.ring.unchanged(self.index, self.generation)

    def __del__(self) -> None:
        # The daemon has dropped the observation (served, superseded, or its episode ended):
        # the slot is the driver's again.
        self.ring.release(self.index, self.generation)
