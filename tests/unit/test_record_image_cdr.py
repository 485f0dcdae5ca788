"""Camera frames as ROS 2 sensor_msgs/msg/Image in CDR (controller.record.image_cdr): they come
back as they went in, their bytes sit where a CDR reader looks for them, and a damaged message is
refused in one sentence."""

from __future__ import annotations

import base64
import struct

import numpy as np
import pytest

from controller.record.image_cdr import (
    DEFINITION,
    ImageMessageError,
    decode_image,
    encode_image,
    frame_of,
)
from controller.record.mcap_file import McapFile
from controller.record.reading import RecordingError, read_recording

WALL_NS = 1_764_264_000_123_456_789  # 2025-11-27 17:20:00.123456789 UTC


def frame(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("shape", "camera", "scale"),
    [
        ((1, 1), "f", 1),  # 1x1: 3 bytes of pixels
        ((3, 5), "front", 1),  # width * 3 = 15, not a multiple of 4
        ((7, 13), "", 1),  # an empty name: the header's string is its NUL alone
        ((480, 640), "wrist_left", 1),
        ((5, 7), "ab", 2),  # downscaled to 3x4: from a strided view
        ((480, 640), "top", 3),  # downscaled to 160x214 (width * 3 = 642)
    ],
)
def test_frames_of_any_size_come_back_exactly(shape, camera, scale) -> None:
    original = frame(*shape)
    message = decode_image(encode_image(original, camera, WALL_NS, scale))
    expected = original[::scale, ::scale]
    height, width = expected.shape[:2]
    assert message["timestamp"] == {"sec": 1_764_264_000, "nsec": 123_456_789}
    assert message["frame_id"] == camera
    assert (message["height"], message["width"], message["step"]) == (height, width, width * 3)
    assert message["encoding"] == "rgb8" and message["is_bigendian"] == 0
    assert np.array_equal(frame_of(message), expected)


def test_a_non_contiguous_frame_is_written_as_its_pixels() -> None:
    original = frame(6, 8)
    view = original[:, ::-1]  # a view that is not C-contiguous
    assert np.array_equal(frame_of(decode_image(encode_image(view, "c", WALL_NS))), view)


@pytest.mark.parametrize("bad", [np.zeros((2, 3, 3), np.float32), np.zeros((2, 3), np.uint8)])
def test_only_uint8_rgb_frames_are_encoded(bad) -> None:
    with pytest.raises(ValueError, match=r"^a camera frame of .*, not uint8 \(h, w, 3\)$"):
        encode_image(bad, "front", WALL_NS)


def test_the_bytes_sit_where_a_cdr_reader_looks_for_them() -> None:
    """An independent reading at offsets worked out by hand from the XCDR1 rules: little-endian,
    each primitive at a multiple of its size from the end of the 4-byte encapsulation header."""
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    m = encode_image(pixels, "cam", WALL_NS)
    assert m[:4] == b"\x00\x01\x00\x00"  # CDR_LE
    b = 4  # offsets below are counted from here
    assert struct.unpack_from("<iI", m, b + 0) == (1_764_264_000, 123_456_789)
    assert struct.unpack_from("<I", m, b + 8) == (4,) and m[b + 12 : b + 16] == b"cam\x00"
    # "cam\0" ends at 16, already a multiple of 4: height, width follow with no padding.
    assert struct.unpack_from("<II", m, b + 16) == (2, 3)
    assert struct.unpack_from("<I", m, b + 24) == (5,) and m[b + 28 : b + 33] == b"rgb8\x00"
    assert m[b + 33] == 0  # is_bigendian, a uint8: no alignment
    assert m[b + 34 : b + 36] == b"\x00\x00"  # padding to step's 4-byte boundary at 36
    assert struct.unpack_from("<II", m, b + 36) == (9, 18)  # step, the pixels' count
    assert m[b + 44 :] == pixels.tobytes()
    assert len(m) == b + 44 + 18

    # A 1-byte name ("a\0" ends at 14): 2 bytes of padding before height at 16.
    m = encode_image(pixels, "a", WALL_NS)
    assert m[b + 12 : b + 16] == b"a\x00\x00\x00"
    assert struct.unpack_from("<II", m, b + 16) == (2, 3)
    # A 4-byte name ("arm0\0" ends at 17): 3 bytes of padding, height at 20.
    m = encode_image(pixels, "arm0", WALL_NS)
    assert m[b + 12 : b + 20] == b"arm0\x00\x00\x00\x00"
    assert struct.unpack_from("<II", m, b + 20) == (2, 3)


