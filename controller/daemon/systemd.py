"""Tell systemd we are ready (Type=notify), without a dependency: one datagram to NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


def notify(state: str = "READY=1") -> bool:
    """Send `state` to systemd if it started us with Type=notify; False when not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace socket
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(state.encode())
    return True
