"""A real daemon's recording (the tiny reach policy, in this process) exported as a
LeRobotDataset: one row per observation, its state and frame, and the actions the daemon sent."""

from __future__ import annotations

import json

import numpy as np
import pytest

from controller.cli import main
from controller.record.image_cdr import frame_of
from controller.record.reading import read_recording
from controller.wire.client import TempoClient
from tests.conftest import ipc_config, running_daemon, wait_for

pq = pytest.importorskip("pyarrow.parquet")
av = pytest.importorskip("av")

JOINTS = [f"joint_{i}" for i in range(6)]


def test_a_served_episode_exports_row_for_observation(tmp_path) -> None:
    rec = tmp_path / "rec"
    config = ipc_config(tmp_path, "control.rate_hz=100", "record.mode=continuous",
                        f"record.dir={rec}")  # fmt: skip
    with (
        running_daemon(config) as daemon,
        TempoClient(config.server.bind, "arm0", JOINTS, {"front": (96, 128)}, 6) as client,
    ):
        for i in range(40):
            state = np.full(6, i / 100, np.float32)
            frame = np.full((96, 128, 3), 5 * i, np.uint8)
            client.send_observation({"front": frame}, state, episode_start=i == 0)
            client.receive(timeout_s=0.02)
        wait_for(lambda: daemon.status()["recording"]["written"] > 120)
    (path,) = sorted(rec.glob("*.mcap"))
    out = tmp_path / "dataset"
    assert main(["export-lerobot", str(path), str(out), "--fps", "50"]) == 0

    recording = read_recording(path)
    observations = [m.data for m in recording.messages if m.name == "observation"]
    sent = {tuple(m.data["action"]) for m in recording.messages
            if m.name == "command" and m.data["kind"] == "action"}  # fmt: skip
    rows = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").to_pylist()
    assert len(rows) == len(observations) > 0
    assert {r["episode_index"] for r in rows} == {0}
    for row, observation in zip(rows, observations, strict=True):
        np.testing.assert_array_equal(
            np.float32(row["observation.state"]), np.float32(observation["state"])
        )
        if not row["action.held"]:
            assert tuple(np.asarray(row["action"], np.float32).tolist()) in sent
        assert row["teleop"] is False
    assert sent and not all(r["action.held"] for r in rows)  # the policy's actions are in it
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["action"]["names"] == JOINTS and info["total_frames"] == len(rows)
    video = out / "videos" / "observation.images.front" / "chunk-000" / "file-000.mp4"
    with av.open(str(video)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == len(rows) and frames[0].shape == (96, 128, 3)
    recorded = [frame_of(m.data) for m in recording.messages if m.name == "camera/front"]
    for decoded, frame in zip(frames, recorded, strict=True):  # flat frames: H.264 keeps them
        assert abs(float(decoded.mean()) - float(frame.mean())) < 3
