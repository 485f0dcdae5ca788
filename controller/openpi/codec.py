"""openpi's msgpack encoding of numpy arrays, read strictly and written as `openpi-client` reads it.

openpi-client (`openpi_client.msgpack_numpy`) packs an array as a map with the bin keys
`__ndarray__`, `data`, `dtype` (numpy's dtype string) and `shape`, and a numpy scalar as
`__npgeneric__`, `data`, `dtype`. Its own reader builds whatever dtype the map names; this one
builds only plain numeric dtypes from an allowlist, checks that the bytes fill the shape before
any array exists, bounds the message, the number of arrays and each array's bytes, and refuses
msgpack ext data. Every refusal is a ProtocolError of one sentence. No pickle anywhere.

    obs = decode(frame, DecodeLimits())      # a dict with str keys, arrays read-only views
    frame = encode({"actions": chunk, "server_timing": {...}})
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from controller.errors import ErrorCode, ProtocolError

# Plain numeric dtypes (little-endian or byte-sized): what an observation holds. Object, void,
# structured, string and complex dtypes are refused.
ALLOWED_DTYPES = frozenset(
    ["|b1", "|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4", "<f8"]
)
MAX_DIMS = 8
_ARRAY_KEYS = frozenset([b"__ndarray__", b"data", b"dtype", b"shape"])
_SCALAR_KEYS = frozenset([b"__npgeneric__", b"data", b"dtype"])


@dataclass(frozen=True)
class DecodeLimits:
    """How large one request may be. The defaults hold four 480x640 RGB cameras and a state."""

    max_message_bytes: int = 8 * 1024 * 1024
    max_arrays: int = 16
    max_array_bytes: int = 2 * 1024 * 1024
    max_keys: int = 64  # entries of one map
    max_text_bytes: int = 4096  # a string (the prompt)


def decode(frame: bytes, limits: DecodeLimits) -> dict[str, Any]:
    """One openpi request: a map with str keys; arrays are read-only views of `frame`."""
    if not isinstance(frame, (bytes, bytearray, memoryview)):
        raise ProtocolError(
            ErrorCode.MALFORMED, "a request is one binary websocket frame of msgpack, not text"
        )
    size = len(frame)
    if size > limits.max_message_bytes:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"the request is {size} bytes; at most {limits.max_message_bytes} are allowed",
        )
    arrays = _ArrayReader(limits)
    try:
        value = msgpack.unpackb(
            frame,
            raw=False,
            object_hook=arrays.read,
            ext_hook=_refuse_ext,
            strict_map_key=True,
            max_bin_len=limits.max_array_bytes,
            max_str_len=limits.max_text_bytes,
            max_array_len=limits.max_keys,
            max_map_len=limits.max_keys,
            max_ext_len=0,
        )
    except ProtocolError:
        raise
    except Exception:  # msgpack's own: bad format, extra data, a limit passed, nesting too deep
        raise ProtocolError(
            ErrorCode.MALFORMED,
            "the request is not msgpack within the limits (openpi_client.msgpack_numpy packs "
            "it so)",
        ) from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ProtocolError(ErrorCode.MALFORMED, "a request must be a map with text keys")
    return value


def encode(value: dict[str, Any]) -> bytes:
    """A reply as openpi-client unpacks it (arrays in its encoding)."""
    packed: bytes = msgpack.packb(value, default=_pack_numpy, use_bin_type=True)
    return packed


def _pack_numpy(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in ("O", "V", "c", "U", "S"):
            raise TypeError(f"arrays of dtype {obj.dtype} are not sent")
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": list(obj.shape),
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot pack a {type(obj).__name__}")


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(ErrorCode.NOT_ALLOWED, "msgpack ext data is not allowed in a request")


class _ArrayReader:
    """msgpack's object_hook: turns openpi's array maps into arrays, counting them."""

    def __init__(self, limits: DecodeLimits) -> None:
        self.limits = limits
        self.count = 0

    def read(self, obj: dict[Any, Any]) -> Any:
        if b"__ndarray__" in obj:
            return self._array(obj)
        if b"__npgeneric__" in obj:
            return self._scalar(obj)
        if not all(isinstance(k, str) for k in obj):
            raise ProtocolError(ErrorCode.MALFORMED, "a map in a request must have text keys")
        return obj

    def _dtype(self, obj: dict[Any, Any]) -> np.dtype[Any]:
        name = obj.get(b"dtype")
        if not isinstance(name, str) or name not in ALLOWED_DTYPES:
            shown = name if isinstance(name, str) and len(name) <= 16 else "that"
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"arrays of dtype {shown!r} are not accepted; send plain numbers (uint8 "
                "images, float32 or float64 states)",
            )
        return np.dtype(name)

    def _array(self, obj: dict[Any, Any]) -> np.ndarray:
        if set(obj) != _ARRAY_KEYS:
            raise ProtocolError(
                ErrorCode.MALFORMED, "an array must hold exactly __ndarray__, data, dtype, shape"
            )
        self.count += 1
        if self.count > self.limits.max_arrays:
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"the request holds more than {self.limits.max_arrays} arrays",
            )
        dtype = self._dtype(obj)
        data, shape = obj[b"data"], obj[b"shape"]
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_DIMS
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        ):
            raise ProtocolError(
                ErrorCode.MALFORMED,
                f"an array's shape must be a list of at most {MAX_DIMS} sizes of 0 or more",
            )
        if not isinstance(data, bytes):
            raise ProtocolError(ErrorCode.MALFORMED, "an array's data must be msgpack bin")
        expected = math.prod(shape) * dtype.itemsize
        if expected != len(data):
            raise ProtocolError(
                ErrorCode.SHAPE,
                f"an array of shape {tuple(shape)} and dtype {dtype.str} needs {expected} bytes, "
                f"but {len(data)} came",
            )
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def _scalar(self, obj: dict[Any, Any]) -> Any:
        if set(obj) != _SCALAR_KEYS:
            raise ProtocolError(
                ErrorCode.MALFORMED, "a numpy scalar must hold exactly __npgeneric__, data, dtype"
            )
        dtype = self._dtype(obj)
        value = obj[b"data"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if not (dtype.kind == "b" and isinstance(value, bool)):
                raise ProtocolError(ErrorCode.MALFORMED, "a numpy scalar's data must be a number")
        try:
            return dtype.type(value)
        except (OverflowError, ValueError):
            raise ProtocolError(
                ErrorCode.OUT_OF_RANGE, f"a numpy scalar does not fit its dtype {dtype.str}"
            ) from None
