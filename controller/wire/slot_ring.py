"""A ring of observation slots in shared memory, with generation counters: the one mechanism
by which frames cross a process boundary without a socket.

    ring = SlotRing.create(parts, count)             # the owner: sealed anonymous memory
    ring = SlotRing.attach(path, parts, count)       # another process: the same memory, by
    ring = SlotRing.attach_fd(fd, parts, count, name)  # ... its /proc path or a passed fd
    generation = ring.write(i, {"front": frame})     # copy named parts into slot i
    views = ring.arrays(i)                           # numpy views, no copy
    ring.unchanged(i, generation)                    # still that observation? (after reading)

`parts` name the arrays of one slot, in order: (name, shape, dtype). Two users build on it: the
control process's slots for its inference process (controller.process_protocol.frame_slots: camera
frames and the state history), and the ring a same-host driver writes its camera frames into
(controller.wire.client, frames in place; the daemon hands it over in `welcome`).

Layout: a 64-byte header for the whole region (int64s: a heartbeat, a fingerprint of the parts
and the slot count), then `count` slots of [64-byte slot header | each part, 64-byte aligned].
A slot's header holds its generation: odd while a writer is writing it, even when its contents
are complete, one more pair per observation. A reader compares the generation it was told with
the slot's after reading: a slot that changed in between (torn) or holds another observation
(stale) is refused, never served. Writers call `begin` / `end` around writing in place, or
`write` to copy.

The memory is a memfd sealed against shrinking and growing, with no name on disk: no process
can truncate it under a mapping (which would kill the reader with SIGBUS) or delete it, and
it goes away with its last descriptor and mapping. Its `path`, `/proc/<creator pid>/fd/<fd>`,
opens it for a process of the same user (a driver); the inference process gets the descriptor
itself over its socket. Attaching refuses memory that is not sealed. `reset` lays a header
out afresh (the control process, before every new inference process attaches), and slots
written with a checksum say whether their data is still what was written (`intact`).

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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

ALIGN = 64
HEADER_BYTES = 64
# Frames are copied in pieces this size: numpy holds the GIL for one whole copy, and the
# control loop's thread must not wait for a 3-camera observation (about 0.3 ms) to get it back.
COPY_PIECE_BYTES = 128 * 1024
SUM_PIECE_BYTES = 512 * 1024  # and summed in pieces this size (a sum is cheaper than a copy)
_HEARTBEAT = 0  # int64 indices in the region header: a monotonic_ns written by the reader,
_LAYOUT = 1  # and a fingerprint of the parts and slot count the region was laid out for
_GENERATION = 0  # int64 indices in a slot's header: its generation,
_HELD = 1  # who holds it: the reader (generation), a message in flight (-generation), 0 none,
_CHECKSUM = 2  # and the sum of its data as its writer left it (the control process's slots)
# Sealed: nobody who opens the memory can shrink it under a mapping (SIGBUS) or grow it.
_SEALS = ("F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_SEAL")

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

    def __init__(self, parts: Sequence[Part], count: int, fd: int, path: Path, owner: bool) -> None:
        """Map the memory open as `fd` (this object's from now on: the owner keeps it open to
        hand it to other processes, anyone else closes it once mapped); `path` names it."""
        self.path = Path(path)
        self.parts = tuple((name, tuple(shape), str(dtype)) for name, shape, dtype in parts)
        self.count = count
        self._owner = owner
        self.slot_bytes = (ring_bytes(self.parts, 1) - HEADER_BYTES) if count else 0
        self.size = ring_bytes(self.parts, count)
        try:
            if not owner:
                _check_sealed(fd, self.size, self.path)
            self._map = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        if not owner:
            os.close(fd)
            self._fd = None
        self.buffer = np.frombuffer(self._map, dtype=np.uint8)
        self._region = self.buffer[:HEADER_BYTES].view(np.int64)
        self._fingerprint = fingerprint = _fingerprint(self.parts, count)
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
        self._data: list[np.ndarray] = []  # each slot's parts as one uint64 run (the checksum)
        for i in range(count):
            base = HEADER_BYTES + i * self.slot_bytes
            self._headers.append(self.buffer[base : base + HEADER_BYTES].view(np.int64))
            offset = base + HEADER_BYTES
            self._data.append(self.buffer[offset : base + self.slot_bytes].view(np.uint64))
            arrays = {}
            for name, shape, dtype in self.parts:
                n = _nbytes(shape, dtype)
                arrays[name] = self.buffer[offset : offset + n].view(dtype).reshape(shape)
                offset += _aligned(n)
            self._arrays.append(arrays)

    @classmethod
    def create(cls, parts: Sequence[Part], count: int) -> SlotRing:
        """A new ring in sealed anonymous memory (a memfd: no file anyone can remove, shrink
        or grow), named `/proc/<this pid>/fd/<fd>` for another process of this user to open."""
        fd = sealed_memory(ring_bytes(parts, count))
        return cls(parts, count, fd, Path(f"/proc/{os.getpid()}/fd/{fd}"), owner=True)

    @classmethod
    def attach(cls, path: str | Path, parts: Sequence[Part], count: int) -> SlotRing:
        """The ring another process created, opened by its `path` (ValueError when it is not
        sealed memory of the expected size; OSError when it cannot be opened)."""
        return cls(parts, count, os.open(path, os.O_RDWR), Path(path), owner=False)

    @classmethod
    def attach_fd(cls, fd: int, parts: Sequence[Part], count: int, name: str) -> SlotRing:
        """The ring another process handed over as file descriptor `fd` (taken: closed here)."""
        return cls(parts, count, fd, Path(name), owner=False)

    def fileno(self) -> int:
        """The creator's descriptor of the memory (to pass to another process)."""
        if self._fd is None:
            raise ValueError("only the creator of shared observation slots can hand them over")
        return self._fd

    def reset(self) -> None:
        """Lay the header out afresh (the creator, before a new reader attaches): the layout's
        fingerprint, a heartbeat of now, every slot empty. Whatever was scribbled there goes."""
        self._region[:] = 0
        self._region[_LAYOUT] = self._fingerprint
        for header in self._headers:
            header[:] = 0
        self.beat()

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

    def write(self, index: int, arrays: Mapping[str, np.ndarray], checksum: bool = False) -> int:
        """Copy the named parts into slot `index` (others keep their contents); returns its new
        generation. With `checksum` the slot's header records the sum of its data (see
        `intact`). A wrong shape raises ValueError (the slot is then complete but unnamed by
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
            if checksum:
                self._headers[index].view(np.uint64)[_CHECKSUM] = self._sum(index)
        finally:
            generation = self.end(index)
        return generation

    def _sum(self, index: int) -> int:
        """The slot's data summed as uint64 words (wrapping), in pieces (the GIL, as for the
        copy). A sum, not zlib.crc32: about 50 us for a 480x640x3 frame against 0.7 to 1 ms
        (python -m timeit on the 2-core CI machine), paid on the control loop's thread. It
        finds bytes changed behind the writer's back; it is no defence against a writer who
        also rewrites the sum (nothing kept in the same memory is)."""
        data = self._data[index]
        step = SUM_PIECE_BYTES // 8
        total = 0
        for start in range(0, data.size, step):
            total += int(np.add.reduce(data[start : start + step], dtype=np.uint64))
        return total % (1 << 64)

    def intact(self, index: int) -> bool:
        """Whether slot `index` still holds the data its writer summed (`write(checksum=True)`)."""
        headers = self._headers
        return bool(headers) and int(headers[index].view(np.uint64)[_CHECKSUM]) == self._sum(index)

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

    def header(self, index: int) -> np.ndarray:
        """Slot `index`'s header (int64s, the generation first), a view into the memory."""
        return self._headers[index]

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
        """Unmap (and, for the creator, close the memory). Views taken before become invalid."""
        self.buffer = np.empty(0, dtype=np.uint8)
        self._region = np.empty(0, dtype=np.int64)
        self._headers, self._arrays, self._data = [], [], []
        try:
            self._map.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with it
        if self._fd is not None:
            os.close(self._fd)  # the memory goes with the last descriptor and mapping
            self._fd = None


