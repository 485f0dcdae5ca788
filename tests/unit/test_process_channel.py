"""The channel between the control process and an inference process: whole messages in order
whatever the kernel splits them into, a peer that stopped reading never blocks the sender, and a
peer that has gone is seen at once."""

from __future__ import annotations

import threading

import pytest

from controller.inference.process_channel import ChannelBusy, ChannelClosed, ProcessChannel
from controller.inference.process_messages import MessageError


def pair() -> tuple[ProcessChannel, ProcessChannel]:
    ours, theirs = ProcessChannel.pair()
    return ours, ProcessChannel(theirs)


def test_messages_arrive_whole_and_in_order_small_and_large() -> None:
    ours, peer = pair()
    big = bytes(range(256)) * 16_384  # 4 MiB: many kernel reads and writes
    received: list[bytes] = []

    def read() -> None:
        while len(received) < 3:
            data = peer.receive(timeout_ms=2000)
            assert data is not None
            received.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    ours.send(b"", timeout_s=5.0)
    ours.send(big, timeout_s=5.0)  # waits for room while the reader drains it
    ours.send(b"last", timeout_s=5.0)
    reader.join(10.0)
    assert received == [b"", big, b"last"]
    assert ours.receive() is None and not ours.closed  # nothing the other way


def test_a_peer_that_does_not_read_makes_a_send_fail_at_once_not_wait() -> None:
    ours, peer = pair()
    chunk = b"x" * 65_536
    with pytest.raises(ChannelBusy):
        for _ in range(10_000):  # the kernel's buffers hold a few hundred KiB at most
            ours.send(chunk)
    with pytest.raises(ChannelBusy):
        ours.send(b"small")  # broken for good: a message may be half written
    peer.close()
    ours.close()


def test_a_peer_that_has_gone_is_seen_by_receive_and_send() -> None:
    ours, peer = pair()
    peer.send(b"before it went")
    peer.close()
    assert ours.poll(1000)
    assert ours.receive() == b"before it went"  # what it sent before going is still read
    assert ours.receive(timeout_ms=100) is None and ours.closed
    with pytest.raises(ChannelClosed):
        ours.send(b"anyone there?")
    ours.close()


def test_a_corrupt_length_is_an_error_not_a_huge_allocation() -> None:
    ours, peer = pair()
    peer._sock.sendall(b"\xff\xff\xff\xff")  # noqa: SLF001 - writing past the framing on purpose
    with pytest.raises(MessageError):
        ours.receive(timeout_ms=1000)
    ours.close()
    peer.close()
