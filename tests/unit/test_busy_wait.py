"""control.busy_wait: the loop's idle work polls without blocking (no OS wake-up in the tick's
path), still hands over every message, and returns at the deadline it was given."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from controller.daemon.transport import RouterTransport


@pytest.mark.parametrize("busy", [False, True])
def test_receive_until_polls_without_blocking_only_when_busy(tmp_path: Path, busy: bool) -> None:
    context = zmq.Context()
    transport = RouterTransport(context, f"ipc://{tmp_path}/tempo.sock")
    transport.open()
    transport.busy_wait = busy
    timeouts: list[int] = []
    wait = transport._wait

    def spy(timeout_ms: int, side: Any) -> tuple[bool, bool]:
        timeouts.append(timeout_ms)
        return wait(timeout_ms, side)

    transport._wait = spy  # type: ignore[method-assign]
    driver = context.socket(zmq.DEALER)
    driver.connect(transport.endpoint)
    try:
        driver.send_multipart([b"one", b"message"])
        received: list[list[Any]] = []
        deadline = time.monotonic_ns() + 30_000_000
        transport.receive_until(deadline, lambda _who, parts, _t: received.append(parts))
        assert time.monotonic_ns() >= deadline
        assert [[bytes(p) for p in parts] for parts in received] == [[b"one", b"message"]]
        if busy:
            assert timeouts and set(timeouts) == {0}
        else:
            assert max(timeouts) > 0  # blocks in the OS until a message or the deadline
    finally:
        driver.close(0)
        transport.close()
        context.term()
