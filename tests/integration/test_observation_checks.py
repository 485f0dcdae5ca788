"""A driver learns what is wrong with its observations: the client checks each one against the
spec it declared before sending, and the daemon logs (rate-limited) why it refuses a robot's
messages, so a mistake never looks like holds and silence."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from controller.errors import ObservationError
from controller.wire.client import TempoClient
from tests.conftest import ipc_config, running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]
FRAME = np.zeros((96, 128, 3), np.uint8)
STATE = np.zeros(6, np.float32)


def client_for(endpoint: str) -> TempoClient:
    return TempoClient(endpoint, "arm0", JOINTS, {"front": (96, 128)}, 6)


@pytest.mark.parametrize(
    ("images", "state", "expected"),
    [
        ({"front": np.zeros((480, 640, 3), np.uint8)}, STATE, r"\[480, 640, 3\], declared \[96"),
        ({"front": np.zeros((3, 96, 128), np.uint8)}, STATE, "channels-first"),
        ({"front": np.zeros((96, 128, 3), np.float32)}, STATE, "uint8 .0-255 RGB., got float32"),
        ({"wrist": FRAME}, STATE, r"missing \['front'\].*not declared \['wrist'\]"),
        ({"front": FRAME.tolist()}, STATE, "not a numpy array"),
        ({"front": FRAME}, np.zeros(7, np.float32), "state has shape \\[7\\]; .* 6 values"),
        ({"front": FRAME}, np.array([0, 0, np.nan, 0, 0, 0]), "state contains NaN"),
    ],
)
def test_the_client_refuses_what_does_not_fit_its_spec_before_sending(
    images: dict, state: np.ndarray, expected: str
) -> None:
    client = client_for("ipc:///nonexistent/tempo.sock")  # nothing is sent: no daemon needed
    with pytest.raises(ObservationError, match=expected):
        client.send_observation(images, state)
    with pytest.raises(ValueError):  # an ObservationError is also a ValueError
        client.send_observation(images, state)
    client.close()


def test_the_daemon_logs_why_it_refuses_a_robots_messages_rate_limited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="controller.daemon.refusals")
    config = ipc_config(tmp_path)
    with running_daemon(config) as daemon:
        client = client_for(config.server.bind)
        client.connect()
        try:
            bad = {"front": np.zeros((3, 96, 128), np.uint8)}  # past the client's own check
            fields = {"session": client.welcome.session}
            for _ in range(50):
                client.connection.send("obs", fields, {**bad, "state": STATE})
            errors = daemon.lanes.default.control.dispatcher.errors
            wait_for(lambda: sum(errors.values()) >= 50, timeout=10)
        finally:
            client.close()
    lines = [r.getMessage() for r in caplog.records if "refused a message" in r.getMessage()]
    assert len(lines) == 1, lines  # 50 refusals, one line within the interval
    assert "robot arm0" in lines[0] and "must be uint8" in lines[0]


def test_a_later_line_counts_the_refusals_it_did_not_log(monkeypatch, caplog) -> None:
    from controller.daemon import refusals
    from controller.errors import ErrorCode
    from controller.wire.protocol import Message

    caplog.set_level("WARNING", logger="controller.daemon.refusals")
    refused = refusals.Refusals(send=lambda *args, **kwargs: True, sessions=set())
    message = Message("obs", {"robot": "arm0", "seq": 1})
    clock = [1_000_000_000_000]
    monkeypatch.setattr(time, "monotonic_ns", lambda: clock[0])
    for _ in range(5):
        refused.log(ErrorCode.SHAPE, "bad frame", message)
    clock[0] += refusals.REFUSAL_LOG_INTERVAL_NS
    refused.log(ErrorCode.SHAPE, "bad frame", message)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "4 more such refusals" in lines[1]
