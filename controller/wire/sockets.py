"""Socket options both ends of a connection share (the daemon's ROUTER, each driver's DEALER).

No ZMTP heartbeats (ZMQ_HEARTBEAT_IVL and friends), on purpose. libzmq 4.3.5 (the one inside
the pyzmq wheel) aborts the whole process with `Assertion failed: !_io_error
(stream_engine_base.cpp:310)` when it has to send on a connection that it has already given up:
one whose input was stopped because the receive queue was full, and whose peer then closed it.
Its own heartbeat timer and the PONG it owes a peer's PING both send (upstream libzmq issues
3937, 4364, 4767; still open). The daemon's side of that is in controller/daemon/transport.py;
here it means that neither end pings. Liveness is the protocol's own business instead: the
daemon sends something every tick (a driver that hears nothing for a second reconnects), and a
session that sends no observation for `server.session_timeout_s` is closed. A killed peer is
still noticed at once: its connection closes and the next send to it fails (ROUTER_MANDATORY).
"""

from __future__ import annotations

import zmq

from controller.wire.protocol import DEFAULT_LIMITS, Limits

RECEIVE_HWM = 64  # messages queued per peer; the newest observation is all that matters
SEND_HWM = 64


def configure_common(socket: zmq.Socket, limits: Limits = DEFAULT_LIMITS) -> None:
    """Options both ends share: no lingering on close, small queues, size cap, no heartbeats."""
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
    socket.setsockopt(zmq.SNDHWM, SEND_HWM)
    socket.setsockopt(zmq.HEARTBEAT_IVL, 0)  # the default, stated: see the module docstring
    socket.setsockopt(zmq.IPV6, 1)  # tcp://[::1]:PORT works too (IPv4 addresses still do)
    # A single frame larger than any legal one is refused by ZeroMQ before it reaches Python.
    socket.setsockopt(zmq.MAXMSGSIZE, limits.max_array_bytes + limits.max_header_bytes)
