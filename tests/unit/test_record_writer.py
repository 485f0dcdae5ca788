"""The recorder's queue and ring on their own (no daemon): bounded by count, by seconds and by
memory; continuous files bounded in total; an unusable directory is one sentence."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time

import numpy as np
import pytest

from controller.config import load_config
from controller.errors import ConfigError
from controller.record.queue import Record, RecordQueue
from controller.record.writer import Recorder
from controller.record_config import RecordConfig

JOINTS = ["a", "b"]
MIB = 1024 * 1024


def observation(time_ns: int, frame_bytes: int = 0) -> Record:
    images = {"front": np.zeros(frame_bytes, np.uint8)} if frame_bytes else {}
    fields = {"obs_seq": 1, "step": 1, "driver_time_ns": 1, "images": images,
              "state": np.zeros(2, np.float32), "teleop": None, "episode": 0}  # fmt: skip
    return Record("observation", "arm", time_ns, fields)


def test_a_full_queue_drops_the_new_record_and_counts_it_by_kind() -> None:
    queue = RecordQueue(16)
    for i in range(20):
        queue.put(observation(i))
    queue.put(Record("mark", "arm", 99, {"reason": "x"}))
    assert len(queue) == 16 and queue.queued == 16
    assert queue.dropped["observation"] == 4 and queue.dropped["mark"] == 1
    first = queue.take()
    assert first is not None and first.time_ns == 0  # the oldest kept, the newest dropped


def test_the_ring_keeps_the_last_seconds(tmp_path) -> None:
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=1.0)
    recorder = Recorder(config, JOINTS, 50.0)
    for i in range(50):
        recorder.write(observation(i * 100_000_000))  # every 0.1 s for 5 s
    kept = [entry[0] for entry in recorder.ring]
    assert kept[0] == 3_900_000_000 and kept[-1] == 4_900_000_000
    assert list(tmp_path.iterdir()) == []  # nothing written without an incident


def test_the_ring_holds_nothing_the_garbage_collector_scans(tmp_path) -> None:
    """Seconds of records kept as objects the collector tracks made its pauses (in every
    thread, the loop's too) the largest part of the tick lateness with ring recording on."""
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=10.0)
    recorder = Recorder(config, JOINTS, 50.0)
    for i in range(20):
        recorder.write(observation(i * 100_000_000))
    gc.collect()  # a tuple is untracked once a collection finds only untracked items in it
    assert len(recorder.ring) == 20
    assert not any(gc.is_tracked(item) for item in recorder.ring)


def test_the_ring_keeps_at_most_its_memory(tmp_path) -> None:
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=60.0, ring_max_mb=1)
    recorder = Recorder(config, JOINTS, 50.0)
    for i in range(20):
        recorder.write(observation(i, frame_bytes=300_000))
    assert len(recorder.ring) == 3  # 3 x 300 KB fit in 1 MiB, 4 do not
    assert recorder.ring.bytes <= 1024 * 1024


