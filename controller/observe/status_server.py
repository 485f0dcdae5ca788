"""A local control socket that answers status requests (`tempo status`, the demo), and the
few commands registered in `commands` (`tempo swap`, `tempo mark`).

    server.commands["swap"] = handler      # handler(request map) -> reply map

A request is a status request unless it is a msgpack map whose "kind" names a registered
command: that command's handler answers it (a map; a refusal is {"error": one sentence}).
The socket is local only (server.status_bind is checked at start), and every registered command
changes something: each request is checked by `access` (controller.observe.status_access: the
peer's uid on ipc://, the status token on tcp://) before its handler runs, and `status` too when
server.status_readers is `owner`. A refusal is {"error": one sentence}. A client sends the token
in its request map: {"kind": "swap", ..., "auth": ...} (request_signature.sign); {"kind":
"status", "auth": ...} asks for the status.

Its own thread and its own ROUTER socket, so asking never touches the control loop's socket, and
no request, however many parts it has, can leave it unable to answer the next one. It
reads the daemon's counters without locks: a status snapshot may be a tick out of date.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

from controller.errors import BindError, SecurityError
from controller.observe.request_signature import endpoint_port, sign
from controller.observe.status_access import StatusAccess
from controller.wire.binding import bind

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4096
MAX_LOGGED_REFUSALS = 64  # distinct refusal sentences logged, each once


class StatusServer:
    def __init__(
        self,
        context: zmq.Context,
        bind: str,
        snapshot: Callable[[], dict[str, Any]] | None = None,
        access: StatusAccess | None = None,
    ):
        """Without `snapshot`, start() binds and requests wait until `serve(snapshot)`: the
        daemon binds before its policy loads, and answers once it is ready. Without `access`,
        only the daemon's user commands on ipc://, and tcp:// is read-only."""
        self.context = context
        self.bind = bind
        self.access = access or default_access(bind)
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
        self.refused = 0  # requests refused by `access`
        self._logged: set[str] = set()

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
            self._protect_socket_file()
        except (BindError, SecurityError) as exc:
            self._error = exc
            socket.close(0)
            return None
        return socket

    def _protect_socket_file(self) -> None:
        """An ipc socket file gets the mode its readers need, whatever the umask: connecting
        needs write permission on it (the peer check on each command comes on top)."""
        path = self.endpoint[len("ipc://") :] if self.endpoint.startswith("ipc://") else ""
        if not path or path.startswith("@"):  # tcp, or an abstract name (no file to protect)
            return
        try:
            if self.access.group_gid is not None:
                os.chown(path, -1, self.access.group_gid)
            os.chmod(path, self.access.socket_mode)
        except OSError as exc:
            raise SecurityError(
                f"cannot set the permissions of server.status_bind's socket file {path} "
                f"({exc.strerror}); is the daemon's user a member of server.status_group?"
            ) from None

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
        identity = socket.recv(zmq.NOBLOCK, copy=False)
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
        packed = msgpack.packb(self._answer(body, _peer_address(identity)), use_bin_type=True)
        socket.send_multipart([identity.bytes, *envelope, packed], flags=zmq.NOBLOCK)

    def _answer(self, body: bytes | None, peer: str | None) -> dict[str, Any]:
        """The reply to one request from `peer` (its Peer-Address): a refusal, a command's
        answer or the status."""
        request = _request_map(body)
        kind = request.get("kind")
        handler = self.commands.get(kind) if isinstance(kind, str) else None
        asked = "status" if handler is None else str(kind)
        refused = self.access.refusal(
            asked,
            mutating=handler is not None,
            peer=peer,
            request=request,
            port=endpoint_port(self.endpoint),
        )
        if refused is not None:
            self.refused += 1
            if refused not in self._logged and len(self._logged) < MAX_LOGGED_REFUSALS:
                self._logged.add(refused)  # a flood of refusals cannot fill the log
                log.warning("status socket: %s (each such refusal logged once)", refused)
            return {"error": refused}
        snapshot = self.snapshot
        try:
            if handler is not None:
                return handler(request)
            if snapshot is None:  # unreachable: requests wait for serve(); say so anyway
                raise RuntimeError("status requested before the daemon was ready")
            return snapshot()
        except Exception:  # e.g. a policy's status() with numpy scalars: keep serving
            what = "status" if handler is None else "command"
            log.exception("%s request failed", what)
            return {"error": f"the daemon could not answer this {what} request; see its log"}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)


def default_access(endpoint: str) -> StatusAccess:
    """Access with no configuration: on ipc://, status and commands for the daemon's user (and
    root) only; on tcp://, status for anyone and no command (no token)."""
    if endpoint.startswith("ipc://"):
        return StatusAccess.ipc("owner")
    return StatusAccess.tcp("any", None, "no token was given to this status server")


def _peer_address(frame: zmq.Frame) -> str | None:
    """libzmq's Peer-Address of the connection a message came on (ipc: "...:uid:gid:pid")."""
    try:
        address = frame.get("Peer-Address")
    except zmq.ZMQError:  # no such property: no credentials to check, refused as unknown
        return None
    return address if isinstance(address, str) else None


def _request_map(body: bytes | None) -> dict[Any, Any]:
    """A request's map; {} for anything else (b"status", or any bytes: a status request)."""
    if not body:
        return {}
    try:
        request = msgpack.unpackb(body, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return {}
    return request if isinstance(request, dict) else {}


def request_status(
    endpoint: str,
    timeout_s: float = 2.0,
    context: zmq.Context | None = None,
    token: bytes | None = None,
) -> dict[str, Any] | None:
    """Ask a daemon for its status (with the status token, where it needs one); None if it
    does not answer in time."""
    if token is None:
        return _ask(endpoint, b"status", timeout_s, context)
    return request_command(endpoint, {"kind": "status"}, timeout_s, context, token)


def request_command(
    endpoint: str,
    request: dict[str, Any],
    timeout_s: float = 2.0,
    context: zmq.Context | None = None,
    token: bytes | None = None,
) -> dict[str, Any] | None:
    """Send a command (a map with its "kind", see the module doc) to a daemon, signed with the
    status token when given; its reply, or None if it does not answer in time."""
    if token is not None and endpoint.startswith("tcp://"):
        request = sign(token, endpoint_port(endpoint), request)
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
