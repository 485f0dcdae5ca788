"""Teleop mistakes are said at once: an unknown joint raises on the client, and owning a joint
without sending its values holds with reason `teleop_no_values` (logged once with the joints),
not the plain `no_action`."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from controller.wire.client import TempoClient
from tests.conftest import ipc_config, running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]
FRAME = np.zeros((96, 128, 3), np.uint8)


def _client(endpoint: str) -> TempoClient:
    return TempoClient(endpoint, "arm0", JOINTS, {"front": (96, 128)}, 6)


def test_set_teleop_of_an_unknown_joint_raises_at_once() -> None:
    client = _client("ipc:///nonexistent/tempo.sock")  # the check needs no daemon
    with pytest.raises(ValueError, match="'gripper' is not a joint of robot 'arm0'"):
        client.set_teleop(["joint_0", "gripper"])


def test_owning_a_joint_without_its_values_holds_with_a_reason_that_says_so(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    config = ipc_config(tmp_path)
    state = np.zeros(6, np.float32)
    with running_daemon(config) as daemon, _client(config.server.bind) as client:

        def command(**teleop: np.ndarray):  # type: ignore[no-untyped-def]
            client.send_observation({"front": FRAME}, state, **teleop)
            return client.receive(timeout_s=0.02)

        wait_for(lambda: command().kind == "action", timeout=30)
        with caplog.at_level(logging.WARNING, logger="controller.daemon.session"):
            client.set_teleop(["joint_5"])
            held = wait_for(lambda: (c := command()).reason == "teleop_no_values" and c)
            assert held.kind == "hold"
            # Sending the values ends it.
            wait_for(lambda: command(teleop=np.zeros(6, np.float32)).kind == "action")
        (session,) = daemon.lanes.default.control.registry.sessions.values()
        assert session.counters["teleop_no_values"] > 0
    warnings = [r.getMessage() for r in caplog.records if "teleop owns" in r.getMessage()]
    assert len(warnings) == 1 and "joint_5" in warnings[0]
