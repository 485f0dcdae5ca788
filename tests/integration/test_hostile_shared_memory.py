"""A daemon that survives hostile shared memory: what a process of the daemon's own user (a
same-host driver, a tmp cleaner, anything) can do to the memory the control process shares with
its inference process and with drivers that write frames in place.

Each daemon test runs `tempo serve` (the built-in reach policy on the CPU, in its inference
process) as a child process, attacks the memory as another process would, and asserts what a
good driver, whose frames go on the socket, sees afterwards: actions again, from the same
daemon. The memory is found as an attacker finds it: the daemon's open descriptors in /proc
(a memfd, or a file in /dev/shm).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.process_protocol.frame_slots import FrameSlots
from controller.process_protocol.process_channel import ProcessChannel
from controller.process_protocol.process_messages import Infer, RequestFailed, Stop, decode, encode
from policies.base import CameraSpec, PolicySpec, Prediction, first_context
from tests.conftest import StreamingDriver, daemon_process, recording_client, wait_for
from tests.integration.test_inference_process import _actions_after, _child_pid

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

STATE = np.zeros(6, np.float32)
FAST = ("control.rate_hz=100", "supervision.hang_timeout_s=1.0")


def shared_memory_of(pid: int) -> list[Path]:
    """Every shared memory the process `pid` holds open, as paths another process of its user
    can open: its memfds, and its files in /dev/shm."""
    found = []
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(entry)
        except OSError:  # closed meanwhile
            continue
        if target.startswith(("/memfd:", "/dev/shm/")):
            found.append(entry)
    return found


def truncate(path: Path) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.ftruncate(fd, 0)
    except PermissionError:  # sealed against shrinking
        pass
    finally:
        os.close(fd)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Any, StreamingDriver]]:
    """The daemon, and a good driver it serves (frames on the socket: the control process
    copies them into its slots for the inference process)."""
    with daemon_process(tmp_path, *FAST) as daemon:
        good = StreamingDriver(f"ipc://{tmp_path}/tempo.sock", frames_in_place=False).start()
        try:
            _actions_after(good, 10)
            yield daemon, good
        finally:
            good.stop()


def test_a_driver_that_truncates_its_frame_ring_cannot_kill_the_daemon(
    tmp_path: Path, served: tuple[Any, StreamingDriver]
) -> None:
    daemon, good = served
    attacker = recording_client(f"ipc://{tmp_path}/tempo.sock", "attacker", frames_in_place=True)
    attacker.connect()
    try:
        assert attacker.frames_shared
        attacker.send_observation({"front": np.zeros((96, 128, 3), np.uint8)}, STATE)
        assert attacker.connection.frames is not None
        truncate(attacker.connection.frames.ring.path)
        # An observation naming a slot, sent without touching the (maybe truncated) memory.
        fields = {"session": attacker.welcome.session, "frame_slot": {"index": 1, "generation": 2}}
        attacker.connection.send("obs", fields, {"state": STATE})
        _actions_after(good, 20)
        assert daemon.poll() is None
    finally:
        attacker.close()  # unmaps the ring without touching its (maybe truncated) memory


def test_the_inference_slots_truncated_by_another_process_cannot_kill_the_daemon(
    served: tuple[Any, StreamingDriver],
) -> None:
    daemon, good = served
    memory = shared_memory_of(daemon.pid)
    assert memory, "the daemon shares no memory with its inference process"
    for path in memory:
        truncate(path)
    _actions_after(good, 20)
    assert daemon.poll() is None


def test_a_tmp_cleaner_cannot_stop_the_inference_process_restarting(
    tmp_path: Path, served: tuple[Any, StreamingDriver]
) -> None:
    """A cleaner that deletes whatever lies in /dev/shm, while the daemon runs for weeks."""
    daemon, good = served
    for path in shared_memory_of(daemon.pid):
        name = os.readlink(path)
        if name.startswith("/dev/shm/"):
            Path(name).unlink(missing_ok=True)
    child = wait_for(lambda: _child_pid(tmp_path))
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: _child_pid(tmp_path) not in (None, child), 60)
    _actions_after(good, 20)


def test_a_scribbled_slot_header_is_laid_out_afresh_at_the_next_restart(
    tmp_path: Path, served: tuple[Any, StreamingDriver]
) -> None:
    """Garbage in the header (layout fingerprint, heartbeat, generations): the process that
    served with it may be killed for it, but the next one serves again."""
    daemon, good = served
    garbage = np.random.default_rng(7).integers(0, 256, 4096, dtype=np.uint8).tobytes()
    for path in shared_memory_of(daemon.pid):
        fd = os.open(path, os.O_RDWR)
        try:
            os.pwrite(fd, garbage, 0)
        finally:
            os.close(fd)
    child = wait_for(lambda: _child_pid(tmp_path))
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: _child_pid(tmp_path) not in (None, child), 60)
    _actions_after(good, 20)
    assert daemon.poll() is None


# ---- the inference process's side: data written into a slot behind the control process ----

SPEC = PolicySpec(
    cameras=(CameraSpec(name="front", height=48, width=64),),
    state_size=2,
    joint_names=("x", "y"),
    chunk_size=3,
)


class ScribbledRunner:
    """A runner during whose step another process writes into the observation's slot (its
    generation untouched): what the runner computed must not be served."""

    spec = SPEC
    outputs = ("actions",)

    def __init__(self, slots: FrameSlots) -> None:
        self.slots = slots

    def predict(self, images: Any, context: Any) -> Prediction:
        self.slots.arrays(0)["front"][5, 5] = 255  # behind the control process's back
        return Prediction(np.zeros((3, 2), np.float32))

    def status(self) -> dict[str, Any]:
        return {"device": "cpu"}


def test_data_scribbled_into_a_slot_is_refused_not_served() -> None:
    pytest.importorskip("torch")
    from controller.inference.process_server import DriverRings, _serve

    ours, theirs = ProcessChannel.pair()
    control = FrameSlots.create(SPEC, 2)
    slots = FrameSlots.attach(control.path, SPEC, 2)
    runner = ScribbledRunner(slots)
    result: list[int] = []
    server = threading.Thread(
        target=lambda: result.append(
            _serve(runner, ProcessChannel(theirs), slots, DriverRings(runner), os.getppid(), 0.0)  # type: ignore[arg-type]
        )
    )
    server.start()
    try:
        context = first_context(SPEC, np.zeros(2, np.float32))
        images = {"front": np.zeros((48, 64, 3), np.uint8)}
        generation = control.write(0, images, context.state_history)
        ours.send(encode(Infer(1, 0, generation, 0, True, 0)), timeout_s=5.0)
        reply = None
        for _ in range(500):
            if (data := ours.receive(timeout_ms=20)) is not None:
                reply = decode(data)
                break
        assert isinstance(reply, RequestFailed), reply
        assert reply.id == 1 and "written behind" in reply.error
    finally:
        ours.send(encode(Stop()), timeout_s=5.0)
        server.join(10)
        slots.close()
        control.close()
    assert result == [0]


def test_a_malformed_attach_still_takes_its_descriptor_and_the_next_gets_its_own() -> None:
    """Descriptors are matched to messages in order: one left behind by a refused message
    would hand the next ring's request another ring's memory."""
    pytest.importorskip("torch")
    from controller.inference.process_server import _received
    from controller.process_protocol.message_codec import pack_map
    from controller.process_protocol.process_messages import AttachRing

    ours, theirs = ProcessChannel.pair()
    child = ProcessChannel(theirs)
    (wrong, wrong_w), (right, right_w) = os.pipe(), os.pipe()
    try:
        ours.send(pack_map({"kind": "attach_ring", "id": "not a number"}), 5.0, fds=[wrong])
        ours.send(encode(AttachRing(2, "ring", 4)), 5.0, fds=[right])
        messages = [_received(child, data) for data in (child.receive(2000), child.receive(2000))]  # type: ignore[arg-type]
        assert messages[0] is None and isinstance(messages[1], AttachRing)
        fd = child.take_fd()
        assert fd is not None and os.fstat(fd).st_ino == os.fstat(right).st_ino
        os.close(fd)
        assert child.take_fd() is None
    finally:
        for fd in (wrong, wrong_w, right, right_w):
            os.close(fd)
        ours.close()
        child.close()
