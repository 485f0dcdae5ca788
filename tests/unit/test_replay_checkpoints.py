"""A replay across a swap compares like with like: each chunk record names the checkpoint
that served it (the feed's, through the recorder), chunks of another checkpoint are counted
and not compared, each divergent line names its checkpoint, and a recording older than the
field (no checkpoint) is compared as before."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from controller.feed.inference_feed import Chunk
from controller.record.image_cdr import decode_image, encode_image
from controller.record.queue import PolicyRecording, RecordQueue
from controller.record.reading import RecordedMessage, Recording
from controller.record.schemas import context_json, record_json
from controller.tools.flight_replay import render, replay
from policies.base import CameraSpec, PolicySpec, Prediction, RobotContext

SPEC = PolicySpec(
    cameras=(CameraSpec(name="cam0", height=4, width=6),),
    state_size=2,
    joint_names=("a", "b"),
    chunk_size=3,
)


class StepPolicy:
    """Every row of its chunk is the observation's step (what checkpoint A served)."""

    spec = SPEC

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        return Prediction(np.full((3, 2), float(context.step), np.float32))


def _recording(checkpoints: list[str | None]) -> Recording:
    """One request per entry, its chunk served by that checkpoint: A's chunks are what
    StepPolicy gives, B's differ by 0.5; None: a record without the field (older files)."""
    messages = []
    for step, checkpoint in enumerate(checkpoints):
        received = 1000 + step
        frame = np.zeros((4, 6, 3), np.uint8)
        image = decode_image(encode_image(frame, "cam0", received))
        messages.append(RecordedMessage("/arm/camera/cam0", "x", 0, received, image))
        context = RobotContext(step=step, episode_start=step == 0,
                               state_history=np.zeros((1, 2), np.float32))  # fmt: skip
        request = {"obs_seq": step, "received_ns": received, "episode": 0,
                   **context_json(context)}  # fmt: skip
        messages.append(RecordedMessage("/arm/inference_request", "x", 0, received, request))
        offset = 0.5 if checkpoint == "/ck/b" else 0.0
        chunk = {"obs_received_ns": received, "tier": "eager_fp32",
                 "actions": np.full((3, 2), step + offset).tolist()}  # fmt: skip
        if checkpoint is not None:
            chunk["checkpoint"] = checkpoint
        messages.append(RecordedMessage("/arm/chunk", "x", 0, received + 1, chunk))
    return Recording(Path("rec.mcap"), messages, {"frames": "raw"})


def test_chunks_of_another_checkpoint_are_counted_not_compared() -> None:
    recording = _recording(["/ck/a", "/ck/a", "/ck/b", "/ck/b", "/ck/b"])
    result = replay(recording, StepPolicy(), checkpoint="/ck/a")
    assert len(result.steps) == 2 and result.largest == 0.0
    assert result.other_checkpoints == {"/ck/b": 3}
    assert "3 chunks served by another checkpoint (/ck/b) were not compared" in render(result)
    # Replaying B: its chunks compared (and diverging, named by checkpoint), A's counted.
    other = replay(recording, StepPolicy(), checkpoint="/ck/b")
    assert len(other.steps) == 3 and other.largest == 0.5
    text = render(other)
    assert "2 chunks served by another checkpoint (/ck/a) were not compared" in text
    assert "served by eager_fp32 of checkpoint /ck/b" in text


def test_a_recording_without_checkpoints_compares_every_chunk() -> None:
    result = replay(_recording([None, "/ck/b"]), StepPolicy(), checkpoint="/ck/a")
    assert len(result.steps) == 1 and result.other_checkpoints == {"/ck/b": 1}
    old = replay(_recording([None, None]), StepPolicy(), checkpoint="/ck/a")
    assert len(old.steps) == 2 and not old.other_checkpoints
    assert "of checkpoint unknown" not in render(old)  # nothing diverged: no lines
    assert render(replay(_recording([None]), StepPolicy())).count("chunks compared") == 1


def test_the_chunk_record_names_the_checkpoint_the_feed_said() -> None:
    queue = RecordQueue(8)
    robot = PolicyRecording(queue, None, ["a", "b"], lambda: "eager_fp32").robot("arm", "s")
    actions = np.zeros((3, 2), np.float32)
    robot.chunk(Chunk(0, actions, 1, 10, 5, 0, checkpoint="/ck/b"), 1, 0)
    robot.chunk(Chunk(0, actions, 2, 11, 5, 0), 2, 0)
    first, second = queue.take_all()
    assert record_json(first, ["a", "b"], "eager_fp32")["checkpoint"] == "/ck/b"
    assert record_json(second, ["a", "b"], "eager_fp32")["checkpoint"] is None