def test_a_directory_that_cannot_be_made_is_one_sentence(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    recorder = Recorder(RecordConfig(mode="continuous", dir=blocker / "rec"), JOINTS, 50.0)
    with pytest.raises(ConfigError, match=r"^record.dir .* cannot be created \(.*\); set"):
        recorder.start()


def test_frames_other_than_raw_downscale_or_jpeg_are_refused_by_the_config() -> None:
    assert RecordConfig.model_validate({"frames": "jpeg"}).jpeg_qscale == 3
    with pytest.raises(ValueError, match="frames"):
        RecordConfig.model_validate({"frames": "png"})
    with pytest.raises(ValueError, match="jpeg_qscale"):
        RecordConfig.model_validate({"frames": "jpeg", "jpeg_qscale": 1})


@pytest.mark.parametrize(("setting", "chunks"), [("lz4", "lz4"), ("zstd", "zstd"), ("none", "")])
def test_the_files_chunks_are_compressed_as_configured(tmp_path, setting, chunks) -> None:
    """zstd took 0.67 s of a core per second of three 30 Hz cameras, lz4 0.15 s: users choose."""
    from mcap.reader import make_reader

    from controller.record.reading import read_recording

    config = RecordConfig(mode="continuous", dir=tmp_path, compression=setting)
    recorder = Recorder(config, JOINTS, 50.0)
    recorder.write(observation(1))
    recorder.close_file()
    (path,) = recorder.files
    with open(path, "rb") as stream:
        summary = make_reader(stream).get_summary()
    assert summary is not None
    assert {index.compression for index in summary.chunk_indexes} == {chunks}
    assert [m.name for m in read_recording(path).messages] == ["observation"]


@pytest.mark.parametrize("mode", ["continuous", "ring"])
def test_a_failed_file_process_pauses_with_its_reason_and_stop_is_quiet(
    tmp_path, mode, monkeypatch
) -> None:
    """A file the process cannot make: the recorder pauses, says why (in status), drops what
    comes after (ring mode keeps it in its ring), and stops without an error (a traceback from
    its thread)."""
    (tmp_path / "blocked").write_bytes(b"a file where the directory should be")
    config = RecordConfig(mode=mode, dir=tmp_path, compression="none")
    recorder = Recorder(config, JOINTS, 50.0)
    crashes: list[object] = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)
    recorder.start()
    # After start's mkdir: the file process is the one to find the directory unusable.
    recorder.config = config.model_copy(update={"dir": tmp_path / "blocked"})
    recorder.queue.put(observation(1))
    recorder.queue.put(Record("mark", "arm", 2, {"reason": "look"}))
    deadline = time.monotonic() + 30
    while recorder.status()["paused"] is None and time.monotonic() < deadline:
        time.sleep(0.05)
    recorder.queue.put(observation(3))
    paused = recorder.status()["paused"]
    recorder.stop()
    assert paused is not None and "FileExistsError" in paused  # the reason, not "it ended"
    assert recorder.error is None and crashes == []
    if mode == "continuous":
        assert recorder.queue.dropped["observation"] >= 1
    else:  # the ring keeps its records while paused; the mark's incident is counted unwritten
        assert recorder.queue.dropped["observation"] == 0
        assert recorder.status()["incidents_not_written"] >= 1
        assert recorder.status()["incidents"] == 0


def framed(time_ns: int) -> Record:
    """An observation with a 90 KB camera frame: about seven fill a 1 MB file."""
    record = observation(time_ns)
    record.fields["images"] = {"front": np.zeros((100, 300, 3), np.uint8)}  # type: ignore[index]
    return record


def finished_sizes(recorder: Recorder, sizes: dict[str, int]) -> None:
    """The size of every file the recorder has finished (all but the open one) and not deleted."""
    for path in recorder.files[:-1]:
        if path not in sizes and os.path.exists(path):
            sizes[path] = os.path.getsize(path)


def test_max_total_mb_deletes_the_oldest_files_this_recorder_wrote(tmp_path) -> None:
    """Only the newest files remain, within the cap; files another program put in the same
    directory, a recording-like name among them, are left as they were."""
    foreign = {
        "notes.txt": b"an operator's notes",
        "tempo-20000101T000000.000000Z.mcap": b"x" * 4096,
    }
    for name, content in foreign.items():
        (tmp_path / name).write_bytes(content)
    config = RecordConfig(
        mode="continuous", dir=tmp_path, max_file_mb=1, max_total_mb=3, compression="none"
    )
    recorder = Recorder(config, JOINTS, 50.0)
    sizes: dict[str, int] = {}
    for i in range(80):
        recorder.write(framed(i * 1_000_000))
        finished_sizes(recorder, sizes)
    recorder.close_file()
    recorder.stop()
    left = [path for path in recorder.files if os.path.exists(path)]
    gone = [path for path in recorder.files if path not in left]
    assert len(recorder.files) >= 8 and gone
    assert left == recorder.files[-len(left) :]  # the newest, every one of them
    # Exactly as many finished files as fit beside a whole next file (the last one, closed at
    # the end, is kept without a trim): one more, or one fewer, fails.
    finished = recorder.files[:-1]
    kept, total = 0, 0
    for path in reversed(finished):
        if total + sizes[path] + MIB > 3 * MIB:
            break
        kept, total = kept + 1, total + sizes[path]
    assert left == [*finished[len(finished) - kept :], recorder.files[-1]] and kept >= 2
    status = recorder.status()
    assert status["files_deleted"] == len(gone)
    assert status["bytes_deleted"] == sum(sizes[path] for path in gone)
    for name, content in foreign.items():
        assert (tmp_path / name).read_bytes() == content


