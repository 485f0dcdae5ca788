"""Hostile recordings given to `tempo export-lerobot` and `tempo replay`: a name from the file
that would leave the output folder, a FIFO, a chunk that lies about its size. Each is one
sentence on stderr and nothing written outside the output folder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mcap.data_stream import RecordBuilder
from mcap.records import Chunk, Header

from controller.cli import main
from controller.record.reading import RecordingError, read_recording
from controller.record.writer import Recorder
from controller.record_config import RecordConfig

JOINTS = ["a", "b"]
MAGIC = b"\x89MCAP0\r\n"


def _recording_with_camera(directory: Path, camera: str) -> Path:
    """A recording the recorder's own writer made, of a robot whose camera is named `camera`."""
    recorder = Recorder(RecordConfig(mode="continuous", dir=directory), JOINTS, 100.0)
    recorder.start()
    arm = recorder.robot("arm0", "s1")
    arm.hello(None)
    t = 10_000_000_000
    for i in range(4):
        images = {camera: np.full((8, 8, 3), 10 * i, np.uint8)}
        arm.observation(i, i, t, t, images, np.zeros(2, np.float32), None, 0)
        arm.command(i, t + 1, None, np.ones(2, np.float32), np.ones(2, np.float32), ())
        t += 20_000_000
    recorder.stop()
    (path,) = sorted(directory.glob("*.mcap"))
    return path


PROGRESS_LINE = re.compile(r"tempo [a-z-]+: ")


def _one_sentence(capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    # A long command's progress lines ("tempo export-lerobot: reading ...") come before it.
    lines = [line for line in capsys.readouterr().err.strip().splitlines()
             if not PROGRESS_LINE.match(line)]  # fmt: skip
    assert len(lines) == 1 and lines[0].startswith("tempo: "), lines[:5]
    assert "Traceback" not in lines[0] and "internal error" not in lines[0], lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_a_camera_name_that_climbs_out_is_refused_and_nothing_escapes(tmp_path, capsys) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    escaped = tmp_path / "x" / "ESCAPED"
    out = tmp_path / "deep" / "er" / "dataset"
    climb = "../../../../" + str(escaped.relative_to(tmp_path))
    path = _recording_with_camera(tmp_path / "rec", climb)
    assert main(["export-lerobot", str(path), str(out)]) == 2
    _one_sentence(capsys, "not a name Tempo records")
    assert not (tmp_path / "x").exists()
    assert not list(tmp_path.rglob("*.mp4"))
    assert not (out / "meta" / "info.json").exists()


def test_replay_refuses_the_same_file_in_one_sentence(tmp_path, capsys) -> None:
    path = _recording_with_camera(tmp_path / "rec", "../../etc/x")
    assert main(["replay", str(path)]) == 2
    _one_sentence(capsys, str(path), "camera", "not a name Tempo records")


def test_a_camera_named_dot_dot_is_refused_by_the_reader(tmp_path) -> None:
    path = _recording_with_camera(tmp_path / "rec", "..")
    with pytest.raises(RecordingError, match="not a name Tempo records"):
        read_recording(path)


def test_a_plain_camera_name_exports_and_info_json_carries_only_it(tmp_path, capsys) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("av")
    out = tmp_path / "dataset"
    path = _recording_with_camera(tmp_path / "rec", "wrist_cam.left-1")
    assert main(["export-lerobot", str(path), str(out)]) == 0
    info = json.loads((out / "meta" / "info.json").read_text())
    assert "observation.images.wrist_cam.left-1" in info["features"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,  # blocking on the FIFO never ends; the refusal takes the import's time
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("command", ["replay", "export-lerobot"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, command) -> None:
    fifo = tmp_path / "rec.mcap"
    os.mkfifo(fifo)
    args = [command, str(fifo)] + ([str(tmp_path / "out")] if command == "export-lerobot" else [])
    result = _cli(*args)
    if command == "export-lerobot" and "needs pyarrow" in result.stderr + result.stdout:
        pytest.skip("the export extra is not installed")
    assert "Traceback" not in result.stderr
    assert "a pipe, not a regular file" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _lying_chunk_file(path: Path, claimed: int) -> Path:
    """A valid start (magic, header) then a chunk declared zstd claiming `claimed` bytes that
    holds 64 random bytes."""
    builder = RecordBuilder()
    Header(profile="tempo", library="hostile").write(builder)
    Chunk(
        compression="zstd",
        data=np.random.default_rng(0).bytes(64),
        message_start_time=0,
        message_end_time=0,
        uncompressed_crc=0,
        uncompressed_size=claimed,
    ).write(builder)
    path.write_bytes(MAGIC + builder.end())
    return path


@pytest.mark.parametrize("claimed", [900 * 1024 * 1024, 4096])
def test_a_zstd_chunk_that_lies_is_one_sentence(tmp_path, capsys, claimed) -> None:
    pytest.importorskip("zstandard")
    path = _lying_chunk_file(tmp_path / "lie.mcap", claimed)
    assert main(["replay", str(path)]) == 2
    _one_sentence(capsys, str(path), "not a readable MCAP recording")
