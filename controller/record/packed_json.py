"""A JSON message made in the file process instead of the daemon.

The recorder's writer thread runs beside the control loop's thread in the daemon, and Python
code it runs holds the interpreter lock, which the loop's thread must take back after every
wait. Encoding a record's JSON there (a row at a time, so the lock could pass between rows)
took about 90 us a record on a 2-core machine. Now the writer only packs the record with
msgpack, its arrays as their raw bytes (one msgpack call; per array a finiteness check and a
copy), and the file process
turns that into the same compact JSON `json.dumps` gives for the record with its arrays as
lists (`np.ndarray.tolist`, as before).

    packed, bound = pack(value)        # the daemon; bound: the most bytes its JSON can take
    json_bytes = to_json(packed)       # the file process
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import msgpack
import numpy as np

ARRAY_EXT = 1  # msgpack extension type of an array: ARRAY_HEAD, dtype, shape, raw bytes
ARRAY_HEAD = struct.Struct("<BB")  # dtype string length, number of dimensions
DIM = struct.Struct("<Q")
# Bounds on the JSON of what msgpack holds, so that a file's size is never underestimated
# (rotation keeps every file under its cap): a byte of msgpack becomes at most 6 bytes of JSON
# (`false,` from 0xc2; a control character in a string, `\u0001`, from 0x01); a number from an
# array at most 25 (`-2.2250738585072014e-308,`), a bool 6, and each nested list 3 (`[],`).
JSON_PER_PACKED_BYTE = 6
JSON_PER_NUMBER = 25
JSON_PER_BOOL = 6
# What a recorded array may hold: bool, integers and floats of 16-64 bits (no longdouble).
ARRAY_DTYPES = frozenset(
    np.dtype(f"{order}{code}")
    for code in ("b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8")
    for order in "<>"
)


def pack(value: Any) -> tuple[bytes, int]:
    """(The msgpack bytes of `value`, the most bytes of JSON to_json can make of them). Arrays
    anywhere in `value` (bool, integer or float) travel as their bytes; numpy scalars as
    Python numbers. ValueError for an array with a NaN or an infinity, TypeError for what JSON
    cannot hold: refused here, in the daemon's writer thread, not later in the file process."""
    arrays = [0, 0]  # their payload bytes, the most JSON they make

    def default(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            if obj.dtype not in ARRAY_DTYPES:
                raise TypeError(f"a recorded array of dtype {obj.dtype} cannot be JSON")
            if obj.dtype.kind == "f" and not np.isfinite(obj).all():
                raise ValueError("a recorded array holds a NaN or an infinity")
            data = obj  # tobytes() is in C order whatever its strides
            dtype = data.dtype.str.encode()
            head = ARRAY_HEAD.pack(len(dtype), data.ndim) + dtype
            head += b"".join(DIM.pack(n) for n in data.shape)
            per_item = JSON_PER_BOOL if data.dtype.kind == "b" else JSON_PER_NUMBER
            # Each nested list: its brackets and the comma after it; counted from the shape,
            # so that an empty array with leading dimensions is not undercounted.
            lists = sum(math.prod(data.shape[:depth]) for depth in range(data.ndim))
            arrays[0] += data.nbytes
            arrays[1] += data.size * per_item + 3 * lists + 2
            return msgpack.ExtType(ARRAY_EXT, head + data.tobytes())
        if isinstance(obj, np.generic):
            return obj.item()
        raise TypeError(f"a recorded value of type {type(obj).__name__} cannot be JSON")

    packed = msgpack.packb(value, use_bin_type=True, default=default)
    bound = JSON_PER_PACKED_BYTE * (len(packed) - arrays[0]) + arrays[1]
    return packed, bound


def _ext(code: int, data: bytes) -> Any:
    if code != ARRAY_EXT:
        raise ValueError(f"unknown msgpack extension {code} in a recorded message")
    dtype_n, ndim = ARRAY_HEAD.unpack_from(data)
    at = ARRAY_HEAD.size
    dtype = np.dtype(data[at : at + dtype_n].decode())
    at += dtype_n
    shape = tuple(DIM.unpack_from(data, at + DIM.size * i)[0] for i in range(ndim))
    at += DIM.size * ndim
    return np.frombuffer(data, dtype, offset=at).reshape(shape).tolist()


def to_json(packed: bytes | memoryview) -> bytes:
    """The compact JSON of a pack()'d value (no NaN: ValueError)."""
    value = msgpack.unpackb(packed, raw=False, strict_map_key=False, ext_hook=_ext)
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
