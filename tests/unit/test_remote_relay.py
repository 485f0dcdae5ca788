"""The robot side of the remote link against a fake server: a server that answers garbage, one
that never answers, and one whose key is not the configured one each end the relay with one
sentence (the daemon then holds its robots and opens the link again)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import zmq

from controller.link.remote_relay import Relay, RelayEnded, RemoteServer
from controller.process_protocol.process_channel import ProcessChannel
from controller.wire.keys import generate_keys, load_server_keys


@contextmanager
def fake_server(tmp_path: Path, answer: list[bytes] | None) -> Iterator[tuple[str, Path]]:
    """A CURVE ROUTER (no allowlist: any client key) that answers each message with `answer`
    (None: never); yields its address and public key file."""
    public, secret = generate_keys(tmp_path / "server", "server")
    server_public, server_secret = load_server_keys(secret)
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.CURVE_SERVER, 1)
    router.setsockopt(zmq.CURVE_SECRETKEY, server_secret)
    router.setsockopt(zmq.CURVE_PUBLICKEY, server_public)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            if router.poll(20) and answer is not None:
                peer = router.recv_multipart()[0]
                router.send_multipart([peer, *answer])
            elif router.poll(0):
                router.recv_multipart()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{port}", public
    finally:
        stop.set()
        thread.join(5)
        router.close(0)
        context.term()


def _run_relay(tmp_path: Path, address: str, server_key: Path) -> str:
    _, client_secret = generate_keys(tmp_path / "robot", "robot")
    ours, theirs = ProcessChannel.pair()
    context = zmq.Context()
    try:
        remote = RemoteServer(address, server_key, client_secret, timeout_s=1.0)
        relay = Relay(remote, ProcessChannel(theirs), context)
        with pytest.raises(RelayEnded) as ended:
            relay.run()
        assert ended.value.code == 1
        return str(ended.value)
    finally:
        context.destroy(linger=0)
        ours.close()


def test_a_server_answering_garbage_ends_the_link_in_one_sentence(tmp_path: Path) -> None:
    with fake_server(tmp_path, [b"msg", b"\xc1not msgpack"]) as (address, key):
        why = _run_relay(tmp_path, address, key)
    assert why.startswith(f"the inference server at {address} sent a malformed message")


def test_a_silent_server_ends_the_link_in_one_sentence(tmp_path: Path) -> None:
    with fake_server(tmp_path, None) as (address, key):
        why = _run_relay(tmp_path, address, key)
    assert why == (
        f"no answer from the inference server at {address} within 1 s: it is not running or "
        "not reachable"
    )


def test_a_server_with_another_key_is_refused(tmp_path: Path) -> None:
    other, _ = generate_keys(tmp_path / "other", "other")
    with fake_server(tmp_path, [b"alive"]) as (address, _key):
        why = _run_relay(tmp_path, address, other)
    assert "refused the link" in why
