"""CurveZMQ with real sockets on 127.0.0.1 random ports: who gets through and who does not.

Every "nothing gets through" test waits for the server socket's handshake-failure event (so the
refusal is seen, not just a slow network) and then polls a little longer to be sure no message
arrived. Each test has its own ZeroMQ context: the authenticator is one per context.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from controller.config_sections import SecurityConfig
from controller.daemon.security import CurveServer
from controller.errors import SecurityError
from controller.wire.curve import secure_client
from controller.wire.keys import generate_keys
from controller.wire.sockets import configure_common

RECEIVE_MS = 20_000  # generous upper bound for a message that should arrive (usually < 50 ms)
EVENT_MS = 20_000  # upper bound for a handshake event (5 s once ran out on a loaded CI machine)
QUIET_MS = 300  # after a refused handshake: how long nothing must arrive
LATE_HANDSHAKE_MS = 10_000  # a client's handshake limit, below EVENT_MS; a success takes < 1 s

HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
HANDSHAKE_EVENTS = HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_SUCCEEDED


@dataclass
class Keys:
    security: SecurityConfig
    server_public: Path
    driver_secret: Path
    intruder_secret: Path


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    """The daemon's pair, an allowlisted driver `arm0`, and an `intruder` not in the allowlist."""
    _, server_secret = generate_keys(tmp_path / "daemon", "daemon")
    driver_public, driver_secret = generate_keys(tmp_path / "drivers", "arm0")
    _, intruder_secret = generate_keys(tmp_path / "drivers", "intruder")
    authorized = tmp_path / "authorized"
    authorized.mkdir(mode=0o700)
    shutil.copy(driver_public, authorized / driver_public.name)
    return Keys(
        SecurityConfig(server_secret_key=server_secret, authorized_keys=authorized),
        tmp_path / "daemon" / "daemon.key",
        driver_secret,
        intruder_secret,
    )


@pytest.fixture
def context() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


class Server:
    """A ROUTER like the daemon's (same common options), with a handshake event monitor."""

    def __init__(self, context: zmq.Context, curve: CurveServer | None) -> None:
        self.socket = context.socket(zmq.ROUTER)
        configure_common(self.socket)
        if curve is not None:
            curve.secure(self.socket)
        self.monitor = self.socket.get_monitor_socket(HANDSHAKE_EVENTS)
        self.socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def next_handshake_event(self) -> int:
        assert self.monitor.poll(EVENT_MS), "no handshake event within the timeout"
        return recv_monitor_message(self.monitor)["event"]

    def receive(self, timeout_ms: int) -> list[bytes] | None:
        if not self.socket.poll(timeout_ms):
            return None
        return self.socket.recv_multipart()

    def close(self) -> None:
        self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=0)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        server.close()


def make_server(servers: list[Server], context: zmq.Context, curve: CurveServer | None) -> Server:
    server = Server(context, curve)
    servers.append(server)
    return server


def dealer(
    context: zmq.Context,
    endpoint: str,
    client_secret: Path | None,
    server_public: Path | None,
    handshake_ms: int | None = None,
) -> zmq.Socket:
    socket = context.socket(zmq.DEALER)
    configure_common(socket)
    if handshake_ms is not None:
        socket.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
    if client_secret is not None and server_public is not None:
        secure_client(socket, client_secret, server_public)
    socket.connect(endpoint)
    return socket


def assert_exchange(server: Server, client: zmq.Socket, text: bytes) -> None:
    """The client's message reaches the server and the server's reply reaches the client."""
    client.send(text)
    frames = server.receive(RECEIVE_MS)
    assert frames is not None, "the allowlisted client's message did not arrive"
    identity, body = frames
    assert body == text
    server.socket.send_multipart([identity, b"reply:" + text])
    assert client.poll(RECEIVE_MS), "the server's reply did not arrive"
    assert client.recv() == b"reply:" + text


def assert_refused(server: Server, client: zmq.Socket) -> None:
    """The client's handshake fails at the server and none of its messages arrive."""
    client.send(b"let me in")
    event = server.next_handshake_event()
    assert event & HANDSHAKE_FAILED, f"expected a failed handshake, got event {event}"
    assert server.receive(QUIET_MS) is None, "a refused client's message reached the server"


def test_allowlisted_client_exchanges_messages(context, keys, servers):
    curve = CurveServer(context, keys.security)
    curve.start()
    try:
        server = make_server(servers, context, curve)
        client = dealer(context, server.endpoint, keys.driver_secret, keys.server_public)
        assert_exchange(server, client, b"hello")
        assert server.next_handshake_event() == zmq.EVENT_HANDSHAKE_SUCCEEDED
        assert_exchange(server, client, b"again")
        client.close(linger=0)
        assert curve.denied == 0
    finally:
        curve.stop()


def test_client_key_not_in_allowlist_gets_nothing_through(context, keys, servers):
    curve = CurveServer(context, keys.security)
    curve.start()
    try:
        server = make_server(servers, context, curve)
        intruder = dealer(context, server.endpoint, keys.intruder_secret, keys.server_public)
        assert_refused(server, intruder)
        assert curve.denied >= 1  # refused by the allowlist, not by something else
        # The server works: an allowlisted client, connected afterwards, gets through; the
        # intruder's message still never does.
        client = dealer(context, server.endpoint, keys.driver_secret, keys.server_public)
        assert_exchange(server, client, b"hello")
        assert server.receive(QUIET_MS) is None
        intruder.close(linger=0)
        client.close(linger=0)
    finally:
        curve.stop()