def sealed_memory(size: int) -> int:
    """A descriptor of `size` bytes of anonymous shared memory, sealed against shrinking and
    growing. Its pages are given now: with no room, an OSError (one sentence) here rather than
    a SIGBUS at the first write."""
    if not hasattr(os, "memfd_create") or not hasattr(fcntl, "F_ADD_SEALS"):
        raise OSError("shared observation slots need Linux (memfd_create and file seals)")
    fd = os.memfd_create("tempo-slots", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"no room for {size / 1e6:.1f} MB of shared observation slots in memory "
                f"({exc.strerror}); free memory or raise this process's memory limit",
            ) from None
        seals = 0
        for name in _SEALS:
            seals |= getattr(fcntl, name)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_sealed(fd: int, size: int, path: Path) -> None:
    """ValueError unless `fd` is memory nobody can shrink, of `size` bytes: a file that another
    process could truncate would kill this one with SIGBUS at its next read of it."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS) if hasattr(fcntl, "F_GET_SEALS") else 0
    except OSError:  # not a memfd: it cannot be sealed
        seals = 0
    shrink = getattr(fcntl, "F_SEAL_SHRINK", 0)
    if not shrink or not seals & shrink:
        raise ValueError(
            f"shared observation slots {path} are not sealed memory (anyone could shrink "
            "them); upgrade the older of driver and daemon"
        )
    if os.fstat(fd).st_size != size:
        raise ValueError(
            f"shared observation slots {path} have {os.fstat(fd).st_size} bytes, "
            f"expected {size} for this policy's spec"
        )


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
        self._header = ring.header(index)  # a view: the mapping outlives the ring's close
        ring.hold(index, generation)

    def unchanged(self) -> bool:
        return not self.ring.closed and self.ring.unchanged(self.index, self.generation)

    def written_as_read(self) -> bool:
        """Whether the slot still holds this observation, also after the ring was closed (its
        session ended): the flight recorder copies a session's last frames after that."""
        return self.generation % 2 == 0 and int(self._header[0]) == self.generation

    def __del__(self) -> None:
        # The daemon has dropped the observation (served, superseded, or its episode ended):
        # the slot is the driver's again.
        self.ring.release(self.index, self.generation)
