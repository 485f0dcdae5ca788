"""`tempo infer-server`: inference processes on a GPU host for daemons on other machines.

    code = run_infer_server(config, bind)    # until SIGINT/SIGTERM

One ROUTER socket (CurveZMQ with the config's `security:` keys; only loopback without them).
Each connecting daemon's relay (controller.link.remote_relay) says `open` and gets an inference
process of its own, built from this server's config (its `policy:`, `runner:` ...; the daemon's
config names no checkpoint of this host). The process protocol is relayed both ways as it is,
except: the daemon's `attach` is answered by handing the process observation slots created
here, and each `infer` arrives with its frames inline, written into the slot it names before
the request is passed on (its generation rewritten to this slot's). The process's heartbeat is
passed back as `beat`, the server's own liveness as `alive`, a `ping` answered by a
`pong` with this host's clock; a relay silent for `timeout_s` or
a process that ends ends the pair. Imports no torch (the processes do).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import time
from types import FrameType

import zmq

from controller.config import TempoConfig
from controller.daemon.security import CurveServer, check_bind_allowed
from controller.errors import TempoError
from controller.link.process_spawner import Child, Spawner, end_child
from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.message_codec import MessageError
from controller.process_protocol.process_channel import ChannelError
from controller.process_protocol.process_messages import (
    AttachSlots,
    Hello,
    Infer,
    RequestFailed,
    decode,
    encode,
)
from controller.process_protocol.remote_frames import parts_frames
from policies.base import PolicySpec

log = logging.getLogger(__name__)

POLL_MS = 50
ALIVE_EVERY_S = 0.25


@dataclasses.dataclass
class Session:
    """One connected daemon's inference process."""

    child: Child
    last_heard: float
    spec: PolicySpec | None = None
    slots: FrameSlots | None = None
    beat_sent_ns: int = 0

    def end(self) -> None:
        end_child(self.child, 2.0)
        if self.slots is not None:
            self.slots.close()


class InferServer:
    def __init__(self, config: TempoConfig, bind: str, timeout_s: float) -> None:
        check_bind_allowed(bind, config.security)
        self.timeout_s = timeout_s
        command = [sys.executable, "-m", "controller.cli", "inference-process"]
        stdin = json.dumps(config.model_dump(mode="json")).encode()
        self.spawner = Spawner(command, stdin=stdin)
        self.context = zmq.Context()
        self.curve: CurveServer | None = None
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        if config.security.server_secret_key is not None:
            self.curve = CurveServer(self.context, config.security)
            self.curve.start()
            self.curve.secure(self.socket)
        self.socket.bind(bind)
        self.sessions: dict[bytes, Session] = {}
        self.stopping = False
        self._alive_at = 0.0

    def serve(self) -> None:
        log.info("inference server on %s", self.socket.getsockopt_string(zmq.LAST_ENDPOINT))
        try:
            while not self.stopping:
                poller = zmq.Poller()
                poller.register(self.socket, zmq.POLLIN)
                for session in self.sessions.values():
                    poller.register(session.child[0].fileno(), zmq.POLLIN)
                poller.poll(POLL_MS)
                while self.socket.poll(0):
                    self._from_relay(self.socket.recv_multipart())
                for peer in list(self.sessions):
                    self._from_process(peer)
                self._keep_alive()
        finally:
            for session in self.sessions.values():
                session.end()
            self.socket.close(linger=0)
            if self.curve is not None:
                self.curve.stop()
            self.context.term()

    def _send(self, peer: bytes, *parts: bytes) -> None:
        self.socket.send_multipart([peer, *parts], copy=False)

    def _drop(self, peer: bytes, why: str) -> None:
        session = self.sessions.pop(peer, None)
        if session is not None:
            log.info("inference process %s ended: %s", session.child[1].pid, why)
            session.end()

    def _from_relay(self, parts: list[bytes]) -> None:
        if len(parts) < 2:
            return
        peer, kind = parts[0], parts[1]
        if kind == b"open":
            self._drop(peer, "its daemon opened the link again")
            self.sessions[peer] = Session(self.spawner.spawn(), time.monotonic())
            return
        session = self.sessions.get(peer)
        if session is None:
            self._send(peer, b"gone")  # a relay of a process that has ended: it reopens
            return
        session.last_heard = time.monotonic()
        try:
            if kind == b"ping" and len(parts) == 3:  # the relay times the link and our clock
                self._send(
                    peer, b"pong", parts[2], time.monotonic_ns().to_bytes(8, "little", signed=True)
                )
            elif kind == b"close":
                self._drop(peer, "its daemon closed the link")
            elif kind == b"msg" and len(parts) == 3:
                self._message(peer, session, parts[2])
            elif kind == b"infer" and len(parts) > 3:
                self._infer(peer, session, parts[2], parts[3:])
        except ChannelError:
            self._drop(peer, "its channel broke")

    def _message(self, peer: bytes, session: Session, data: bytes) -> None:
        message = decode(data)
        link = session.child[0]
        if isinstance(message, AttachSlots):
            if session.spec is None:
                raise MessageError("the daemon handed slots before the process's hello")
            if session.slots is None:
                session.slots = FrameSlots.create(session.spec, message.count)
            attach = AttachSlots(str(session.slots.path), message.count)
            link.send(encode(attach), fds=[session.slots.fileno()])
            return
        link.send(data)

    def _infer(self, peer: bytes, session: Session, data: bytes, frames: list[bytes]) -> None:
        message = decode(data)
        if not isinstance(message, Infer) or session.slots is None or session.spec is None:
            raise MessageError("an inline observation came before the slots")
        try:
            images, state = parts_frames(frames, session.spec)
            generation = session.slots.write(message.slot, images, state)
        except (MessageError, ValueError, IndexError) as exc:
            refused = RequestFailed(message.id, "refused", str(exc))
            self._send(peer, b"msg", encode(refused))
            return
        relayed = dataclasses.replace(message, generation=generation)
        session.child[0].send(encode(relayed))

    def _from_process(self, peer: bytes) -> None:
        session = self.sessions[peer]
        link, process = session.child
        while True:
            try:
                data = link.receive()
            except MessageError:
                data = None
            if data is None:
                break
            message = decode(data)
            if isinstance(message, Hello):
                session.spec = message.spec
            self._send(peer, b"msg", data)
        if link.closed or process.poll() is not None:
            self._send(peer, b"gone")
            self._drop(peer, f"it exited with code {process.poll()}")

    def _keep_alive(self) -> None:
        now = time.monotonic()
        if now - self._alive_at < ALIVE_EVERY_S:
            return
        self._alive_at = now
        for peer, session in list(self.sessions.items()):
            if now - session.last_heard > self.timeout_s:
                self._drop(peer, f"its daemon was silent for {self.timeout_s:g} s")
                continue
            beat = session.slots.last_beat_ns() if session.slots is not None else 0
            if beat > session.beat_sent_ns:
                session.beat_sent_ns = beat
                self._send(peer, b"beat")
            else:
                self._send(peer, b"alive")

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True


def run_infer_server(config: TempoConfig, bind: str, timeout_s: float = 5.0) -> int:
    """Serve daemons on `bind` until SIGINT or SIGTERM; the exit code."""
    try:
        server = InferServer(config, bind, timeout_s)
    except (TempoError, zmq.ZMQError) as exc:
        log.error("%s", exc)
        return 1
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGINT, server.stop)
    server.serve()
    return 0
