"""TempoClient over a stand-in daemon (a ROUTER socket in this process): `on_command` sees each
action and hold of the current session with that session, also one that does not become the
newest; nothing of another session reaches it; `connection.seq` is the last sequence number
sent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import zmq

from controller.wire.client import TempoClient
from controller.wire.commands import Command
from controller.wire.protocol import decode, encode

SPEC = {"joints": ["a"], "cameras": [], "state_size": 1}


@pytest.fixture
def stand_in() -> Iterator[tuple[zmq.Context, zmq.Socket]]:
    context = zmq.Context()
    daemon = context.socket(zmq.ROUTER)
    daemon.bind("inproc://client-commands")
    yield context, daemon
    daemon.close(linger=0)
    context.term()


def answer(daemon: zmq.Socket, identity: bytes, kind: str, seq: int, **fields: Any) -> None:
    arrays = {"action": np.ones((2, 1), np.float32)} if kind == "action" else None
    frames = encode(kind, robot="r", seq=seq, time_ns=1, fields=fields, arrays=arrays)
    daemon.send_multipart([identity, *frames])


def test_on_command_sees_each_action_and_hold_of_the_session(
    stand_in: tuple[zmq.Context, zmq.Socket],
) -> None:
    context, daemon = stand_in
    seen: list[tuple[Command, str]] = []
    client = TempoClient(
        "inproc://client-commands", "r", ["a"], {}, 1, context=context,
        on_command=lambda command, session: seen.append((command, session)),
    )  # fmt: skip
    try:
        identity = _hello_and_welcome(client, daemon)
        deadline = time.monotonic_ns() + 10**10
        answer(daemon, identity, "action", 1, session="s1", step=5, obs_seq=1, deadline_ns=deadline)
        answer(daemon, identity, "hold", 2, session="s1", step=3, reason="stopped")  # older step
        answer(daemon, identity, "hold", 3, session="old", step=9, reason="stopped")
        for _ in range(100):
            if client.receive(timeout_s=0.01).kind == "action" and len(seen) == 2:
                break
        assert [(c.kind, c.step, s) for c, s in seen] == [("action", 5, "s1"), ("hold", 3, "s1")]
        assert client.receive().step == 5  # the hold of an older step did not replace it
        sent = client.send_observation({}, np.zeros(1, np.float32))
        assert sent == client.connection.seq == 2  # the hello was 1
    finally:
        client.close()


def _hello_and_welcome(client: TempoClient, daemon: zmq.Socket) -> bytes:
    import threading

    identities: list[bytes] = []

    def welcome() -> None:
        assert daemon.poll(5000)
        identity, *frames = daemon.recv_multipart()
        assert decode(frames).kind == "hello"
        identities.append(identity)
        answer(daemon, identity, "welcome", 0, session="s1", control_hz=100.0, spec=SPEC)

    thread = threading.Thread(target=welcome)
    thread.start()
    client.connect()
    thread.join()
    return identities[0]
