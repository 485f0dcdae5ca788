"""Frames carried inline over the remote inference link: back as sent, or refused in a sentence;
the link's clock estimate; and the robot side's modules import no torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from controller.link.remote_relay import LinkClock
from controller.process_protocol.message_codec import MessageError, pack_map
from controller.process_protocol.remote_frames import frames_parts, parts_frames
from policies.base import CameraSpec, PolicySpec


def _spec() -> PolicySpec:
    return PolicySpec(
        state_size=2,
        joint_names=("a", "b"),
        cameras=(CameraSpec(name="front", height=4, width=6),),
        chunk_size=2,
    )


def test_frames_come_back_as_sent() -> None:
    image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    state = np.array([[0.5, -1.0]], np.float32)
    images, back = parts_frames(frames_parts({"front": image}, state), _spec())
    assert np.array_equal(images["front"], image) and images["front"].dtype == np.uint8
    assert np.array_equal(back, state) and back.dtype == np.float32


def test_a_camera_the_spec_lacks_is_refused() -> None:
    parts = frames_parts({"side": np.zeros((4, 6, 3), np.uint8)}, np.zeros(2, np.float32))
    with pytest.raises(MessageError, match="not the spec's cameras"):
        parts_frames(parts, _spec())


def test_an_object_dtype_or_a_short_buffer_is_refused() -> None:
    parts = frames_parts({"front": np.zeros((4, 6, 3), np.uint8)}, np.zeros(2, np.float32))
    header = {"kind": "frames", "names": ["front", "__state__"], "shapes": [[4, 6, 3], [2]]}
    with pytest.raises(MessageError, match="dtype 'object'"):
        parts_frames([pack_map({**header, "dtypes": ["object", "float32"]}), *parts[1:]], _spec())
    with pytest.raises(MessageError, match="not uint8 of shape"):
        parts_frames([parts[0], parts[1][:-1], parts[2]], _spec())


def test_the_robot_side_of_the_remote_link_imports_no_torch() -> None:
    code = (
        "import sys, controller.cli, controller.app, controller.link.remote_relay, "
        "controller.link.remote_policy, controller.daemon.service; "
        "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'controller.inference')"
        " or m.startswith('controller.inference')])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_link_clock_takes_the_offset_of_the_shortest_round_trip() -> None:
    clock = LinkClock()
    assert clock.offset_ns == 0 and clock.status()["rtt_ms"] is None
    # The server's clock runs 5 ms ahead; a trip queued one way skews its own estimate.
    clock.sample(sent_ns=0, server_ns=5_000_000 + 9_000_000, back_ns=10_000_000)  # 1 ms back
    clock.sample(sent_ns=20_000_000, server_ns=5_000_000 + 20_500_000, back_ns=21_000_000)
    assert clock.offset_ns == 5_000_000
    status = clock.status()
    assert status["min_rtt_ms"] == 1.0 and status["clock_offset_ms"] == 5.0
    clock.sample(sent_ns=30, server_ns=0, back_ns=10)  # a clock that went back: not a trip
    assert clock.offset_ns == 5_000_000
