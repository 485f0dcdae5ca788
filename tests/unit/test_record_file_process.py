"""The recorder's file process (controller.record.file_process, driven through
controller.record.file_client): what is sent comes back from the file as sent, a frame's head
and pixels sent apart make one message, the size estimate never falls below the file's size
(rotation keeps files under the cap), and a failure there is a FileProcessError saying why."""

from __future__ import annotations

import io
import json
import os
import signal

import numpy as np
import pytest

from controller.record import image_cdr
from controller.record.file_client import FileProcessError, RecordingFiles
from controller.record.file_process import Receiver
from controller.record.packed_json import pack
from controller.record.reading import read_recording

WALL_NS = 1_764_264_000_000_000_000


@pytest.fixture
def files():  # type: ignore[no-untyped-def]
    files = RecordingFiles()
    yield files
    files.stop()


@pytest.mark.parametrize("compression", ["lz4", "zstd", "none"])
def test_messages_and_frames_read_back_as_sent(files, tmp_path, compression) -> None:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(3)]
    path = tmp_path / "a.mcap"
    file = files.open(path, {"joints": json.dumps(["a", "b"])}, compression)
    for i, frame in enumerate(frames):
        parts = image_cdr.image_parts(frame, "front", WALL_NS + i)
        file.write("/arm/camera/front", image_cdr.SCHEMA, WALL_NS + i, i, parts)
        file.write(
            "/arm/observation", "tempo.Observation", WALL_NS + i, i, (b'{"obs_seq":', b"%d}" % i)
        )
    file.close()
    assert file.messages == 6
    recording = read_recording(path)
    assert recording.problem is None and recording.metadata == {"joints": ["a", "b"]}
    cameras = [m for m in recording.messages if m.name == "camera/front"]
    observations = [m for m in recording.messages if m.name == "observation"]
    assert [m.data["obs_seq"] for m in observations] == [0, 1, 2]
    for message, frame in zip(cameras, frames, strict=True):
        np.testing.assert_array_equal(image_cdr.frame_of(message.data), frame)
    assert [m.publish_ns for m in cameras] == [0, 1, 2]
    assert os.path.getsize(path) <= file.size + 64 * 1024  # the summary is written at close


def test_json_messages_are_made_in_the_file_process_within_the_size_counted(
    files, tmp_path
) -> None:
    rng = np.random.default_rng(1)
    chunks = [rng.standard_normal((100, 14)).astype(np.float32) for _ in range(20)]
    path = tmp_path / "json.mcap"
    file = files.open(path, {}, "none")
    for i, chunk in enumerate(chunks):
        file.write_json(
            "/arm/chunk", "tempo.Chunk", WALL_NS + i, i, pack({"step": i, "actions": chunk})
        )
    file.close()
    data = [m.data for m in read_recording(path).messages]
    assert data == [{"step": i, "actions": c.tolist()} for i, c in enumerate(chunks)]
    assert os.path.getsize(path) <= file.size + 64 * 1024


def test_files_follow_one_another_in_one_process(files, tmp_path) -> None:
    for name in ("one.mcap", "two.mcap"):
        file = files.open(tmp_path / name, {}, "lz4")
        file.write(
            "/arm/mark", "tempo.Mark", WALL_NS, 0, (name.encode().join((b'{"reason":"', b'"}')),)
        )
        file.close()
    for name in ("one.mcap", "two.mcap"):
        assert read_recording(tmp_path / name).messages[0].data == {"reason": name}


def test_a_file_that_cannot_be_made_is_an_error_saying_why(files, tmp_path) -> None:
    (tmp_path / "taken.mcap").write_bytes(b"someone else's")
    files.open(tmp_path / "taken.mcap", {}, "lz4")
    with pytest.raises(FileProcessError, match="exists"):
        files.close_file()
    assert (tmp_path / "taken.mcap").read_bytes() == b"someone else's"


def test_a_killed_file_process_is_an_error_not_a_hang(files, tmp_path) -> None:
    file = files.open(tmp_path / "a.mcap", {}, "none")
    file.write("/arm/mark", "tempo.Mark", WALL_NS, 0, (b'{"reason":"x"}',))
    os.kill(files.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    files.process.wait()  # type: ignore[union-attr]
    big = np.zeros((480, 640, 3), np.uint8)
    with pytest.raises(FileProcessError, match="ended"):
        for _ in range(10):  # past the pipe's buffer
            file.write(
                "/arm/camera/f", image_cdr.SCHEMA, WALL_NS, 0, image_cdr.image_parts(big, "f", 0)
            )


def test_sigterm_and_sigint_leave_the_file_process_writing(files, tmp_path) -> None:
    # Ctrl-C and systemd's stop signal the whole group; the daemon ends this process itself.
    files.open(tmp_path / "first.mcap", {}, "lz4").close()  # the process is up and answering
    path = tmp_path / "a.mcap"
    file = files.open(path, {}, "lz4")
    file.write("/arm/mark", "tempo.Mark", WALL_NS, 0, (b'{"reason":"before"}',))
    for sig in (signal.SIGTERM, signal.SIGINT):
        os.kill(files.process.pid, sig)  # type: ignore[union-attr]
    file.write("/arm/mark", "tempo.Mark", WALL_NS, 1, (b'{"reason":"after"}',))
    file.close()
    assert [m.data["reason"] for m in read_recording(path).messages] == ["before", "after"]


def test_after_a_failure_every_call_says_the_first_reason(files, tmp_path) -> None:
    (tmp_path / "taken.mcap").write_bytes(b"")
    files.open(tmp_path / "taken.mcap", {}, "lz4")
    with pytest.raises(FileProcessError, match="exists") as first:
        files.close_file()
    with pytest.raises(FileProcessError) as again:
        files.open(tmp_path / "free.mcap", {}, "lz4")
    assert str(again.value) == str(first.value)


def test_the_receive_buffer_grows_and_a_partial_command_is_end_of_input() -> None:
    big, small = bytes(range(256)) * 400, b"tail"  # 100 KB: past the first buffer
    receiver = Receiver(io.BytesIO(small + big + small + b"par"))
    assert bytes(receiver.read(4)) == small  # type: ignore[arg-type]
    assert bytes(receiver.read(len(big))) == big  # type: ignore[arg-type]
    assert bytes(receiver.read(4)) == small  # type: ignore[arg-type]
    assert receiver.read(8) is None
