"""Same-host drivers write camera frames in place: a real daemon on an ipc:// endpoint, its
policy in a real inference process, and the real client. The frames travel through the
session's shared-memory ring (the inference process reads the driver's slot itself), and the
observation's message carries only its header and state."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.errors import HandshakeRefused
from controller.link.remote_feed import RemoteFeed
from controller.link.remote_policy import RemotePolicy
from controller.wire import header_schema
from controller.wire.client import TempoClient
from controller.wire.commands import Command
from tests.conftest import ipc_config, running_daemon, wait_for
from tests.integration.frame_policy_inference import SLOW_PIXEL, expected_action

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="sealed shared memory (memfd)")

CHILD = Path(__file__).with_name("frame_policy_inference.py")
JOINTS = [f"joint_{i}" for i in range(6)]
STATE = np.zeros(6, np.float32)


@pytest.fixture(scope="module")
def release_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Created by a test once it has rewritten the slow frame: the policy then finishes."""
    return tmp_path_factory.mktemp("frame-policy") / "release"


@pytest.fixture(scope="module")
def policy(release_file: Path) -> Iterator[RemotePolicy]:
    policy = RemotePolicy(
        [sys.executable, str(CHILD)],
        hang_timeout_s=5.0,
        env={"FRAME_POLICY_RELEASE": str(release_file)},
    )
    policy.start()
    yield policy
    policy.stop()


@pytest.fixture
def daemon(tmp_path: Path, policy: RemotePolicy) -> Iterator[Any]:
    # newest: every action is a row of the newest chunk, a function of one frame only
    config = ipc_config(tmp_path, "execution.ensemble=newest", "control.rate_hz=100")
    with running_daemon(config, policy) as daemon:
        yield daemon


def client(daemon: Any, robot: str, frames_in_place: bool | None) -> TempoClient:
    c = TempoClient(
        daemon.endpoint,
        robot,
        JOINTS,
        {"front": (96, 128)},
        6,
        frames_in_place=frames_in_place,
        handshake_timeout_s=10.0,
    )
    c.connect()
    return c


def frame(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (96, 128, 3), dtype=np.uint8)


def action_for(c: TempoClient, send: Callable[[], int | None], timeout: float = 20.0) -> Command:
    """Send an observation (again every 20 ms, as a driver streams: one observation alone goes
    stale while another robot's inference runs) until an action planned from one comes."""
    first = send()
    assert first is not None
    deadline = time.monotonic() + timeout
    next_send = time.monotonic() + 0.02
    while time.monotonic() < deadline:
        command = c.receive(timeout_s=0.005)
        if command.kind == "action" and command.obs_seq >= first:
            return command
        if time.monotonic() >= next_send:
            send()
            next_send += 0.02
    raise AssertionError(f"no action from observation {first} on: {c.counters}")


def test_frames_written_in_place_give_the_actions_of_frames_sent_on_the_socket(
    daemon: Any, policy: RemotePolicy
) -> None:
    shared = client(daemon, "shared", None)  # ipc: asks for a ring by default
    copied = client(daemon, "copied", False)
    try:
        assert shared.frames_shared and not copied.frames_shared
        for seed in range(6):
            image = frame(seed)
            if seed % 2:  # the camera writes straight into the slot

                def send(image: np.ndarray = image) -> int | None:
                    buffers = shared.frame_buffers()
                    assert buffers is not None
                    buffers["front"][:] = image
                    return shared.send_observation(buffers, STATE)

            else:  # an ordinary array, copied into the slot by the client

                def send(image: np.ndarray = image) -> int | None:
                    return shared.send_observation({"front": image}, STATE)

            in_place = action_for(shared, send).action
            assert shared.connection.frames is not None
            ring = shared.connection.frames.ring
            # Once the daemon has served or dropped the observations, their slots are free.
            wait_for(lambda ring=ring: all(ring.free(i) for i in range(ring.count)))
            on_socket = action_for(
                copied, lambda image=image: copied.send_observation({"front": image}, STATE)
            ).action
            np.testing.assert_array_equal(in_place, on_socket)
            np.testing.assert_allclose(in_place, expected_action(image), rtol=1e-6)
        # The inference process read the driver's ring itself: no copy in the control process.
        assert policy.status()["process"]["driver_rings"] == 1
        assert shared.counters.errors == 0 and copied.counters.errors == 0
        # While the daemon holds every slot, the client sends the frames on the socket.
        for index in range(ring.count):
            ring.hold(index, 10**9)
        assert shared.frame_buffers() is None
        image = frame(9)
        served = action_for(shared, lambda: shared.send_observation({"front": image}, STATE))
        np.testing.assert_allclose(served.action, expected_action(image), rtol=1e-6)
        assert shared.counters.frames_on_socket >= 1
        for index in range(ring.count):
            ring.release(index, 10**9)
        writer = shared.connection.frames
        ring_file = writer.ring.path if writer is not None else None
        assert ring_file is not None
        memory = os.stat(ring_file).st_ino  # the daemon's sealed memory, no file in /dev/shm
    finally:
        shared.close()
        copied.close()
    # The session ended with bye: the daemon no longer holds its ring's memory.
    wait_for(lambda: not same_file(ring_file, memory))