def test_the_definition_names_every_type_it_uses_in_ros2msg_form() -> None:
    blocks = DEFINITION.split("\n" + "=" * 80 + "\n")
    assert "std_msgs/Header header" in blocks[0].splitlines()
    assert "uint8[] data" in blocks[0].splitlines()
    assert [block.splitlines()[0] for block in blocks[1:]] == [
        "MSG: std_msgs/Header",
        "MSG: builtin_interfaces/Time",
    ]
    assert "builtin_interfaces/Time stamp" in blocks[1].splitlines()
    assert {"int32 sec", "uint32 nanosec"} <= set(blocks[2].splitlines())


def test_a_message_cut_anywhere_is_refused_in_one_sentence() -> None:
    whole = encode_image(frame(2, 3), "front", WALL_NS)
    for end in range(len(whole)):
        with pytest.raises(ImageMessageError) as refused:
            decode_image(whole[:end])
        text = str(refused.value)
        assert text.startswith("a camera frame message") and "\n" not in text


def test_a_message_that_is_not_little_endian_cdr_is_refused() -> None:
    whole = encode_image(frame(2, 3), "front", WALL_NS)
    with pytest.raises(ImageMessageError, match="little-endian CDR header"):
        decode_image(b"\x00\x00\x00\x00" + whole[4:])  # big-endian CDR
    taller = bytearray(whole)
    struct.pack_into("<I", taller, 4 + 20, 3)  # height 3 (at 20, after "front\0" and padding)
    with pytest.raises(ImageMessageError, match="18 bytes of pixels, not height x step = 3 x 9"):
        decode_image(bytes(taller))


def test_a_frame_recorded_as_json_base64_still_reads() -> None:
    """Recordings made before frames were CDR held foxglove.RawImage JSON: base64 pixels."""
    original = frame(3, 5)
    old = {"encoding": "rgb8", "width": 5, "height": 3, "step": 15,
           "data": base64.b64encode(original.tobytes()).decode()}  # fmt: skip
    assert np.array_equal(frame_of(old), original)


def write_file(path, frames: list[bytes]) -> None:
    file = McapFile(path, {})
    file.write("/arm/observation", "tempo.Observation", 1, 1, b'{"obs_seq":1}')
    for i, data in enumerate(frames):
        file.write("/arm/camera/front", "sensor_msgs/msg/Image", 2 + i, 2 + i, data)
    file.close()


def test_a_recording_with_a_damaged_frame_reads_up_to_it(tmp_path) -> None:
    whole = encode_image(frame(4, 5), "front", WALL_NS)
    path = tmp_path / "cut.mcap"
    write_file(path, [whole, whole[:-7]])
    recording = read_recording(path)
    assert [m.name for m in recording.messages] == ["observation", "camera/front"]
    assert recording.problem == (
        f"{path} is cut short or damaged after 2 readable messages (ImageMessageError); "
        "what could be read is used"
    )


def test_a_recording_whose_first_frame_is_damaged_is_one_sentence(tmp_path) -> None:
    path = tmp_path / "bad.mcap"
    file = McapFile(path, {})
    file.write("/arm/camera/front", "sensor_msgs/msg/Image", 1, 1, b"\x00\x01\x00\x00\x01")
    file.close()
    with pytest.raises(RecordingError, match=r"is not a readable MCAP recording \(ImageMessage"):
        read_recording(path)


def test_the_ros2_decoder_reads_the_frames_as_written(tmp_path) -> None:
    """mcap-ros2-support decodes CDR from the file's own ros2msg schema, as Foxglove does: the
    encoding is the standard one, not merely one this module reads back."""
    ros2 = pytest.importorskip("mcap_ros2.decoder")
    from mcap.reader import make_reader

    originals = [frame(3, 5, seed=1), frame(1, 1, seed=2)]
    path = tmp_path / "ros2.mcap"
    write_file(path, [encode_image(f, "front", WALL_NS + i) for i, f in enumerate(originals)])
    with open(path, "rb") as stream:
        reader = make_reader(stream, decoder_factories=[ros2.DecoderFactory()])
        decoded = [m for *_, m in reader.iter_decoded_messages(topics=["/arm/camera/front"])]
    assert len(decoded) == 2
    for i, (image, original) in enumerate(zip(decoded, originals, strict=True)):
        assert (image.header.stamp.sec, image.header.stamp.nanosec) == (
            1_764_264_000,
            123_456_789 + i,
        )
        assert image.header.frame_id == "front" and image.encoding == "rgb8"
        assert (image.height, image.width, image.step) == (
            *original.shape[:2],
            original.shape[1] * 3,
        )
        assert image.is_bigendian == 0
        assert bytes(image.data) == original.tobytes()
