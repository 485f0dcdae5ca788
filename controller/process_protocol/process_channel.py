"""The message channel between the control process and one of its inference processes.

    ours, theirs = ProcessChannel.pair()    # before spawning: the child inherits `theirs`
    ours.send(data)                         # never waits (the control loop's thread sends)
    data = ours.receive()                   # the next whole message, or None for now
    child = ProcessChannel.inherited(fd)    # in the child (`--channel-fd`)
    child.send(data, timeout_s=None)        # the child may wait for room
    data = child.receive(timeout_ms=50)     # ... and for a message
    data = child.receive(50, spin_s=0.01)   # ... not sleeping for the first 10 ms of the wait
    ours.send(data, fds=[fd])               # a descriptor travels with a message ...
    fd = child.take_fd()                    # ... and is the receiver's, in the order sent

A Unix stream socket pair, each message a 4-byte length then its bytes. Both ends see the other's
death at once (end of stream, a broken pipe): nothing is queued for a process that will never
read it, and no file is left behind.

Why not ZeroMQ as everywhere else: a ZeroMQ message passes through a background I/O thread on
each side, two more wake-ups each way. On an H100 host a small message's round trip took 183 us
(p50) over a ZeroMQ ipc PAIR against 51 us over a socket pair, and it is on every observation's
path.

`send` without a timeout never waits: what the kernel's buffer does not take now (a message
larger than it, about 200 KB, or a peer that is slow to read) stays queued here and goes out on
later calls (`send`, `receive`, `poll`). A peer that stops reading is the supervisor's business:
its request gets no answer, and the control side restarts the process when the answer is
overdue. Only past `MAX_QUEUED_BYTES` queued here does `send` raise ChannelBusy, and the channel
is unusable from then on.

File descriptors (shared memory) travel as SCM_RIGHTS beside the bytes: `send` keeps a copy of
each until the kernel has taken them, with the first bytes sent from then on, so they arrive no
later than their message. The receiver keeps them in the order they came; whoever decodes a
message that carries one takes the next (`take_fd`), also when it refuses the message.
"""

from __future__ import annotations

import array
import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Sequence

from controller.process_protocol.message_codec import MAX_MESSAGE_BYTES, MessageError

_LENGTH = struct.Struct("<I")
_READ_BYTES = 1 << 20
MAX_QUEUED_BYTES = 2 * MAX_MESSAGE_BYTES  # unsent bytes kept for a slow peer
MAX_FDS = 64  # descriptors taken in one read (more are closed by the kernel: never sent)
_FDS_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)


class ChannelError(OSError):
    """The channel cannot carry the message: the peer is gone or not reading."""


class ChannelClosed(ChannelError):
    """The other process has closed its end (it exited or was killed)."""


class ChannelBusy(ChannelError):
    """The other process is not taking messages; the channel is unusable from now on."""


