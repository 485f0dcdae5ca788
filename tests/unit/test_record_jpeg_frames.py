"""Camera frames recorded as JPEG (record.frames: jpeg, controller.record.jpeg_frames): the
file process turns the daemon's raw frame messages into sensor_msgs/msg/CompressedImage, which
read back as pixels close to those sent (JPEG is lossy), with the frame's stamp and camera; a
damaged message or JPEG is refused in one sentence; without PyAV the config is refused at start."""

from __future__ import annotations

import importlib.util
import struct

import numpy as np
import pytest

from controller.errors import ConfigError
from controller.record import image_cdr, jpeg_frames
from controller.record.file_client import JPEG_SHARE, RecordingFiles
from controller.record.reading import read_recording
from controller.record_config import RecordConfig

pytest.importorskip("av")

WALL_NS = 1_764_264_000_123_456_789


def camera_like(height: int, width: int) -> np.ndarray:
    """Smooth gradients with some texture: what cameras see, and what JPEG keeps well."""
    y, x = np.mgrid[0:height, 0:width]
    frame = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1),
                      (x + y) % 64 * 4], axis=-1)  # fmt: skip
    return frame.astype(np.uint8)


def test_a_frame_becomes_a_compressed_image_with_its_stamp_and_camera() -> None:
    frame = camera_like(48, 64)
    raw = image_cdr.encode_image(frame, "wrist", WALL_NS)
    message = jpeg_frames.compressed_from_image(raw, jpeg_frames.JpegEncoder(2))
    b = 4  # offsets after the encapsulation header, worked out from the module doc's layout
    assert message[:4] == b"\x00\x01\x00\x00"
    assert struct.unpack_from("<iII", message, b) == (1_764_264_000, 123_456_789, 6)
    assert message[b + 12 : b + 20] == b"wrist\x00\x00\x00"  # "wrist\0" then padding to 20
    assert struct.unpack_from("<I", message, b + 20) == (5,)
    assert message[b + 24 : b + 32] == b"jpeg\x00\x00\x00\x00"  # "jpeg\0", padding to 32
    (length,) = struct.unpack_from("<I", message, b + 32)
    assert message[b + 36 : b + 38] == b"\xff\xd8" and len(message) == b + 36 + length  # SOI

    decoded = jpeg_frames.decode_compressed(message)
    assert decoded["frame_id"] == "wrist" and decoded["format"] == "jpeg"
    assert decoded["timestamp"] == {"sec": 1_764_264_000, "nsec": 123_456_789}
    pixels = jpeg_frames.pixels_of(decoded)
    assert pixels.shape == frame.shape and pixels.dtype == np.uint8
    assert np.abs(pixels.astype(int) - frame).mean() < 4  # lossy, and close
    # A raw frame's dict goes through pixels_of as it is.
    np.testing.assert_array_equal(jpeg_frames.pixels_of(image_cdr.decode_image(raw)), frame)


def test_a_larger_qscale_makes_a_smaller_jpeg() -> None:
    raw = image_cdr.encode_image(camera_like(240, 320), "front", WALL_NS)
    sizes = [len(jpeg_frames.compressed_from_image(raw, jpeg_frames.JpegEncoder(q)))
             for q in (2, 10, 31)]  # fmt: skip
    assert sizes[0] > sizes[1] > sizes[2]


def test_a_damaged_message_or_jpeg_is_refused_in_one_sentence() -> None:
    raw = image_cdr.encode_image(camera_like(8, 8), "front", WALL_NS)
    whole = jpeg_frames.compressed_from_image(raw, jpeg_frames.JpegEncoder(3))
    for end in (0, 3, 10, 30, len(whole) - 1):
        with pytest.raises(image_cdr.ImageMessageError, match="^a camera frame message"):
            jpeg_frames.decode_compressed(whole[:end])
    with pytest.raises(ValueError, match="^a camera frame's JPEG"):
        jpeg_frames.frame_of_jpeg(b"\xff\xd8 not a jpeg")


def test_the_file_process_writes_frames_as_jpeg_that_read_back(tmp_path) -> None:
    files = RecordingFiles(jpeg_qscale=3)
    frames = [camera_like(48, 64) // (i + 1) for i in range(3)]
    try:
        file = files.open(tmp_path / "a.mcap", {}, "lz4")
        for i, frame in enumerate(frames):
            file.write_frame("/arm/camera/front", WALL_NS + i, i, image_cdr.image_parts(
                frame, "front", WALL_NS + i))  # fmt: skip
        file.close()
    finally:
        files.stop()
    recording = read_recording(tmp_path / "a.mcap")
    assert recording.problem is None
    cameras = [m for m in recording.messages if m.name == "camera/front"]
    assert [m.publish_ns for m in cameras] == [0, 1, 2]
    for message, frame in zip(cameras, frames, strict=True):
        assert message.data["format"] == "jpeg"
        assert np.abs(jpeg_frames.pixels_of(message.data).astype(int) - frame).mean() < 4
    assert (tmp_path / "a.mcap").stat().st_size <= file.size + 64 * 1024


def test_a_noise_frame_at_the_best_qscale_fits_the_share_rotation_counts() -> None:
    """Rotation counts a JPEG frame as JPEG_SHARE of its raw message (its real size is known
    only in the file process): even noise, JPEG's worst case, at qscale 2 stays under it."""
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    raw = image_cdr.encode_image(noise, "front", WALL_NS)
    jpeg = jpeg_frames.compressed_from_image(raw, jpeg_frames.JpegEncoder(2))
    assert len(jpeg) <= JPEG_SHARE * len(raw)


def test_a_frame_that_does_not_encode_is_left_out_and_recording_goes_on(tmp_path) -> None:
    files = RecordingFiles(jpeg_qscale=3)
    good = image_cdr.image_parts(camera_like(8, 8), "front", WALL_NS)
    try:
        file = files.open(tmp_path / "a.mcap", {}, "lz4")
        file.write_frame("/arm/camera/front", WALL_NS, 0, (b"\x00\x01\x00\x00 not a frame",))
        file.write_frame("/arm/camera/front", WALL_NS, 1, good)
        file.close()
    finally:
        files.stop()
    cameras = [m for m in read_recording(tmp_path / "a.mcap").messages]
    assert [m.publish_ns for m in cameras] == [1]


def test_jpeg_frames_without_pyav_are_refused_at_start(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "av" else real(name, *a))  # fmt: skip
    with pytest.raises(ConfigError, match=r"record.frames: jpeg needs PyAV.*\[export\]"):
        jpeg_frames.check_available(RecordConfig(mode="ring", frames="jpeg"))
    jpeg_frames.check_available(RecordConfig(mode="ring", frames="raw"))  # nothing to say
