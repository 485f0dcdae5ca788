"""CurveZMQ through the real daemon and client: refused without keys, served with them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from controller.errors import HandshakeRefused
from controller.wire.client import TempoClient
from tests.conftest import wait_for

JOINTS = [f"joint_{i}" for i in range(6)]


def test_serve_refuses_a_public_bind_without_keys():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "serve",
            "--set",
            "server.bind=tcp://0.0.0.0:5599",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "tcp://0.0.0.0:5599" in result.stderr
    assert "security.server_secret_key" in result.stderr
    assert "Traceback" not in result.stderr


def test_keys_generate_command(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller.cli",
            "keys",
            "generate",
            "--dir",
            str(tmp_path),
            "--name",
            "daemon",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "daemon.key").exists() and (tmp_path / "daemon.key_secret").exists()
    assert (tmp_path / "daemon.key_secret").stat().st_mode & 0o077 == 0


def test_curve_daemon_serves_an_allowlisted_driver(curve_daemon):
    daemon, client_secret, server_public, context = curve_daemon
    client = TempoClient(
        daemon.endpoint,
        "arm0",
        JOINTS,
        {"front": (96, 128)},
        6,
        context=context,
        client_secret_key=client_secret,
        server_public_key=server_public,
    )
    client.connect()
    state = np.zeros(6, np.float32)
    wait_for(
        lambda: (
            (
                client.send_observation({"front": np.zeros((96, 128, 3), np.uint8)}, state),
                client.receive(0.01),
            )[1].kind
            == "action"
        )
    )
    client.close()


def test_curve_daemon_ignores_a_driver_without_keys(curve_daemon):
    daemon, _, _, context = curve_daemon
    client = TempoClient(
        daemon.endpoint,
        "arm0",
        JOINTS,
        {"front": (96, 128)},
        6,
        context=context,
        handshake_timeout_s=0.5,
    )
    with pytest.raises(HandshakeRefused, match="requires CurveZMQ keys"):
        client.connect()
    client.close()
    assert daemon.lanes.default.control.registry.sessions == {}
