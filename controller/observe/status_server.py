"""A local control socket that answers status requests (`tempo status`, the demo).

Its own thread and its own REP socket, so asking never touches the control loop's socket. It
reads the daemon's counters without locks: a status snapshot may be a tick out of date.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4096


class StatusServer:
    def __init__(self, context: zmq.Context, bind: str, snapshot: Callable[[], dict[str, Any]]):
        self.context = context
        self.bind = bind
        self.snapshot = snapshot
        self.endpoint = ""
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None

    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="tempo-status", daemon=True)
        self._thread.start()
        self._ready.wait(5.0)
        if self._error is not None:
            raise self._error
        return self.endpoint

    def _run(self) -> None:
        socket = self.context.socket(zmq.REP)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        try:
            socket.bind(self.bind)
            self.endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError as exc:
            self._error = exc
            self._ready.set()
            socket.close(0)
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                if not socket.poll(100):
                    continue
                socket.recv()  # any request is a status request; its content is not parsed
                try:
                    packed = msgpack.packb(self.snapshot(), use_bin_type=True)
                except Exception:  # e.g. a policy's status() with numpy scalars: keep serving
                    log.exception("status snapshot failed")
                    error = {"error": "the daemon could not build its status; see its log"}
                    packed = msgpack.packb(error, use_bin_type=True)
                socket.send(packed)
        finally:
            socket.close(0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)


def request_status(
    endpoint: str, timeout_s: float = 2.0, context: zmq.Context | None = None
) -> dict[str, Any] | None:
    """Ask a daemon for its status; None if it does not answer in time."""
    context = context or zmq.Context.instance()
    socket = context.socket(zmq.REQ)
    socket.setsockopt(zmq.LINGER, 0)
    try:
        socket.connect(endpoint)
        socket.send(b"status")
        if not socket.poll(int(timeout_s * 1000)):
            return None
        reply = msgpack.unpackb(socket.recv(), raw=False)
        return reply if isinstance(reply, dict) else None
    finally:
        socket.close(0)
