"""The channel between the control process and an inference process: whole messages in order
whatever the kernel splits them into, a peer that stopped reading never blocks the sender, and a
peer that has gone is seen at once."""

from __future__ import annotations

import os
import threading
import time

import pytest

from controller.process_protocol import process_channel
from controller.process_protocol.process_channel import ChannelBusy, ChannelClosed, ProcessChannel
from controller.process_protocol.process_messages import MessageError


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


def test_a_message_larger_than_the_kernel_takes_goes_out_on_later_calls_without_waiting() -> None:
    ours, peer = pair()
    big = bytes(range(256)) * 4096  # 1 MiB: more than a socket buffer
    ours.send(big)  # returns at once, the rest queued
    received = None
    for _ in range(10_000):
        received = peer.receive(timeout_ms=1)
        if received is not None:
            break
        ours.receive()  # the control side's later calls flush the rest
    assert received == big


def test_a_peer_that_does_not_read_never_blocks_a_send_and_is_busy_past_the_queue_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_channel, "MAX_QUEUED_BYTES", 1 << 20)
    ours, peer = pair()
    chunk = b"x" * 65_536
    outcome: list[str] = []

    def flood() -> None:
        try:
            for _ in range(1_000):  # 64 MiB: well past the kernel's buffer and the bound
                ours.send(chunk)
        except ChannelBusy:
            outcome.append("busy")
        try:
            ours.send(b"small")
        except ChannelBusy:
            outcome.append("still busy")  # unusable from now on

    sender = threading.Thread(target=flood)
    sender.start()
    sender.join(10.0)
    assert outcome == ["busy", "still busy"], "a send waited, or never said busy"
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
    os.write(peer.fileno(), b"\xff\xff\xff\xff")  # past the framing, on purpose
    with pytest.raises(MessageError):
        ours.receive(timeout_ms=1000)
    ours.close()
    peer.close()


def test_a_spinning_receive_takes_a_message_sent_meanwhile_and_still_ends_at_its_timeout() -> None:
    ours, peer = pair()
    sender = threading.Timer(0.05, lambda: ours.send(b"late", timeout_s=5.0))
    sender.start()
    try:
        # Sent while the receiver reads without sleeping: taken by the spin itself.
        assert peer.receive(timeout_ms=5000, spin_s=5.0) == b"late"
    finally:
        sender.join()
    began = time.monotonic()
    # Nothing comes: a spin longer than the timeout ends with it.
    assert peer.receive(timeout_ms=50, spin_s=60.0) is None
    assert time.monotonic() - began < 30.0
    ours.close()
    assert peer.receive(timeout_ms=5000, spin_s=5.0) is None and peer.closed


def test_descriptors_come_with_their_messages_in_order_and_stay_the_senders_too() -> None:
    """Shared memory is handed over as descriptors: each must reach the receiver no later than
    its message, even behind bytes the kernel has not taken yet, and in the order sent."""
    ours, peer = pair()
    (first, first_w), (second, second_w) = os.pipe(), os.pipe()
    inodes = [os.fstat(first).st_ino, os.fstat(second).st_ino]
    big = b"x" * 3_000_000
    ours.send(big)  # queued here mostly: the descriptors wait behind it
    ours.send(b"one", fds=[first])
    ours.send(b"two", fds=[second, first])
    os.close(first)  # the channel keeps its own copies until they are sent
    received = []
    while len(received) < 3:
        ours.receive()  # flushes what is queued
        data = peer.receive(timeout_ms=100)
        if data is not None:
            taken = [peer.take_fd()] if data != big else []
            taken += [peer.take_fd()] if data == b"two" else []
            received.append((data[:3], taken))
    assert [message for message, _ in received] == [b"xxx", b"one", b"two"]
    fds = received[1][1] + received[2][1]
    assert None not in fds and peer.take_fd() is None
    assert [os.fstat(fd).st_ino for fd in fds] == [inodes[0], inodes[1], inodes[0]]  # type: ignore[arg-type]
    for fd in [*fds, second, first_w, second_w]:
        os.close(fd)  # type: ignore[arg-type]
    ours.close()
    peer.close()
