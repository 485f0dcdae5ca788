"""CurveZMQ on the driver's side: which endpoints are local, and a driver's keys.

A driver connecting to a daemon beyond localhost loads its own key pair and the daemon's public
key once (`load_client_keys`) and applies them to each new socket before it connects. The
daemon's side (its keys, the allowlist, the authenticator) is `controller.daemon.security`.

Imports pyzmq only (no torch, no pydantic): this runs on a driver PC.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from controller.errors import SecurityError
from controller.wire.keys import KEY_GENERATE, load_public_key, load_secret_key_pair

_LOCAL_TRANSPORTS = ("ipc://", "inproc://")


# -- endpoints --------------------------------------------------------------------------------


def _is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # '*', an interface name (eth0) or a host name: not provably local
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_local_endpoint(endpoint: str) -> bool:
    """True if only this machine can reach `endpoint`: ipc://, inproc://, or tcp:// on a
    loopback address (127.0.0.0/8, ::1, localhost). Anything else, including tcp://*,
    tcp://0.0.0.0, an interface name and anything unparsable, is not local."""
    endpoint = endpoint.strip()
    if endpoint.startswith(_LOCAL_TRANSPORTS):
        return True
    if not endpoint.startswith("tcp://"):
        return False
    address = endpoint[len("tcp://") :]
    if ";" in address:  # source;destination (connect syntax): not a plain local bind
        return False
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            return False
    else:
        host, colon, _ = address.rpartition(":")  # tcp://::1:5555 (unbracketed IPv6) too
        if not colon:
            return False
    return bool(host) and _is_loopback_host(host)


# -- the driver's side ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientKeys:
    """A driver's key pair and the daemon's public key, loaded once and applied to each new
    socket (the client opens a fresh socket on every reconnect)."""

    public: bytes
    server: bytes
    secret: bytes = field(repr=False)  # never printed

    def apply(self, socket: zmq.Socket) -> None:
        """Make `socket` a CURVE client of the daemon; call before connect."""
        if socket.getsockopt(zmq.LAST_ENDPOINT):
            raise SecurityError(
                "client keys were applied to a socket already connected; apply them before connect"
            )
        socket.setsockopt(zmq.CURVE_SERVERKEY, self.server)
        socket.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        socket.setsockopt(zmq.CURVE_SECRETKEY, self.secret)


def load_client_keys(client_secret_key: Path, server_public_key: Path) -> ClientKeys:
    """Load a driver's NAME.key_secret and the daemon's public .key. Raises SecurityError."""
    public, secret = load_secret_key_pair(Path(client_secret_key))
    server = load_public_key(Path(server_public_key))
    if server == public:
        raise SecurityError(
            f"{client_secret_key} is the daemon's own key pair; generate a separate key pair for "
            f"each driver with `{KEY_GENERATE}`"
        )
    return ClientKeys(public=public, secret=secret, server=server)


def secure_client(socket: zmq.Socket, client_secret_key: Path, server_public_key: Path) -> None:
    """Make `socket` a CURVE client: set CURVE_SERVERKEY/PUBLICKEY/SECRETKEY before connect."""
    load_client_keys(client_secret_key, server_public_key).apply(socket)