class ProcessChannel:
    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._buffer = bytearray()  # received, not yet taken
        self._queued = bytearray()  # sent, not yet taken by the kernel
        self._broken: ChannelError | None = None
        self._fds_out: list[int] = []  # copies of descriptors to send with the next bytes
        self._fds_in: deque[int] = deque()  # received, not yet taken
        self.closed = False  # the peer's end of stream was seen (or close() was called)

    @classmethod
    def pair(cls) -> tuple[ProcessChannel, socket.socket]:
        """Our end, and the other end as a socket for a child (pass its fileno in `pass_fds`,
        which makes it inheritable there only, then close it here)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        return cls(ours), theirs

    @classmethod
    def inherited(cls, fd: int) -> ProcessChannel:
        """The end a parent passed to this process as file descriptor `fd`."""
        sock = socket.socket(fileno=fd)
        sock.set_inheritable(False)  # a process we start must not hold the channel open
        return cls(sock)

    def fileno(self) -> int:
        """For polling beside other sockets (a zmq.Poller takes file descriptors)."""
        return self._sock.fileno()

    def filenos(self) -> list[int]:
        """As a Pollable (controller.feed.inference_feed): its one descriptor."""
        return [self._sock.fileno()]

    def send(self, data: bytes, timeout_s: float | None = 0.0, fds: Sequence[int] = ()) -> None:
        """Send one message, and `fds` with it (copied: the caller may close its own). With
        timeout_s 0 (the default) nothing waits: what does not go out now is queued (see the
        module doc). With a timeout (None: as long as it takes) the message has left when this
        returns; ChannelBusy if it has not in time. ChannelClosed when the peer is gone."""
        if self._broken is not None:
            raise self._broken
        if len(data) > MAX_MESSAGE_BYTES:
            raise MessageError(
                f"a message between the processes is {len(data)} bytes, more than "
                f"{MAX_MESSAGE_BYTES}; this is a bug (a chunk or memory beyond the spec's bounds)"
            )
        if len(self._fds_out) + len(fds) > MAX_FDS:  # the peer has not read for a while
            raise self._busy()
        self._fds_out += [os.dup(fd) for fd in fds]
        self._queued += _LENGTH.pack(len(data))
        self._queued += data
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self._flush()
            if self._broken is not None:
                raise self._broken
            if not self._queued:
                return
            if timeout_s == 0:
                if len(self._queued) > MAX_QUEUED_BYTES:
                    raise self._busy()
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise self._busy()
            _wait(self._sock, select.POLLOUT, remaining)

    def _busy(self) -> ChannelBusy:
        """Break the channel (a message may be half written): every later send raises this."""
        self._broken = busy = ChannelBusy("the other process is not taking messages")
        return busy

    def receive(self, timeout_ms: int = 0, spin_s: float = 0.0) -> bytes | None:
        """The next whole message, or None if none has arrived within `timeout_ms` (0: do not
        wait). None too once the peer has gone (`closed` says so). For the first `spin_s` of
        the wait it reads without sleeping: a message that comes meanwhile is taken within
        microseconds instead of after the kernel wakes this process, and a core stays busy."""
        self._flush()
        now = time.monotonic()
        deadline = now + timeout_ms / 1000
        spin_until = min(deadline, now + spin_s)
        while True:
            message = self._take()
            if message is not None or self.closed:
                return message
            if not self._read():
                now = time.monotonic()
                if now < spin_until:
                    continue
                remaining = deadline - now
                if remaining <= 0:
                    return None
                _wait(self._sock, select.POLLIN, remaining)

    def poll(self, timeout_ms: int) -> bool:
        """Whether a message (or the peer's end) is waiting, after up to `timeout_ms`."""
        self._flush()
        if self._take_ready() or self.closed:
            return True
        return _wait(self._sock, select.POLLIN, timeout_ms / 1000)

    def take_fd(self) -> int | None:
        """The next descriptor received (the caller's to close), or None if none came."""
        return self._fds_in.popleft() if self._fds_in else None

    def close(self) -> None:
        self.closed = True
        self._sock.close()
        _close_all(self._fds_out)
        _close_all(self._fds_in)

    def _flush(self) -> None:
        """Hand the kernel what it takes of the queued bytes, without waiting."""
        if not self._queued or self._broken is not None:
            return
        try:
            if self._fds_out:
                rights = array.array("i", self._fds_out)
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights.tobytes())]
                sent = self._sock.sendmsg([self._queued], ancillary)
                _close_all(self._fds_out)  # the peer has its own now
            else:
                sent = self._sock.send(self._queued)
        except BlockingIOError:
            return
        except OSError:  # a broken pipe or a reset: the peer has gone
            self._queued.clear()
            _close_all(self._fds_out)
            self._broken = ChannelClosed("the other process has gone")
            return
        del self._queued[:sent]

    def _read(self) -> bool:
        """Read what has arrived into the buffer; False when nothing had."""
        try:
            data, ancillary, _, _ = self._sock.recvmsg(
                _READ_BYTES, _FDS_SPACE, socket.MSG_CMSG_CLOEXEC
            )
        except BlockingIOError:
            return False
        except OSError:  # a reset: the peer has gone
            data, ancillary = b"", []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self._fds_in.extend(fds)
        if not data:
            self.closed = True  # end of stream: the other process has gone
            return True
        self._buffer += data
        return True

    def _take_ready(self) -> bool:
        if len(self._buffer) < _LENGTH.size:
            return False
        (length,) = _LENGTH.unpack_from(self._buffer)
        if length > MAX_MESSAGE_BYTES:  # not a length we wrote: the stream is corrupt
            raise MessageError(f"a message between the processes claims {length} bytes")
        return len(self._buffer) >= _LENGTH.size + length

    def _take(self) -> bytes | None:
        if not self._take_ready():
            return None
        (length,) = _LENGTH.unpack_from(self._buffer)
        end = _LENGTH.size + length
        message = bytes(self._buffer[_LENGTH.size : end])
        del self._buffer[:end]
        return message


def _close_all(fds: list[int] | deque[int]) -> None:
    while fds:
        os.close(fds.pop())


def _wait(sock: socket.socket, event: int, timeout_s: float | None) -> bool:
    """Whether `sock` became ready for `event` within `timeout_s` (None: no limit). poll(2),
    not select(2): select cannot take a descriptor past 1023, and a daemon with many robots
    has that many."""
    poller = select.poll()
    poller.register(sock, event)
    timeout_ms = None if timeout_s is None else max(0, int(timeout_s * 1000 + 0.999))
    return bool(poller.poll(timeout_ms))
