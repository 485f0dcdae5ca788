"""A driver cannot forge or flood the daemon's log: what it sends is escaped before it reaches a
log line, and a line it can cause once per message is rate-limited."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import zmq

from controller.observe.log_safety import shown
from controller.wire.client import TempoClient
from controller.wire.protocol import decode, encode
from tests.conftest import ipc_config, running_daemon, wait_for

JOINTS = [f"joint_{i}" for i in range(6)]
SPEC = {
    "joints": JOINTS,
    "cameras": [{"name": "front", "height": 96, "width": 128}],
    "state_size": 6,
}
FORGED = "evil\n2026-01-01 00:00:00 ERROR forged line"
HOSTILE_NAMES = [FORGED, "evil\x1b[2J\x1b[31mred", "evil\r\u2028x", "x" * 4096]


def raw_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_hostile_robot_name_is_escaped_in_every_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="controller")
    config = ipc_config(tmp_path)
    with running_daemon(config) as daemon:
        socket = zmq.Context.instance().socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(config.server.bind)
        try:
            for name in HOSTILE_NAMES:
                socket.send_multipart(
                    encode("hello", robot=name, seq=1, time_ns=1, fields={"spec": SPEC})
                )
                assert socket.poll(5000), "no reply to a hello"
                reply = decode(socket.recv_multipart())
                assert reply.kind == "error" and reply.header["code"] == "not_allowed"
            errors = daemon.lanes.default.control.dispatcher.errors
            wait_for(lambda: sum(errors.values()) >= len(HOSTILE_NAMES))
        finally:
            socket.close(0)
    messages = raw_messages(caplog)
    refused = [m for m in messages if "refused a message from robot" in m]
    assert len(refused) == len(HOSTILE_NAMES), messages  # each name its own line
    for message in messages:
        assert "\n" not in message and "\r" not in message and "\x1b" not in message, message
        assert "\u2028" not in message, message
        assert len(message) < 2000, message[:200]  # the 4096-character name is cut
    assert any("evil\\n2026-01-01" in m for m in refused)  # shown escaped, not dropped
    assert any("[4096 characters]" in m for m in refused)


def test_flipping_a_teleop_mask_200_times_logs_a_handful_of_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="controller.daemon")
    config = ipc_config(tmp_path)
    with running_daemon(config) as daemon:
        client = TempoClient(config.server.bind, "arm0", JOINTS, {"front": (96, 128)}, 6)
        client.connect()
        try:
            dispatcher = daemon.lanes.default.control.dispatcher
            start = dispatcher.messages
            for i in range(200):
                client.set_teleop(JOINTS[:1] if i % 2 else [])
                time.sleep(0.001)  # a driver's pace, not a burst past its send queue
            sent = 200 - client.counters.dropped_observations
            assert sent >= 100
            wait_for(lambda: dispatcher.messages - start >= sent, timeout=10)
        finally:
            client.close()
    lines = [m for m in raw_messages(caplog) if "operator now owns" in m]
    assert 1 <= len(lines) <= 5, lines
    assert "arm0" in lines[0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("arm-left", "arm-left"),
        ("a\nb", "a\\nb"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("tab\there", "tab\\there"),
        ("para\u2029x", "para\\u2029x"),
        ("café arm", "café arm"),  # printable non-ASCII stays readable
        (["j\n0"], "['j\\n0']"),  # str() of a list already escapes; nothing raw either way
    ],
)
def test_shown_escapes_control_characters(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_shown_cuts_long_text_with_a_marker() -> None:
    text = shown("\n" * 5000, limit=80)
    assert "\n" not in text and text.endswith("...[5000 characters]")
    assert len(text) <= 80 + len("...[5000 characters]")
