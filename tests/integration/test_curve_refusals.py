"""A driver that a CurveZMQ daemon refuses is told that the handshake was refused and why
(a ZeroMQ socket monitor on the client: controller.wire.handshake_watch), not "no answer ...
is `tempo serve` running there?"."""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import zmq

from controller.errors import HandshakeRefused
from controller.wire.client import TempoClient
from controller.wire.keys import generate_keys

JOINTS = [f"joint_{i}" for i in range(6)]


def _client(daemon: Any, context: zmq.Context, **keys: Any) -> TempoClient:
    return TempoClient(
        daemon.endpoint, "arm0", JOINTS, {"front": (96, 128)}, 6, context=context,
        handshake_timeout_s=5.0, **keys,
    )  # fmt: skip


def test_a_driver_without_keys_is_told_the_daemon_requires_them(curve_daemon) -> None:
    daemon, _, _, context = curve_daemon
    with closing(_client(daemon, context)) as client:
        started = time.monotonic()
        with pytest.raises(HandshakeRefused, match="requires CurveZMQ keys and this driver"):
            client.connect()
        assert time.monotonic() - started < 4.0  # said when it happened, not at the timeout


def test_a_driver_with_an_unauthorised_key_is_told_to_authorise_it(
    curve_daemon, tmp_path: Path
) -> None:
    daemon, _, server_public, context = curve_daemon
    _, stranger_secret = generate_keys(tmp_path / "stranger", "driver")
    keys = {"client_secret_key": stranger_secret, "server_public_key": server_public}
    with closing(_client(daemon, context, **keys)) as client:
        with pytest.raises(HandshakeRefused, match="refused this driver's CurveZMQ key") as no:
            client.connect()
    assert "authorized_keys" in str(no.value) and "tempo serve" not in str(no.value)
    assert daemon.lanes.default.control.registry.sessions == {}


def test_a_wrong_daemon_public_key_is_named(curve_daemon, tmp_path: Path) -> None:
    daemon, secret, _, context = curve_daemon  # the authorized driver's secret key
    other_public, _ = generate_keys(tmp_path / "other", "daemon")
    keys = {"client_secret_key": secret, "server_public_key": other_public}
    with closing(_client(daemon, context, **keys)) as client:
        with pytest.raises(HandshakeRefused, match="server_public_key is probably not"):
            client.connect()
