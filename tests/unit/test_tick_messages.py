"""The tick's packed headers decode to what the wire encoder would have sent."""

from __future__ import annotations

import numpy as np

from controller.daemon.tick_messages import TickHeaders
from controller.wire.protocol import decode


def test_packed_headers_decode_like_encoded_ones() -> None:
    headers = TickHeaders("s1", action_dim=3)
    command = np.array([1.0, 2.0, 3.0], np.float32)
    frame = headers.action(7, 123, 40, -1, -5)
    assert frame is not None
    message = decode([bytes(frame), command.tobytes()])
    assert message.kind == "action" and message.seq == 7 and message.session == "s1"
    h = message.header
    assert (h["time_ns"], h["step"], h["obs_seq"], h["deadline_ns"]) == (123, 40, -1, -5)
    np.testing.assert_array_equal(message.arrays["action"], command)
    # Rewritten in place for the next tick: the new values, nothing of the old.
    frame = headers.action(8, 124, 41, 3, 2**62)
    assert frame is not None
    h = decode([bytes(frame), command.tobytes()]).header
    assert (h["seq"], h["step"], h["obs_seq"], h["deadline_ns"]) == (8, 41, 3, 2**62)
    hold = headers.hold(9, 125, 42, "stale_observation")
    assert hold is not None
    h = decode([bytes(hold)]).header
    assert (h["kind"], h["step"], h["reason"], h["session"]) == (
        "hold",
        42,
        "stale_observation",
        "s1",
    )


def test_a_value_beyond_int64_is_left_to_the_ordinary_encoder() -> None:
    headers = TickHeaders("s1", action_dim=3)
    assert headers.action(1, 1, 1, 1, 2**63) is None
    assert headers.hold(2**64, 1, 1, "x") is None