def test_an_old_file_already_removed_is_skipped(tmp_path, caplog) -> None:
    """An operator removed the oldest recording: the writer skips it, neither failing nor
    counting it, and deletes the next oldest when its turn comes."""
    config = RecordConfig(
        mode="continuous", dir=tmp_path, max_file_mb=1, max_total_mb=2, compression="none"
    )
    recorder = Recorder(config, JOINTS, 50.0)
    sizes: dict[str, int] = {}
    i = 0
    while len(recorder.files) < 4:
        recorder.write(framed(i * 1_000_000))
        finished_sizes(recorder, sizes)
        if len(recorder.files) == 2 and os.path.exists(recorder.files[0]):
            os.remove(recorder.files[0])  # the first file finished, then removed by hand
        i += 1
    recorder.close_file()
    recorder.stop()
    assert [os.path.exists(path) for path in recorder.files] == [False, False, True, True]
    # The second file deleted by the cap; the first, removed by hand, counted by neither.
    status = recorder.status()
    assert status["files_deleted"] == 1 and status["bytes_deleted"] == sizes[recorder.files[1]]
    assert recorder.error is None
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]


def test_a_total_cap_below_two_files_is_refused(tmp_path) -> None:
    """A cap must hold a finished file beside the open one; 0 is no cap."""
    refusal = r"record.max_total_mb 3 is below twice record.max_file_mb \(2\): set it to 0 \(no"
    with pytest.raises(ValueError, match=refusal + r" limit\) or at least 4, room for a finished"):
        RecordConfig(mode="continuous", max_file_mb=2, max_total_mb=3)
    assert RecordConfig(mode="ring", max_file_mb=2, max_total_mb=3).max_total_mb == 3  # unused
    assert RecordConfig(max_file_mb=2, max_total_mb=4).max_total_mb == 4
    assert RecordConfig(max_file_mb=2, max_total_mb=0).max_total_mb == 0
    path = tmp_path / "tempo.yaml"
    path.write_text("record:\n  mode: continuous\n  max_file_mb: 100\n  max_total_mb: 150\n")
    with pytest.raises(
        ConfigError, match=r"record: .*max_total_mb 150 is below twice record.max_file_mb \(100\)"
    ):
        load_config(path)


def test_a_file_that_cannot_be_deleted_is_said_and_recording_goes_on(
    tmp_path, monkeypatch, caplog
) -> None:
    """A deletion refused (permissions, I/O) is a warning naming the setting; the recorder
    keeps writing and counts nothing as deleted."""
    from pathlib import Path

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    config = RecordConfig(
        mode="continuous", dir=tmp_path, max_file_mb=1, max_total_mb=2, compression="none"
    )
    recorder = Recorder(config, JOINTS, 50.0)
    i = 0
    while len(recorder.files) < 4:
        recorder.write(framed(i * 1_000_000))
        i += 1
    recorder.close_file()
    recorder.stop()
    assert recorder.error is None and recorder.status()["files_deleted"] == 0
    assert all(os.path.exists(path) for path in recorder.files)
    refused = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert refused and "record.max_total_mb: could not delete" in refused[0]


@pytest.mark.parametrize("mode", ["continuous", "ring"])
def test_a_record_json_cannot_hold_is_left_out_and_recording_goes_on(tmp_path, mode) -> None:
    """A NaN in a record (a policy's memory, say) is refused as the record is packed: that
    record is left out and counted, the ones after it are recorded."""
    from controller.record.reading import read_recording

    recorder = Recorder(RecordConfig(mode=mode, dir=tmp_path), JOINTS, 50.0)
    bad = observation(2)
    bad.fields["state"] = np.array([np.nan, 1.0], np.float32)
    for record in (observation(1), bad, observation(3), Record("mark", "arm", 4, {"reason": "x"})):
        recorder.write(record)
    recorder.close_file()
    assert recorder.not_json == 1 and recorder.status()["not_json"] == 1
    (path,) = recorder.files
    kept = [m for m in read_recording(path).messages if m.name == "observation"]
    assert [m.publish_ns for m in kept] == [1, 3]
