"""Why a driver's connection never got past ZeroMQ's own handshake (ZMTP, CurveZMQ).

A daemon that refuses a driver's keys does so below Tempo's protocol: the driver's `hello` never
reaches it, and without a look at the socket the driver only sees silence. A ZeroMQ socket
monitor reports the refusal on the driver's side (ZMQ_EVENT_HANDSHAKE_FAILED_*); `HandshakeWatch`
reads it and says what it means, in one sentence.

Imports pyzmq only: this runs on a driver PC.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

from controller.wire.curve import is_local_endpoint

_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


def handshake_failure(event: int, value: int, endpoint: str, has_keys: bool) -> str:
    """One sentence for a failed-handshake monitor event (`value`: the event's detail)."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (
            f"the daemon at {endpoint} refused this driver's CurveZMQ key (ZAP status {value}): "
            "copy the driver's public key file (NAME.key) into the directory the daemon's "
            "security.authorized_keys names"
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and (
        value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    ):
        if has_keys:
            return (
                f"this driver uses CurveZMQ keys but the daemon at {endpoint} does not "
                "(security mechanism mismatch): connect without client_secret_key and "
                "server_public_key, or give the daemon security.server_secret_key"
            )
        return (
            f"the daemon at {endpoint} requires CurveZMQ keys and this driver has none "
            "(security mechanism mismatch): pass client_secret_key and server_public_key"
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return f"the ZeroMQ handshake with {endpoint} failed (protocol error {value:#x})"
    # NO_DETAIL: the daemon closed the connection mid-handshake; with CurveZMQ that is what a
    # server_public_key that is not the daemon's looks like from here.
    if has_keys:
        return (
            f"the daemon at {endpoint} dropped the CurveZMQ handshake: server_public_key is "
            "probably not that daemon's public key (its NAME.key file)"
        )
    return f"the daemon at {endpoint} dropped the ZeroMQ handshake without a reason"


def no_answer(endpoint: str, timeout_s: float, has_keys: bool) -> str:
    """The sentence for a handshake that got no answer and no refusal within `timeout_s`."""
    hint = ""
    if not has_keys and not is_local_endpoint(endpoint):
        hint = (
            " A daemon bound beyond localhost needs CurveZMQ keys: pass client_secret_key and "
            "server_public_key."
        )
    return (
        f"no answer from a Tempo daemon at {endpoint} within {timeout_s:.1f} s; is `tempo "
        f"serve` running there?{hint}"
    )


class HandshakeWatch:
    """A socket monitor on one driver socket; `failure()` says why its handshake failed, if it
    did and none succeeded since. Close it before the socket."""

    def __init__(self, socket: zmq.Socket, endpoint: str, has_keys: bool) -> None:
        self._socket = socket
        self._monitor: zmq.Socket | None = socket.get_monitor_socket(_EVENTS)
        self._endpoint = endpoint
        self._has_keys = has_keys
        self._failure: str | None = None

    def failure(self) -> str | None:
        """Reads the events so far (never blocks)."""
        monitor = self._monitor
        while monitor is not None and monitor.poll(0):
            message = recv_monitor_message(monitor)
            event, value = int(message["event"]), int(message["value"])
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._failure = None
            else:
                self._failure = handshake_failure(event, value, self._endpoint, self._has_keys)
        return self._failure

    def close(self) -> None:
        if self._monitor is None:
            return
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:  # the socket is already closed
            pass
        self._monitor.close(linger=0)
        self._monitor = None
