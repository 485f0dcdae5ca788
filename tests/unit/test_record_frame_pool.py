"""Frames written in place are copied on the tick path into buffers used again once written
(controller.record.frame_pool): a fresh array per copy cost its pages' first touch on the loop
thread. A buffer goes back only when nothing reads it any more: what is written is always the
frame as it was when the observation came."""

from __future__ import annotations

import types

import numpy as np

from controller.record.frame_pool import MAX_FREE_PER_SHAPE, FramePool
from controller.record.queue import RecordQueue, RobotRecording
from controller.record.reading import read_recording
from controller.record.schemas import frame_of
from controller.record.writer import Recorder
from controller.record_config import RecordConfig

SHAPE = (4, 5, 3)


def in_place(value: int) -> types.MappingProxyType[str, np.ndarray]:
    """Frames as a driver's slot gives them (not a dict: the recorder must copy them)."""
    return types.MappingProxyType({"front": np.full(SHAPE, value, np.uint8)})


def observe(recording: RobotRecording, seq: int, frames: object) -> None:
    recording.observation(seq, seq, seq * 100_000_000, seq, frames, np.zeros(2, np.float32),
                          None, 0)  # type: ignore[arg-type]  # fmt: skip


def written_frames(path) -> list[int]:
    recording = read_recording(path)
    return [int(frame_of(m.data)[0, 0, 0]) for m in recording.messages if m.name == "camera/front"]


def test_a_given_back_buffer_is_used_again_and_the_pool_is_bounded() -> None:
    pool = FramePool()
    source = np.arange(60, dtype=np.uint8).reshape(SHAPE)
    first = pool.copy(source)
    assert np.array_equal(first, source) and first is not source
    pool.give_back([first])
    assert pool.copy(source * 2) is first and np.array_equal(first, source * 2)
    pool.give_back(np.zeros(SHAPE, np.uint8) for _ in range(MAX_FREE_PER_SHAPE + 10))
    assert pool.free_count() == MAX_FREE_PER_SHAPE


def test_continuous_gives_each_buffer_back_after_writing_it(tmp_path) -> None:
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    recording = recorder.robot("arm", "s1")
    for seq in range(5):
        observe(recording, seq, in_place(seq))
        record = recorder.queue.take()
        assert record is not None
        recorder._take(record)
        assert recorder.queue.frames.free_count() == 1  # back, and taken again by the next
    recorder._close_file()
    assert written_frames(recorder.files[0]) == [0, 1, 2, 3, 4]


def test_frames_on_the_socket_are_never_pooled(tmp_path) -> None:
    recorder = Recorder(RecordConfig(mode="continuous", dir=tmp_path), ["a", "b"], 50.0)
    own = {"front": np.full(SHAPE, 7, np.uint8)}  # the message's own frames: kept, not copied
    observe(recorder.robot("arm", "s1"), 1, own)
    record = recorder.queue.take()
    assert record is not None and record.fields["images"]["front"] is own["front"]
    recorder._take(record)
    assert recorder.queue.frames.free_count() == 0


def test_the_ring_gives_back_only_what_left_it(tmp_path) -> None:
    config = RecordConfig(mode="ring", dir=tmp_path, ring_seconds=0.25)
    recorder = Recorder(config, ["a", "b"], 50.0)
    recording = recorder.robot("arm", "s1")
    for seq in range(12):  # every 0.1 s: the ring keeps the last 3
        observe(recording, seq, in_place(seq))
        record = recorder.queue.take()
        assert record is not None
        recorder._take(record)
    recording.mark("look", 1_100_000_000)
    mark = recorder.queue.take()
    assert mark is not None
    recorder._take(mark)
    (incident,) = recorder.files
    assert written_frames(incident) == [9, 10, 11]  # the buffers reused by 3..11 left it first


def test_a_dropped_observation_gives_its_buffers_back() -> None:
    queue = RecordQueue(1)
    recording = RobotRecording(queue, "arm", "s1")
    observe(recording, 1, in_place(1))
    observe(recording, 2, in_place(2))  # the queue is full: dropped
    assert queue.dropped["observation"] == 1 and queue.frames.free_count() == 1
