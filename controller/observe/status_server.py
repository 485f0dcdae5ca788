"""A local control socket that answers status requests (`tempo status`, the demo), and the
few commands registered in `commands` (`tempo swap`, `tempo mark`).

    server.commands["swap"] = handler      # handler(request map) -> reply map

A request is a status request unless it is a msgpack map whose "kind" names a registered
command: that command's handler answers it (a map; a refusal is {"error": one sentence}).
The socket is local only (server.status_bind is checked at start), so whoever can ask for the
status can ask for a command.

Its own thread and its own ROUTER socket, so asking never touches the control loop's socket, and
no request, however many parts it has, can leave it unable to answer the next one. It
reads the daemon's counters without locks: a status snapshot may be a tick out of date.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from controller.errors import BindError
from controller.wire.binding import bind

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4096


class StatusServer:
    def __init__(
        self,
        context: zmq.Context,
        bind: str,
        snapshot: Callable[[], dict[str, Any]] | None = None,
    ):
        """Without `snapshot`, start() binds and requests wait until `serve(snapshot)`: the
        daemon binds before its policy loads, and answers once it is ready."""
        self.context = context
        self.bind = bind
        self.snapshot = snapshot
        self._serving = threading.Event()
        if snapshot is not None:
            self._serving.set()
        self.endpoint = ""
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None
        self.commands: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}

    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="tempo-status", daemon=True)
        self._thread.start()
        self._ready.wait(5.0)
        if self._error is not None:
            raise self._error
        return self.endpoint

    def _run(self) -> None:
        socket = self._open()
        self._ready.set()
        if socket is None:
            return
        try:
            while not self._stop.is_set():
                try:
                    self._serve_one(socket)
                except zmq.ZMQError as exc:  # a ROUTER has no state a request can break
                    log.warning("status request failed (%s); still serving", exc)
        finally:
            socket.close(0)

    def _open(self) -> zmq.Socket | None:
        """A bound ROUTER: it answers each request whatever its parts (a REP socket refuses to
        send after a request it did not read whole, and stays stuck)."""
        socket = self.context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        try:
            self.endpoint = bind(socket, self.bind, "server.status_bind")
        except BindError as exc:
            self._error = exc
            socket.close(0)
            return None
        return socket

    def serve(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        """Start answering requests with `snapshot()` (requests that came earlier, too)."""
        self.snapshot = snapshot
        self._serving.set()

    def _serve_one(self, socket: zmq.Socket) -> None:
        if not self._serving.wait(0.1) or not socket.poll(100):
            return
        # [identity, (empty delimiter from REQ), request parts...]: a status request unless
        # its first part is a registered command (see the module doc). Parts are read one by
        # one, at most a few kept.
        identity = socket.recv(zmq.NOBLOCK)
        envelope: list[bytes] = []
        body: bytes | None = None
        first = True
        while socket.getsockopt(zmq.RCVMORE):
            part = socket.recv()
            if first and not part:
                envelope.append(part)  # the REQ delimiter: echoed so a REQ client can read
            elif body is None:
                body = part
            first = False
        snapshot = self.snapshot
        command = self._command(body)
        try:
            if command is not None:
                handler, request = command
                packed = msgpack.packb(handler(request), use_bin_type=True)
            elif snapshot is None:  # unreachable: requests wait for serve(); say so anyway
                raise RuntimeError("status requested before the daemon was ready")
            else:
                packed = msgpack.packb(snapshot(), use_bin_type=True)
        except Exception:  # e.g. a policy's status() with numpy scalars: keep serving
            asked = "status" if command is None else "command"
            log.exception("%s request failed", asked)
            error = {"error": f"the daemon could not answer this {asked} request; see its log"}
            packed = msgpack.packb(error, use_bin_type=True)
        socket.send_multipart([identity, *envelope, packed], flags=zmq.NOBLOCK)

    def _command(
        self, body: bytes | None
    ) -> tuple[Callable[[dict[str, Any]], dict[str, Any]], dict[str, Any]] | None:
        """The registered command `body` asks for, and its request; None for a status request."""
        if not body or not self.commands:
            return None
        try:
            request = msgpack.unpackb(body, raw=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return None  # b"status", or anything else: a status request
        if not isinstance(request, dict):
            return None
        kind = request.get("kind")
        if not isinstance(kind, str):  # {"kind": []}: not a name, so a status request
            return None
        handler = self.commands.get(kind)
        return (handler, request) if handler is not None else None

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)


def request_status(
    endpoint: str, timeout_s: float = 2.0, context: zmq.Context | None = None
) -> dict[str, Any] | None:
    """Ask a daemon for its status; None if it does not answer in time."""
    return _ask(endpoint, b"status", timeout_s, context)


def request_command(
    endpoint: str,
    request: dict[str, Any],
    timeout_s: float = 2.0,
    context: zmq.Context | None = None,
) -> dict[str, Any] | None:
    """Send a command (a map with its "kind", see the module doc) to a daemon; its reply, or
    None if it does not answer in time."""
    return _ask(endpoint, msgpack.packb(request, use_bin_type=True), timeout_s, context)


def _ask(
    endpoint: str, payload: bytes, timeout_s: float, context: zmq.Context | None
) -> dict[str, Any] | None:
    """One request and its reply (a map), or None if none came in time."""
    context = context or zmq.Context.instance()
    socket = context.socket(zmq.REQ)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(endpoint)
        socket.send(payload)
        if not socket.poll(int(timeout_s * 1000)):
            return None
        reply = msgpack.unpackb(socket.recv(), raw=False)
        return reply if isinstance(reply, dict) else None
    finally:
        socket.close(0)
