"""The recorder's queue and ring on their own (no daemon): bounded by count, by seconds and by
memory; an unusable directory is one sentence."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

from controller.errors import ConfigError
from controller.record.queue import Record, RecordQueue
from controller.record.writer import Recorder
from controller.record_config import RecordConfig

JOINTS = ["a", "b"]


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
        recorder._take(observation(i * 100_000_000))  # every 0.1 s for 5 s
    kept = [entry[0] for entry in recorder._ring]
    assert kept[0] == 3_900_000_000 and kept[-1] == 4_900_000_000
    assert list(tmp_path.iterdir()) == []  # nothing written without an incident


def test_the_ring_holds_nothing_the_garbage_collector_scans(tmp_path) -> None:
    """Seconds of records kept as objects the collector tracks made its pauses (in every
    thread, the loop's too) the largest part of the tick lateness with ring recording on."""
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=10.0)
    recorder = Recorder(config, JOINTS, 50.0)
    for i in range(20):
        recorder._take(observation(i * 100_000_000))
    gc.collect()  # a tuple is untracked once a collection finds only untracked items in it
    assert len(recorder._ring) == 20
    assert not any(gc.is_tracked(item) for item in recorder._ring)


def test_the_ring_keeps_at_most_its_memory(tmp_path) -> None:
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=60.0, ring_max_mb=1)
    recorder = Recorder(config, JOINTS, 50.0)
    for i in range(20):
        recorder._take(observation(i, frame_bytes=300_000))
    assert len(recorder._ring) == 3  # 3 x 300 KB fit in 1 MiB, 4 do not
    assert recorder._ring_bytes <= 1024 * 1024


def test_a_directory_that_cannot_be_made_is_one_sentence(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    recorder = Recorder(RecordConfig(mode="continuous", dir=blocker / "rec"), JOINTS, 50.0)
    with pytest.raises(ConfigError, match=r"^record.dir .* cannot be created \(.*\); set"):
        recorder.start()


def test_jpeg_frames_are_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="frames"):
        RecordConfig.model_validate({"frames": "jpeg"})


@pytest.mark.parametrize(("setting", "chunks"), [("lz4", "lz4"), ("zstd", "zstd"), ("none", "")])
def test_the_files_chunks_are_compressed_as_configured(tmp_path, setting, chunks) -> None:
    """zstd took 0.67 s of a core per second of three 30 Hz cameras, lz4 0.15 s: users choose."""
    from mcap.reader import make_reader

    from controller.record.reading import read_recording

    config = RecordConfig(mode="continuous", dir=tmp_path, compression=setting)
    recorder = Recorder(config, JOINTS, 50.0)
    recorder._take(observation(1))
    recorder._close_file()
    (path,) = recorder.files
    with open(path, "rb") as stream:
        summary = make_reader(stream).get_summary()
    assert summary is not None
    assert {index.compression for index in summary.chunk_indexes} == {chunks}
    assert [m.name for m in read_recording(path).messages] == ["observation"]


@pytest.mark.parametrize("mode", ["continuous", "ring"])
def test_a_failed_file_process_is_one_error_and_stop_is_quiet(tmp_path, mode, monkeypatch) -> None:
    """A file the process cannot make: the recorder says why once (in status), drops what comes
    after, and stops without a second error (a traceback from its thread)."""
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
    while recorder.error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    recorder.queue.put(observation(3))
    recorder.stop()
    assert (
        recorder.error is not None and "FileExistsError" in recorder.error
    )  # the reason, not "it ended"
    assert crashes == []
    assert recorder.queue.dropped["observation"] >= 1