def same_file(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except FileNotFoundError:
        return False


def test_a_slot_written_after_it_was_sent_is_refused_and_others_are_served(
    daemon: Any, policy: RemotePolicy, release_file: Path
) -> None:
    rogue = client(daemon, "rogue", True)
    good = client(daemon, "good", False)
    try:
        action_for(rogue, lambda: rogue.send_observation({"front": frame(1)}, STATE))
        # A frame the policy takes long over; the driver writes its slot again meanwhile.
        buffers = rogue.frame_buffers()
        assert buffers is not None
        buffers["front"][:] = SLOW_PIXEL
        assert rogue.connection.frames is not None
        index = rogue.connection.frames.next
        slow_seq = rogue.send_observation(buffers, STATE)
        # The daemon has accepted it (the slot was intact then) and the policy is reading it.
        registry = daemon.lanes.default.control.registry
        wait_for(lambda: any(s.last_obs_seq == slow_seq for s in registry.live))
        ring = rogue.connection.frames.ring
        ring.begin(index)
        ring.arrays(index)["front"][:] = 0
        ring.end(index)
        release_file.touch()  # the policy, still reading the slot, may finish now
        # The daemon keeps serving the other robot meanwhile.
        image = frame(2)
        served = action_for(good, lambda: good.send_observation({"front": image}, STATE))
        np.testing.assert_allclose(served.action, expected_action(image), rtol=1e-6)
        wait_for(lambda: rogue.receive(0.01) and rogue.counters.error_codes.get("frame_slot"))
        assert "frame slot" in rogue.counters.last_error
        assert str(slow_seq) in rogue.counters.last_error
        # Nothing planned from the torn observation was ever sent.
        for _ in range(20):
            assert rogue.receive(0.01).obs_seq != slow_seq
        robots = {r["robot"]: r["counters"] for r in daemon.status()["robots"]}
        assert robots["rogue"].get("frames_overwritten") == 1
        assert not robots["good"].get("frames_overwritten")
        # And the rogue robot itself is served again from its next observation.
        image = frame(3)
        again = action_for(rogue, lambda: rogue.send_observation({"front": image}, STATE))
        np.testing.assert_allclose(again.action, expected_action(image), rtol=1e-6)
    finally:
        rogue.close()
        good.close()


def test_a_daemon_older_than_frames_in_place_still_serves_a_new_client(
    daemon: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a daemon of before frames in place does: refuse the unknown hello field.
    monkeypatch.setitem(header_schema._OPTIONAL, "hello", {})
    c = client(daemon, "new", None)
    try:
        assert not c.frames_shared
        image = frame(4)
        served = action_for(c, lambda: c.send_observation({"front": image}, STATE))
        np.testing.assert_allclose(served.action, expected_action(image), rtol=1e-6)
    finally:
        c.close()
    with pytest.raises(HandshakeRefused, match="frames_in_place"):
        client(daemon, "insists", True)


def test_the_control_loop_feeds_the_inference_process_without_a_worker_thread(
    daemon: Any, policy: RemotePolicy
) -> None:
    """A second Python thread in the control process would compete with the loop for the GIL:
    requests are sent and replies taken by the loop's own thread, between ticks."""
    feed = daemon.lanes.default.feed
    assert isinstance(feed, RemoteFeed)
    before = feed.inferences
    robot = client(daemon, "looped", False)
    try:
        served = action_for(robot, lambda: robot.send_observation({"front": frame(3)}, STATE))
        np.testing.assert_allclose(served.action, expected_action(frame(3)), rtol=1e-6)
    finally:
        robot.close()
    assert feed.inferences > before
    names = {thread.name for thread in threading.enumerate()}
    assert "tempo-loop" in names and "tempo-inference" not in names
