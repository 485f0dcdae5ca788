"""Integration tests run real-time loops inside the pytest process."""

from __future__ import annotations

import gc

import pytest


@pytest.fixture(autouse=True)
def _freeze_test_process_objects():
    """The daemon freezes its start-up objects out of the garbage collector, as `tempo serve`
    does; inside pytest, everything the earlier tests left behind would still be scanned by
    every full collection, a pause of milliseconds on the control loop that a real daemon never
    sees. Freeze it too (cheap: no collection, just a move to the permanent generation)."""
    gc.freeze()
    yield


@pytest.fixture
def curve_daemon(tmp_path):
    """A daemon requiring CurveZMQ keys, with one authorized driver key pair under
    tmp_path/driver; yields the daemon, that driver's secret key file, the daemon's public key
    file and the daemon's zmq context."""
    from controller.config import load_config
    from controller.wire.keys import generate_keys

    server_public, server_secret = generate_keys(tmp_path / "daemon", "daemon")
    allowed = tmp_path / "authorized"
    allowed.mkdir()
    client_public, client_secret = generate_keys(tmp_path / "driver", "driver")
    (allowed / "driver.key").write_bytes(client_public.read_bytes())
    config = load_config(
        None,
        [
            "server.bind=tcp://127.0.0.1:*",
            f"server.status_bind=ipc://{tmp_path}/status.sock",
            f"security.server_secret_key={server_secret}",
            f"security.authorized_keys={allowed}",
            "control.rate_hz=100",
        ],
    )
    import zmq

    context = zmq.Context()  # one authenticator per context: keep it away from other tests
    from controller.daemon.service import Daemon
    from controller.inference.build import build_policy

    policy = build_policy(config.policy, config.robot, config.runner)
    daemon = Daemon(config, policy, context=context)
    daemon.start()
    try:
        yield daemon, client_secret, server_public, context
    finally:
        daemon.stop()
        context.term()
