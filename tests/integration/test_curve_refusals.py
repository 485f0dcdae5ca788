"""A driver that a CurveZMQ daemon refuses is told that the handshake was refused and why
(a ZeroMQ socket monitor on the client: controller.wire.handshake_watch), not "no answer ...
is `tempo serve` running there?"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import zmq

from controller.config import load_config
from controller.errors import HandshakeRefused
from controller.wire.client import TempoClient
from controller.wire.keys import generate_keys

JOINTS = [f"joint_{i}" for i in range(6)]


@pytest.fixture
def keyed_daemon(tmp_path: Path) -> Iterator[tuple[Any, Path, Path, zmq.Context]]:
    """A daemon requiring keys, with one authorized driver key; yields the daemon, its public
    key file, the directory of key pairs and its context."""
    from controller.daemon.service import Daemon
    from controller.inference.build import build_policy

    server_public, server_secret = generate_keys(tmp_path / "daemon", "daemon")
    allowed = tmp_path / "authorized"
    allowed.mkdir()
    driver_public, _ = generate_keys(tmp_path / "driver", "driver")
    (allowed / "driver.key").write_bytes(driver_public.read_bytes())
    config = load_config(
        None,
        [
            "server.bind=tcp://127.0.0.1:*",
            f"server.status_bind=ipc://{tmp_path}/status.sock",
            f"security.server_secret_key={server_secret}",
            f"security.authorized_keys={allowed}",
        ],
    )
    context = zmq.Context()  # one authenticator per context: keep it away from other tests
    daemon = Daemon(
        config, build_policy(config.policy, config.robot, config.runner), context=context
    )
    daemon.start()
    try:
        yield daemon, server_public, tmp_path, context
    finally:
        daemon.stop()
        context.term()


def _client(daemon: Any, context: zmq.Context, **keys: Any) -> TempoClient:
    return TempoClient(
        daemon.endpoint, "arm0", JOINTS, {"front": (96, 128)}, 6, context=context,
        handshake_timeout_s=5.0, **keys,
    )  # fmt: skip


def test_a_driver_without_keys_is_told_the_daemon_requires_them(keyed_daemon) -> None:
    daemon, _, _, context = keyed_daemon
    with closing(_client(daemon, context)) as client:
        started = time.monotonic()
        with pytest.raises(HandshakeRefused, match="requires CurveZMQ keys and this driver"):
            client.connect()
        assert time.monotonic() - started < 4.0  # said when it happened, not at the timeout


def test_a_driver_with_an_unauthorised_key_is_told_to_authorise_it(keyed_daemon) -> None:
    daemon, server_public, tmp_path, context = keyed_daemon
    _, stranger_secret = generate_keys(tmp_path / "stranger", "driver")
    keys = {"client_secret_key": stranger_secret, "server_public_key": server_public}
    with closing(_client(daemon, context, **keys)) as client:
        with pytest.raises(HandshakeRefused, match="refused this driver's CurveZMQ key") as no:
            client.connect()
    assert "authorized_keys" in str(no.value) and "tempo serve" not in str(no.value)
    assert daemon.registry.sessions == {}


def test_a_wrong_daemon_public_key_is_named(keyed_daemon) -> None:
    daemon, _, tmp_path, context = keyed_daemon
    other_public, _ = generate_keys(tmp_path / "other", "daemon")
    secret = tmp_path / "driver" / "driver.key_secret"  # the authorized driver's
    keys = {"client_secret_key": secret, "server_public_key": other_public}
    with closing(_client(daemon, context, **keys)) as client:
        with pytest.raises(HandshakeRefused, match="server_public_key is probably not"):
            client.connect()
