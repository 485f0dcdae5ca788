"""Observation slots in shared memory: the frames and state of one observation, written by the
control process and read, in place, by the inference process.

    slots = FrameSlots.create(spec, count=2)         # control process: a file in /dev/shm
    generation = slots.write(i, images, state)       # copy one observation into slot i
    slots = FrameSlots.attach(path, spec)            # inference process: the same memory
    images, state = slots.views(i)                   # numpy views, no copy
    slots.check(i, generation)                       # still that observation? (after the DMA)

Layout: a 64-byte header for the whole region (the inference process's heartbeat), then `count`
slots of [64-byte slot header | frame of each camera | state history], each part 64-byte
aligned. A slot's header holds its generation counter: odd while a writer is copying into it,
even when the observation is complete, one more pair for every observation. A reader compares
the generation the request named with the slot's before and after reading: a slot that changed
in between (torn) or holds another observation (stale) is refused, never served.

Only numpy and the standard library: the control process imports this without torch.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import secrets
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from policies.base import PolicySpec

ALIGN = 64
HEADER_BYTES = 64
# Frames are copied in pieces this size: numpy holds the GIL for one whole copy, and the
# control loop's thread must not wait for a 3-camera observation (about 0.3 ms) to get it back.
COPY_PIECE_BYTES = 128 * 1024
_HEARTBEAT = 0  # int64 indices in the region header: the inference process's monotonic_ns,
_LAYOUT = 1  # and a fingerprint of the spec and slot count the region was laid out for


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _fingerprint(spec: PolicySpec, count: int) -> int:
    text = f"{spec.model_dump_json()}|{count}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


SLOT_FILE_PREFIX = "tempo-slots-"  # then the creating process's pid, "-", a random suffix


def remove_orphans(directory: Path) -> list[Path]:
    """Delete slot files whose creating process is gone: a control process that was killed
    (SIGKILL, a power cut of the process) cannot delete its own, and /dev/shm is memory."""
    removed = []
    for path in directory.glob(f"{SLOT_FILE_PREFIX}*-*"):
        pid_text = path.name[len(SLOT_FILE_PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:  # another user's, or removed meanwhile: not ours to worry about
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


class TornSlot(RuntimeError):
    """The slot no longer holds the observation a request named (torn or overwritten)."""


class FrameSlots:
    """`count` observation slots shaped for `spec` in one shared mapping (see the module doc)."""

    def __init__(self, path: Path, spec: PolicySpec, count: int, owner: bool) -> None:
        self.path = Path(path)
        self.spec = spec
        self.count = count
        self._owner = owner
        self._frame_bytes = [c.height * c.width * 3 for c in spec.cameras]
        state_bytes = 4 * spec.state_history * spec.state_size
        self.slot_bytes = HEADER_BYTES + sum(_aligned(n) for n in self._frame_bytes)
        self.slot_bytes += _aligned(state_bytes)
        self.size = HEADER_BYTES + count * self.slot_bytes
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if owner else 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            if owner:
                os.ftruncate(fd, self.size)
            elif os.fstat(fd).st_size != self.size:
                raise ValueError(
                    f"shared observation slots {self.path} have {os.fstat(fd).st_size} bytes, "
                    f"expected {self.size} for this policy's spec"
                )
            self._map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.buffer = np.frombuffer(self._map, dtype=np.uint8)
        self._region = self.buffer[:HEADER_BYTES].view(np.int64)
        fingerprint = _fingerprint(spec, count)
        if owner:
            self._region[_LAYOUT] = fingerprint
        elif int(self._region[_LAYOUT]) != fingerprint:
            self.close()
            raise ValueError(
                f"shared observation slots {self.path} were laid out for another policy spec"
            )
        self._headers: list[np.ndarray] = []
        self._frames: list[dict[str, np.ndarray]] = []
        self._states: list[np.ndarray] = []
        for i in range(count):
            base = HEADER_BYTES + i * self.slot_bytes
            self._headers.append(self.buffer[base : base + HEADER_BYTES].view(np.int64))
            offset = base + HEADER_BYTES
            frames = {}
            for camera, n in zip(spec.cameras, self._frame_bytes, strict=True):
                frames[camera.name] = self.buffer[offset : offset + n].reshape(camera.shape)
                offset += _aligned(n)
            self._frames.append(frames)
            n = state_bytes
            state = self.buffer[offset : offset + n].view(np.float32)
            self._states.append(state.reshape(spec.state_history, spec.state_size))

    @classmethod
    def create(cls, spec: PolicySpec, count: int, directory: str | None = None) -> FrameSlots:
        """New slots in a private file under /dev/shm (memory, not disk), or `directory`."""
        if directory is None:
            directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        remove_orphans(Path(directory))
        path = Path(directory) / f"{SLOT_FILE_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        return cls(path, spec, count, owner=True)

    @classmethod
    def attach(cls, path: str | Path, spec: PolicySpec, count: int) -> FrameSlots:
        return cls(Path(path), spec, count, owner=False)

    # ---- writer (control process) ----------------------------------------------------------

    def write(self, index: int, images: Mapping[str, np.ndarray], state: np.ndarray) -> int:
        """Copy one observation into slot `index`; returns its new (even) generation. The
        caller has checked shapes and dtypes (np.copyto raises on a shape mismatch)."""
        header = self._headers[index]
        header[0] += 1  # odd: being written
        try:
            for name, frame in self._frames[index].items():
                source = np.ascontiguousarray(images[name]).reshape(-1)
                target = frame.reshape(-1)
                if source.shape != target.shape:
                    raise ValueError(f"camera {name!r}: expected a frame of shape {frame.shape}")
                for start in range(0, target.size, COPY_PIECE_BYTES):
                    end = start + COPY_PIECE_BYTES
                    np.copyto(target[start:end], source[start:end])
            np.copyto(self._states[index], state)
        finally:
            header[0] += 1  # even; a failed write is never named by a request
        return int(header[0])

    # ---- reader (inference process) --------------------------------------------------------

    def views(self, index: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The slot's frames and state, as views into the shared memory (no copy)."""
        return self._frames[index], self._states[index]

    def check(self, index: int, generation: int) -> None:
        """Raise TornSlot unless slot `index` still holds the complete observation `generation`."""
        now = int(self._headers[index][0])
        if now != generation or generation % 2:
            raise TornSlot(
                f"observation slot {index} holds generation {now}, the request named "
                f"{generation}: it was overwritten or is being written"
            )

    # ---- heartbeat ---------------------------------------------------------------------------

    def beat(self) -> None:
        """The inference process says it is alive (from its serving loop, between requests)."""
        self._region[_HEARTBEAT] = time.monotonic_ns()

    def last_beat_ns(self) -> int:
        return int(self._region[_HEARTBEAT])

    def close(self) -> None:
        """Unmap (and, for the creator, remove the file). Views taken before become invalid."""
        self._region = self.buffer = np.empty(0, dtype=np.uint8)
        self._headers, self._frames, self._states = [], [], []
        try:
            self._map.close()
        except BufferError:
            pass  # a view is still alive somewhere; the mapping goes with the process
        if self._owner:
            self.path.unlink(missing_ok=True)