def test_client_without_curve_gets_nothing_through(context, keys, servers):
    curve = CurveServer(context, keys.security)
    curve.start()
    try:
        server = make_server(servers, context, curve)
        plain = dealer(context, server.endpoint, None, None)
        assert_refused(server, plain)
        client = dealer(context, server.endpoint, keys.driver_secret, keys.server_public)
        assert_exchange(server, client, b"hello")
        assert server.receive(QUIET_MS) is None
        plain.close(linger=0)
        client.close(linger=0)
    finally:
        curve.stop()


def test_client_expecting_another_server_key_gets_nothing_through(context, keys, servers, tmp_path):
    """A driver that pins a different daemon key (an impostor daemon, seen from the driver)
    never completes the handshake."""
    other_public, _ = generate_keys(tmp_path / "other", "other-daemon")
    curve = CurveServer(context, keys.security)
    curve.start()
    try:
        server = make_server(servers, context, curve)
        client = dealer(context, server.endpoint, keys.driver_secret, other_public)
        assert_refused(server, client)
        client.close(linger=0)
    finally:
        curve.stop()


def test_fail_closed_after_the_authenticator_stops(context, keys, servers):
    curve = CurveServer(context, keys.security)
    curve.start()
    server = make_server(servers, context, curve)
    first = dealer(context, server.endpoint, keys.driver_secret, keys.server_public)
    assert_exchange(server, first, b"before stop")
    assert server.next_handshake_event() == zmq.EVENT_HANDSHAKE_SUCCEEDED

    curve.stop()
    assert not curve.running
    # A new connection, even with an allowlisted key, is refused: no ZAP handler answers and
    # the socket enforces the ZAP domain.
    # The stopped handler's socket leaves libzmq's endpoint table only when its reaper gets to
    # it, so under load the late ZAP request can still reach the closing socket and never be
    # answered. That handshake stays refused but only fails when a side gives up (30 s by
    # default), so this client gives up sooner: either way the server sees a failed handshake.
    late = dealer(
        context, server.endpoint, keys.driver_secret, keys.server_public, LATE_HANDSHAKE_MS
    )
    assert_refused(server, late)
    late.close(linger=0)
    first.close(linger=0)


def test_fail_closed_when_no_authenticator_ever_ran(keys, servers):
    """The socket's context has no ZAP handler at all (the authenticator runs in another
    context, so this one never had one): an allowlisted client is refused."""
    keys_context, socket_context = zmq.Context(), zmq.Context()
    curve = CurveServer(keys_context, keys.security)
    curve.start()
    try:
        server = make_server(servers, socket_context, curve)
        client = dealer(socket_context, server.endpoint, keys.driver_secret, keys.server_public)
        assert_refused(server, client)
        client.close(linger=0)
    finally:
        for server in servers:
            server.close()
        servers.clear()
        curve.stop()
        keys_context.destroy(linger=0)
        socket_context.destroy(linger=0)


def test_without_zap_enforce_domain_libzmq_would_fail_open(keys, servers):
    """The control for the two tests above: the same setup with ZAP_ENFORCE_DOMAIN turned off
    lets even a client that is NOT in the allowlist through. This is why `secure` sets it."""
    keys_context, socket_context = zmq.Context(), zmq.Context()
    curve = CurveServer(keys_context, keys.security)
    curve.start()
    try:
        socket = socket_context.socket(zmq.ROUTER)
        configure_common(socket)
        curve.secure(socket)
        assert socket.getsockopt(zmq.ZAP_ENFORCE_DOMAIN) == 1
        socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 0)
        socket.bind("tcp://127.0.0.1:*")
        endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        intruder = dealer(socket_context, endpoint, keys.intruder_secret, keys.server_public)
        intruder.send(b"in")
        assert socket.poll(RECEIVE_MS), "expected libzmq's fail-open default without the option"
        assert socket.recv_multipart()[1] == b"in"
        intruder.close(linger=0)
        socket.close(linger=0)
    finally:
        curve.stop()
        keys_context.destroy(linger=0)
        socket_context.destroy(linger=0)


def test_secure_refuses_before_start_after_stop_and_after_bind(context, keys):
    curve = CurveServer(context, keys.security)
    socket = context.socket(zmq.ROUTER)
    try:
        with pytest.raises(SecurityError, match="before start"):
            curve.secure(socket)
        curve.start()
        assert curve.running
        bound = context.socket(zmq.ROUTER)
        bound.bind("tcp://127.0.0.1:*")
        with pytest.raises(SecurityError, match="before bind"):
            curve.secure(bound)
        bound.close(linger=0)
        curve.stop()
        with pytest.raises(SecurityError, match="before start"):
            curve.secure(socket)
    finally:
        curve.stop()
        socket.close(linger=0)


def test_second_authenticator_in_one_context_is_refused(context, keys):
    first = CurveServer(context, keys.security)
    first.start()
    second = CurveServer(context, keys.security)
    try:
        with pytest.raises(SecurityError, match="authenticator"):
            second.start()
        assert first.running
    finally:
        second.stop()
        first.stop()


def test_start_refuses_bad_key_files_without_starting(context, keys, tmp_path):
    bad = tmp_path / "bad.key_secret"
    bad.write_text("not a key\n")
    bad.chmod(0o600)
    curve = CurveServer(
        context,
        SecurityConfig(server_secret_key=bad, authorized_keys=keys.security.authorized_keys),
    )
    with pytest.raises(SecurityError, match=str(bad)):
        curve.start()
    assert not curve.running
    # Nothing was left bound: a correct server can start in the same context.
    good = CurveServer(context, keys.security)
    good.start()
    good.stop()
