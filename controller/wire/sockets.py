"""Socket options both ends of a connection share (the daemon's ROUTER, each driver's DEALER)."""

from __future__ import annotations

import zmq

from controller.wire.protocol import DEFAULT_LIMITS, Limits

HEARTBEAT_IVL_MS = 100
HEARTBEAT_TIMEOUT_MS = 300
RECEIVE_HWM = 64  # messages queued per peer; the newest observation is all that matters
SEND_HWM = 64


def configure_common(socket: zmq.Socket, limits: Limits = DEFAULT_LIMITS) -> None:
    """Options both ends share: no lingering on close, small queues, heartbeats, size cap."""
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
    socket.setsockopt(zmq.SNDHWM, SEND_HWM)
    socket.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    socket.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    # A single frame larger than any legal one is refused by ZeroMQ before it reaches Python.
    socket.setsockopt(zmq.MAXMSGSIZE, limits.max_array_bytes + limits.max_header_bytes)
