"""The robot side of the remote inference link (`tempo infer-relay`, spawned as if it were the
inference process when `policy.remote` is set).

    code = run_relay(remote, channel_fd)    # the exit code; the daemon restarts it on exit

To the daemon this process *is* its inference process: it speaks the process protocol on the
socket pair the daemon passed, says `standby`, `hello`, `ready` and sends chunks, so the
supervisor, restarts, standbys and holds work unchanged. Behind it, one CurveZMQ DEALER
connection to a `tempo infer-server`, which runs a real inference process for this connection
and relays the same messages. What cannot cross a network is replaced here: the observation
slots' frames are read out and sent inline with each `infer` (remote_frames), a driver's frame
ring is refused (its frames are copied into the slots instead), and the slots' heartbeat is
beaten when the server says its process beat. Timed pings give the link's round trip and
the server's clock offset (`LinkClock`): each chunk's `received_ns` is moved onto this PC's
clock and its status carries them (`policy.link` in `tempo status`). A server silent for
`timeout_s`, or one whose process ended, ends this process: the daemon holds its robots and
starts a new relay, which connects again. Imports no torch.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

import zmq

from controller.errors import SecurityError
from controller.process_protocol.frame_slots import FrameSlots, TornSlot
from controller.process_protocol.parent_death import die_with_parent
from controller.process_protocol.process_channel import ChannelError, ProcessChannel
from controller.process_protocol.process_messages import (
    AttachRing,
    AttachSlots,
    ChunkReply,
    DetachRing,
    FailedStart,
    Hello,
    Infer,
    Message,
    RequestFailed,
    Stop,
    decode,
    encode,
)
from controller.process_protocol.remote_frames import frames_parts
from controller.wire.curve import load_client_keys
from policies.base import PolicySpec

log = logging.getLogger(__name__)

POLL_MS = 50
CLOCK_SAMPLES = 32  # round trips kept: the offset is the shortest one's (least queueing in it)
_NS = struct.Struct("<q")
_HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


@dataclass(frozen=True)
class RemoteServer:
    """Where the server is and the keys to reach it (policy.remote, as plain values)."""

    address: str
    server_key: Path
    client_key: Path
    timeout_s: float


class RelayEnded(Exception):
    """The link is over (the reason is the message); the relay exits with `code`."""

    def __init__(self, why: str, code: int) -> None:
        super().__init__(why)
        self.code = code


class Relay:
    def __init__(self, remote: RemoteServer, channel: ProcessChannel, context: zmq.Context) -> None:
        self.remote = remote
        self.channel = channel
        keys = load_client_keys(remote.client_key, remote.server_key)
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        keys.apply(self.socket)
        self.monitor = self.socket.get_monitor_socket(_HANDSHAKE_FAILED)
        self.socket.connect(remote.address)
        self.spec: PolicySpec | None = None
        self.slots: FrameSlots | None = None
        self.heard = False  # anything from the server yet
        self.clock = LinkClock()
        self.last_heard = self.last_ping = time.monotonic()

    def run(self) -> None:
        self._send_server(b"open")
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self.monitor, zmq.POLLIN)
        poller.register(self.channel.fileno(), zmq.POLLIN)
        while True:
            events = dict(poller.poll(POLL_MS))
            if self.monitor in events:
                self._handshake_failed()
            if self.socket in events:
                while self.socket.poll(0):
                    self._from_server(self.socket.recv_multipart())
            self._from_daemon()
            now = time.monotonic()
            if now - self.last_heard > self.remote.timeout_s:
                self._silent()
            if now - self.last_ping > self.remote.timeout_s / 4:  # also says we are alive
                self.last_ping = now
                self._send_server(b"ping", _NS.pack(time.monotonic_ns()))

    def _handshake_failed(self) -> None:
        self.monitor.recv_multipart()
        raise RelayEnded(
            f"the inference server at {self.remote.address} refused the link: "
            "policy.remote.server_key must be its public key, and this daemon's public key "
            "(policy.remote.client_key) must be in its security.authorized_keys",
            1,
        )

    def _silent(self) -> None:
        if not self.heard:
            raise RelayEnded(
                f"no answer from the inference server at {self.remote.address} within "
                f"{self.remote.timeout_s:g} s: it is not running or not reachable",
                1,
            )
        raise RelayEnded(
            f"the inference server at {self.remote.address} has been silent for "
            f"{self.remote.timeout_s:g} s; the link is reopened",
            1,
        )

    def _send_server(self, *parts: bytes) -> None:
        self.socket.send_multipart(list(parts), copy=False)

    def _from_server(self, parts: list[bytes]) -> None:
        self.last_heard = time.monotonic()
        self.heard = True
        kind = parts[0]
        if kind == b"beat" and self.slots is not None:
            self.slots.beat()
        elif kind == b"pong" and len(parts) == 3:
            sent_ns, server_ns = _NS.unpack(parts[1])[0], _NS.unpack(parts[2])[0]
            self.clock.sample(sent_ns, server_ns, time.monotonic_ns())
        elif kind == b"gone":
            raise RelayEnded("the inference process on the server has ended", 1)
        elif kind == b"msg" and len(parts) == 2:
            message = decode(parts[1])
            if isinstance(message, Hello):
                self.spec = message.spec
            elif isinstance(message, ChunkReply):
                self._to_daemon(encode(self._on_robot_clock(message)))
                return
            self._to_daemon(parts[1])

    def _on_robot_clock(self, chunk: ChunkReply) -> ChunkReply:
        """The chunk with the time its request was taken on the robot PC's clock (the daemon
        reckons its trips with it), and the link's figures beside the runner's status."""
        status = chunk.status
        if status is not None:
            status = {**status, "link": {"address": self.remote.address, **self.clock.status()}}
        taken_ns = chunk.received_ns - self.clock.offset_ns
        return replace(chunk, received_ns=taken_ns, status=status)

    def _to_daemon(self, data: bytes) -> None:
        try:
            self.channel.send(data)
        except ChannelError:
            raise RelayEnded("the daemon has gone", 0) from None

    def _from_daemon(self) -> None:
        while True:
            data = self.channel.receive()
            if data is None:
                if self.channel.closed:
                    self._send_server(b"close")
                    raise RelayEnded("the daemon closed the channel", 0)
                return
            message = decode(data)
            if isinstance(message, AttachSlots):
                self._attach(message)  # and forwarded: the server hands its own slots
            if isinstance(message, AttachRing):
                self._refuse_ring(message)
            elif isinstance(message, Infer):
                self._infer(message, data)
            elif not isinstance(message, DetachRing):  # rings are never attached here
                self._send_server(b"msg", data)
                if isinstance(message, Stop):
                    raise RelayEnded("asked to stop", 0)

    def _attach(self, message: AttachSlots) -> None:
        fd = self.channel.take_fd()
        if fd is None or self.spec is None:
            raise RelayEnded("the daemon handed slots before the server's hello", 1)
        self.slots = FrameSlots.attach_fd(fd, self.spec, message.count, message.path)

    def _refuse_ring(self, message: AttachRing) -> None:
        fd = self.channel.take_fd()
        if fd is not None:
            os.close(fd)
        why = "frames go inline to a remote inference server; a driver's ring cannot be read there"
        self._to_daemon(encode(RequestFailed(message.id, "refused", why)))

    def _infer(self, message: Infer, data: bytes) -> None:
        slots = self.slots
        if slots is None:
            raise RelayEnded("an observation came before the slots", 1)
        try:
            images, state = slots.views(message.slot)
            parts = frames_parts(images, state)  # copies: the slot may be written again
            slots.check(message.slot, message.generation)
        except TornSlot as exc:
            self._to_daemon(encode(RequestFailed(message.id, "refused", str(exc))))
            return
        self._send_server(b"infer", data, *parts)


class LinkClock:
    """The server's clock against ours, from timed pings: for each, the server's time when it
    answered against the midpoint of ours around it; the sample with the shortest round trip is
    the least disturbed by queueing, and its error is at most half that round trip."""

    def __init__(self) -> None:
        self._samples: deque[tuple[int, int]] = deque(maxlen=CLOCK_SAMPLES)  # (trip, offset)

    def sample(self, sent_ns: int, server_ns: int, back_ns: int) -> None:
        trip = back_ns - sent_ns
        if trip >= 0:
            self._samples.append((trip, server_ns - (sent_ns + back_ns) // 2))

    @property
    def offset_ns(self) -> int:
        """Server clock minus ours (0 until a ping has come back)."""
        return min(self._samples)[1] if self._samples else 0

    def status(self) -> dict[str, float | None]:
        if not self._samples:
            return {"rtt_ms": None, "min_rtt_ms": None, "clock_offset_ms": None}
        trips = sorted(trip for trip, _ in self._samples)
        return {
            "rtt_ms": trips[len(trips) // 2] / 1e6,  # the median of the recent pings
            "min_rtt_ms": trips[0] / 1e6,
            "clock_offset_ms": self.offset_ns / 1e6,
        }


def run_relay(remote: RemoteServer, channel_fd: int) -> int:
    """Relay the daemon's channel `channel_fd` to the server `remote` names until either ends;
    the exit code (0: the daemon ended it)."""
    die_with_parent()
    channel = ProcessChannel.inherited(channel_fd)
    context = zmq.Context()
    try:
        relay = Relay(remote, channel, context)
        relay.run()
    except SecurityError as exc:
        _fail(channel, str(exc))
        return 1
    except RelayEnded as ended:
        if ended.code:
            log.warning("%s", ended)
            _fail(channel, str(ended))
        return ended.code
    finally:
        context.destroy(linger=0)
    return 0


def _fail(channel: ProcessChannel, why: str) -> None:
    """Tell a daemon still waiting for the start why it failed (ignored once serving)."""
    message: Message = FailedStart(why)
    try:
        channel.send(encode(message), timeout_s=1.0)
    except ChannelError:
        pass
