"""Camera frames as ROS 2 `sensor_msgs/msg/Image` messages in CDR, which Foxglove and the
`mcap-ros2-support` package read as they are (schema encoding `ros2msg`, message encoding `cdr`).

A frame's pixels go into the file as raw bytes: JSON with base64 pixels cost the writer thread
3 to 7 times the CPU (docs/recording.md), which on a 2-core machine the control loop competes for.

The layout (XCDR1, little-endian). After the 4-byte encapsulation header 00 01 00 00, every
primitive sits at a multiple of its own size counted from the end of that header; a string is a
uint32 length (its bytes and a closing NUL) then those bytes; a uint8[] is a uint32 count then
the bytes. For a camera named by n UTF-8 bytes, offsets after the encapsulation header:

     0  int32   header.stamp.sec
     4  uint32  header.stamp.nanosec
     8  uint32  n + 1, then the name and a NUL at 12 .. 12 + n
     a  uint32  height              (a = 12 + n + 1 rounded up to a multiple of 4)
   a+4  uint32  width
   a+8  uint32  5, then "rgb8" and a NUL at a+12 .. a+16
  a+17  uint8   is_bigendian (0)
  a+20  uint32  step (width * 3; bytes a+18, a+19 are padding)
  a+24  uint32  the pixels' count, then the pixels from a+28: rows top to bottom, r g b
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

SCHEMA = "sensor_msgs/msg/Image"
SCHEMA_ENCODING = "ros2msg"
MESSAGE_ENCODING = "cdr"

_SEPARATOR = "=" * 80
# The types a frame's header uses, as they follow a message's own fields (jpeg_frames too).
HEADER_DEFINITIONS = f"""\
{_SEPARATOR}
MSG: std_msgs/Header
# When the frame was received (wall clock), and the camera's name.
builtin_interfaces/Time stamp
string frame_id
{_SEPARATOR}
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""
# The complete definition in the form ROS 2's MCAP storage writes it: the type's own fields, then
# each type it uses, introduced by a line of 80 '=' and `MSG: pkg/Type`.
DEFINITION = f"""\
# A raw image (rows top to bottom, `step` bytes each), as sensor_msgs/msg/Image.
std_msgs/Header header
uint32 height
uint32 width
string encoding
uint8 is_bigendian
uint32 step
uint8[] data
{HEADER_DEFINITIONS}"""

ENCAPSULATION = b"\x00\x01\x00\x00"  # CDR (XCDR1), little-endian
_RGB8 = b"rgb8\x00"
_NS = 1_000_000_000


class ImageMessageError(ValueError):
    """A camera frame message that is not a whole sensor_msgs/msg/Image in little-endian CDR."""


def _pad4(offset: int) -> int:
    return -offset % 4


def image_head(camera: str, wall_ns: int, height: int, width: int) -> bytes:
    """Every byte of an rgb8 frame's message before its pixels (their count included)."""
    name = camera.encode() + b"\x00"
    stamp = struct.pack("<iII", wall_ns // _NS, wall_ns % _NS, len(name))
    # a (see above) is a multiple of 4, so what follows the name has fixed offsets.
    tail = struct.pack("<III5sB2xII", height, width, len(_RGB8), _RGB8, 0, width * 3,
                       height * width * 3)  # fmt: skip
    return b"".join((ENCAPSULATION, stamp, name, b"\x00" * _pad4(12 + len(name)), tail))


def encode_image(frame: np.ndarray, camera: str, wall_ns: int, scale: int = 1) -> bytes:
    """A uint8 (height, width, 3) frame as a sensor_msgs/msg/Image message (rgb8), every
    `scale`-th pixel of every `scale`-th row: the head and the pixels joined (one copy)."""
    return b"".join(image_parts(frame, camera, wall_ns, scale))


def image_parts(
    frame: np.ndarray, camera: str, wall_ns: int, scale: int = 1
) -> tuple[bytes, memoryview]:
    """encode_image's message in two parts, not joined: the head, and the pixels as a view of
    the frame (of a downscaled copy when `scale` > 1). The recorder hands both to its file
    process as they are, so the pixels are never copied while this process holds the GIL."""
    if scale > 1:
        frame = frame[::scale, ::scale]
    frame = np.ascontiguousarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise ValueError(f"a camera frame of {frame.dtype} {frame.shape}, not uint8 (h, w, 3)")
    height, width = frame.shape[:2]
    return image_head(camera, wall_ns, height, width), frame.data.cast("B")


class CdrCursor:
    """Reads a CDR message's primitives in order, each aligned, refusing to read past its end
    (ImageMessageError; jpeg_frames reads its messages with it too)."""

    def __init__(self, message: memoryview) -> None:
        self.body = message[len(ENCAPSULATION) :]
        self.offset = 0

    def take(self, size: int) -> memoryview:
        if self.offset + size > len(self.body):
            raise ImageMessageError(
                f"a camera frame message ends at byte {len(self.body)} of its body, "
                f"before the {size} bytes at {self.offset} it should hold"
            )
        part = self.body[self.offset : self.offset + size]
        self.offset += size
        return part

    def number(self, code: str) -> int:
        size = struct.calcsize(code)
        self.offset += -self.offset % size
        (value,) = struct.unpack("<" + code, self.take(size))
        return int(value)

    def text(self) -> str:
        raw = self.take(self.number("I"))
        if not raw or raw[-1] != 0:
            raise ImageMessageError("a camera frame message holds a string without its NUL")
        try:
            return bytes(raw[:-1]).decode()
        except UnicodeDecodeError:
            raise ImageMessageError(
                "a camera frame message holds a string that is not UTF-8"
            ) from None


def decode_image(message: bytes | memoryview) -> dict[str, Any]:
    """A sensor_msgs/msg/Image message back to the dict `frame_of` reads (its `data`: the
    pixels' bytes, a view into `message`). ImageMessageError: truncated or not CDR."""
    view = memoryview(message).cast("B")
    if bytes(view[: len(ENCAPSULATION)]) != ENCAPSULATION:
        raise ImageMessageError(
            "a camera frame message does not begin with the little-endian CDR header 00 01 00 00"
        )
    cursor = CdrCursor(view)
    sec, nsec = cursor.number("i"), cursor.number("I")
    image: dict[str, Any] = {
        "timestamp": {"sec": sec, "nsec": nsec},
        "frame_id": cursor.text(),
        "height": cursor.number("I"),
        "width": cursor.number("I"),
        "encoding": cursor.text(),
        "is_bigendian": cursor.number("B"),
        "step": cursor.number("I"),
    }
    data = cursor.take(cursor.number("I"))
    if len(data) != image["height"] * image["step"]:
        raise ImageMessageError(
            f"a camera frame message holds {len(data)} bytes of pixels, "
            f"not height x step = {image['height']} x {image['step']}"
        )
    image["data"] = data
    return image


def frame_of(message: Mapping[str, Any]) -> np.ndarray:
    """A recorded rgb8 frame (decode_image's dict) back to a uint8 (height, width, 3) array
    (any recorded frame, JPEG ones too: controller.record.jpeg_frames.pixels_of)."""
    if message.get("encoding") != "rgb8":
        raise ValueError(f"a frame encoded as {message.get('encoding')!r}, not rgb8")
    data = message["data"]
    if isinstance(data, str):  # recorded before frames were CDR: foxglove.RawImage in JSON
        data = base64.b64decode(data)
    height, width = int(message["height"]), int(message["width"])
    step = int(message.get("step", width * 3))
    rows = np.frombuffer(data, dtype=np.uint8, count=height * step).reshape(height, step)
    return rows[:, : width * 3].reshape(height, width, 3)
