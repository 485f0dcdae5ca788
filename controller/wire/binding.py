"""Binding a daemon socket: every way it can fail is one sentence naming the endpoint.

    bind(socket, "ipc:///run/tempo/tempo.sock", "server.bind")

Checked before ZeroMQ is asked, because ZeroMQ would either fail with an errno or, for an ipc
path, quietly unlink the file of a daemon that is still running and take its endpoint (that
daemon then serves nobody): an ipc path some process still listens on is refused.
"""

from __future__ import annotations

import errno
import os
import socket as stdsocket

import zmq

from controller.errors import BindError

IPC_PATH_MAX = 107  # bytes in sockaddr_un.sun_path, less the terminating NUL


def bind(socket: zmq.Socket, endpoint: str, field: str) -> str:
    """Bind `socket` to `endpoint` (the config field `field`); returns the bound endpoint or
    raises BindError with one sentence saying what is wrong and what to do."""
    if endpoint.startswith("ipc://"):
        check_ipc_path(endpoint, field)
    try:
        socket.bind(endpoint)
    except zmq.ZMQError as exc:
        raise bind_failure(endpoint, field, exc) from None
    return socket.getsockopt_string(zmq.LAST_ENDPOINT)


def check_ipc_path(endpoint: str, field: str) -> None:
    path = endpoint[len("ipc://") :]
    if path.startswith("@"):  # Linux abstract namespace: no file, ZeroMQ refuses a taken name
        return
    size = len(os.fsencode(path))
    if size > IPC_PATH_MAX:
        raise BindError(
            f"cannot bind {field} {endpoint}: the path is {size} bytes and ipc paths are "
            f"limited to {IPC_PATH_MAX}; choose a shorter path"
        )
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise BindError(
            f"cannot bind {field} {endpoint}: the directory {directory} does not exist; create "
            "it or choose another path"
        )
    if _someone_listens(path):
        raise BindError(
            f"cannot bind {field} {endpoint}: a running process (another tempo daemon?) is "
            "listening on it; stop that process or choose another path"
        )


def _someone_listens(path: str) -> bool:
    """Whether a process accepts connections on the unix socket at `path` (a file left by a
    daemon that died refuses them, and may be replaced)."""
    probe = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(path)
    except OSError:  # no file, not a socket, connection refused: nobody listens
        return False
    finally:
        probe.close()
    return True


def bind_failure(endpoint: str, field: str, exc: zmq.ZMQError) -> BindError:
    """ZeroMQ's bind error as one sentence with what to do."""
    what = f"cannot bind {field} {endpoint}"
    if exc.errno == errno.EADDRINUSE:
        return BindError(
            f"{what}: the address is already in use (another tempo daemon or program listens "
            "there); stop it or choose another port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return BindError(f"{what}: no network interface of this machine has that address")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return BindError(f"{what}: permission denied; choose a path or port this user may use")
    return BindError(f"{what}: {exc.strerror}; check the address")
