"""Camera frames as JPEG (`record.frames: jpeg`): ROS 2 `sensor_msgs/msg/CompressedImage`
messages in CDR, format "jpeg", which Foxglove shows as it shows raw ones. FFmpeg's MJPEG codec
through PyAV (the `export` extra, which `tempo export-lerobot` needs anyway) encodes them in the
recorder's file process, from the raw frame message the daemon sends it (image_cdr), so the
daemon's own threads never spend the encoding's CPU; it decodes them for replay and export.
A 480x640 frame took 6-8 ms to encode on this project's 2-core machine.

The layout (XCDR1, little-endian; see image_cdr for the rules). For a camera named by n UTF-8
bytes, offsets after the encapsulation header 00 01 00 00:

     0  int32   header.stamp.sec
     4  uint32  header.stamp.nanosec
     8  uint32  n + 1, then the name and a NUL at 12 .. 12 + n
     a  uint32  5, then "jpeg" and a NUL at a+4 .. a+8  (a = 12 + n + 1 rounded up to 4)
  a+12  uint32  the JPEG's length, then its bytes from a+16 (a+9 .. a+11 are padding)
"""

from __future__ import annotations

import importlib.util
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from controller.errors import ConfigError
from controller.record import image_cdr

if TYPE_CHECKING:  # not at run time: the file process imports this module, and needs no pydantic
    from controller.record_config import RecordConfig

SCHEMA = "sensor_msgs/msg/CompressedImage"
FORMAT = "jpeg"
INSTALL_HINT = "pip install 'tempo-controller[export]'"
_JPEG = b"jpeg\x00"

DEFINITION = f"""\
# A compressed image: `format` names the codec (here jpeg), `data` the whole encoded image.
std_msgs/Header header
string format
uint8[] data
{image_cdr.HEADER_DEFINITIONS}"""


def check_available(config: RecordConfig) -> None:
    """ConfigError when the config records JPEG frames and PyAV is not installed."""
    if config.mode != "off" and config.frames == "jpeg" and importlib.util.find_spec("av") is None:
        raise ConfigError(f"record.frames: jpeg needs PyAV, which is not installed: {INSTALL_HINT}")


class JpegEncoder:
    """Encodes uint8 (height, width, 3) RGB frames as JPEG at FFmpeg's quantiser scale `qscale`
    (2: best and largest, 31: smallest); one codec context per frame size, used again."""

    def __init__(self, qscale: int) -> None:
        self.qscale = qscale
        self._contexts: dict[tuple[int, int], Any] = {}

    def encode(self, frame: np.ndarray) -> bytes:
        import av

        height, width = frame.shape[:2]
        context = self._contexts.get((height, width))
        if context is None:
            context = av.CodecContext.create("mjpeg", "w")
            context.width, context.height = width, height
            context.pix_fmt = "yuvj420p"  # full-range 4:2:0, JPEG's usual
            context.qmin = context.qmax = self.qscale
            context.thread_count = 1  # FFmpeg's slice threads would take every core from the loop
            context.open()
            self._contexts[(height, width)] = context
        picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        packets = context.encode(picture.reformat(format="yuvj420p"))
        return b"".join(bytes(packet) for packet in packets)


def compressed_from_image(message: bytes | memoryview, encoder: JpegEncoder) -> bytes:
    """A raw frame's sensor_msgs/msg/Image message (image_cdr) as a CompressedImage message:
    the same stamp and camera, the pixels as JPEG."""
    image = image_cdr.decode_image(message)
    jpeg = encoder.encode(image_cdr.frame_of(image))
    name = image["frame_id"].encode() + b"\x00"
    stamp = struct.pack("<iII", image["timestamp"]["sec"], image["timestamp"]["nsec"], len(name))
    pad = b"\x00" * (-(12 + len(name)) % 4)
    tail = struct.pack("<I5s3xI", len(_JPEG), _JPEG, len(jpeg))
    return b"".join((image_cdr.ENCAPSULATION, stamp, name, pad, tail, jpeg))


def decode_compressed(message: bytes | memoryview) -> dict[str, Any]:
    """A CompressedImage message back to a dict (its `data`: the JPEG's bytes, a view into
    `message`); pixels_of turns it into pixels. ImageMessageError: not one."""
    view = memoryview(message).cast("B")
    if bytes(view[: len(image_cdr.ENCAPSULATION)]) != image_cdr.ENCAPSULATION:
        raise image_cdr.ImageMessageError(
            "a camera frame message does not begin with the little-endian CDR header 00 01 00 00"
        )
    cursor = image_cdr.CdrCursor(view)
    sec, nsec = cursor.number("i"), cursor.number("I")
    frame_id, format_ = cursor.text(), cursor.text()
    data = cursor.take(cursor.number("I"))
    return {"timestamp": {"sec": sec, "nsec": nsec}, "frame_id": frame_id, "format": format_,
            "data": data}  # fmt: skip


def pixels_of(message: Mapping[str, Any]) -> np.ndarray:
    """Any recorded camera frame's pixels, uint8 (height, width, 3): a JPEG one's
    (decode_compressed's dict) decoded, a raw one's (image_cdr.decode_image's) as they are."""
    if message.get("format") == FORMAT:
        return frame_of_jpeg(message["data"])
    return image_cdr.frame_of(message)


def frame_of_jpeg(data: bytes | memoryview) -> np.ndarray:
    """A JPEG's pixels as a uint8 (height, width, 3) RGB array. ValueError: not a JPEG."""
    import av

    decoder = av.CodecContext.create("mjpeg", "r")
    try:
        frames = decoder.decode(av.Packet(bytes(data)))
    except av.error.FFmpegError as exc:
        raise ValueError(f"a camera frame's JPEG does not decode: {exc}") from None
    if not frames:
        raise ValueError("a camera frame's JPEG holds no picture")
    return np.asarray(frames[0].to_ndarray(format="rgb24"))
