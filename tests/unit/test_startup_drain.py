"""While the policy loads, the bound daemon socket is drained: nothing queues without bound."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import zmq

from controller.daemon.transport import RouterTransport
from tests.conftest import wait_for


def test_messages_during_the_load_are_dropped_and_the_loop_gets_the_socket_back(
    tmp_path: Path,
) -> None:
    context = zmq.Context()
    transport = RouterTransport(context, f"ipc://{tmp_path}/tempo.sock")
    transport.open()
    driver = context.socket(zmq.DEALER)
    driver.connect(transport.endpoint)
    try:
        with transport.discarding():
            for i in range(200):
                driver.send_multipart([b"header", str(i).encode(), b"x" * 1000])
            # Every message is read and dropped while the "load" goes on.
            wait_for(lambda: transport.dropped_while_loading == 200, 10)
        assert transport.dropped_while_loading == 200
        # The loop's receive works as before on what comes next.
        driver.send_multipart([b"after", b"the", b"load"])
        received: list[list[Any]] = []

        def pump() -> bool:
            transport.receive_until(
                time.monotonic_ns() + 50_000_000, lambda _who, parts, _t: received.append(parts)
            )
            return bool(received)

        wait_for(pump, 5)
        assert [bytes(p) for p in received[0]] == [b"after", b"the", b"load"]
    finally:
        driver.close(0)
        transport.close()
        context.term()
