"""A daemon that reads a frames-in-place driver's messages late (a loaded machine, many robots)
must not lose its observations: a slot named in a message still on its way stays that message's
however late the daemon reads it, and a slot the driver does take back unread is counted on
both sides (the driver's frames_lost_unread, the daemon's observations_superseded).

The daemon's loop is paused (it reads nothing) while the driver streams more observations than
its ring has slots, for longer than the driver's in-flight grace; the counters then say what
each side saw."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.daemon.registry import DRIVER_RING_SLOTS
from controller.wire import frame_ring_writer
from controller.wire.client import TempoClient
from tests.conftest import ipc_config, running_daemon, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="sealed shared memory (memfd)")

GRACE_NS = 100_000_000  # the driver's in-flight grace, shortened for the test


class PausableReads:
    """The daemon's socket reads, stopped while `paused` is set (its ticks go on)."""

    def __init__(self, daemon: Any) -> None:
        self.paused = threading.Event()
        self._receive = daemon.transport.receive_until
        daemon.transport.receive_until = self._receive_until

    def _receive_until(self, until_ns: int, *args: Any) -> None:
        while self.paused.is_set():
            time.sleep(0.001)
        self._receive(until_ns, *args)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Any]:
    with running_daemon(ipc_config(tmp_path, "control.rate_hz=100")) as daemon:
        yield daemon


def test_a_daemon_reading_late_loses_no_frames_in_place_observation(
    daemon: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frame_ring_writer, "IN_FLIGHT_GRACE_NS", GRACE_NS)
    reads = PausableReads(daemon)
    driver = TempoClient(
        daemon.endpoint,
        "late-read",
        [f"joint_{i}" for i in range(6)],
        {"front": (96, 128)},
        6,
        frames_in_place=True,
        handshake_timeout_s=10.0,
        silence_reconnect_s=60.0,  # the paused daemon sends nothing: no reconnect meanwhile
    )
    driver.connect()
    try:
        state = np.zeros(6, np.float32)

        def observe() -> None:
            assert driver.send_observation({"front": np.zeros((96, 128, 3), np.uint8)}, state)

        observe()
        sessions = daemon.lanes.default.control.registry.sessions
        session = wait_for(lambda: next(iter(sessions.values()), None))
        wait_for(lambda: session.counters["observations"] == 1)
        reads.paused.set()
        time.sleep(0.05)  # a read under way ends
        sent = 0
        # More observations than slots, over several graces: every slot is named, waits past
        # its grace unread, and the driver comes round to it again.
        started = time.monotonic_ns()
        while sent < 4 * DRIVER_RING_SLOTS or time.monotonic_ns() - started < 4 * GRACE_NS:
            observe()
            sent += 1
            time.sleep(0.01)
        reads.paused.clear()
        wait_for(lambda: session.counters["observations"] + session.counters[
            "observations_superseded"] == 1 + sent, 10)  # fmt: skip
        assert driver.counters.frames_on_socket > 0  # the ring was full: the rest went there
        superseded = session.counters["observations_superseded"]
        assert superseded == 0, f"the daemon dropped {superseded} of {sent} observations"
        assert session.counters["observations"] == 1 + sent
        assert driver.counters.frames_lost_unread == 0
    finally:
        driver.close()
