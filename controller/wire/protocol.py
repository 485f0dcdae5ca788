"""Tempo's wire format: one msgpack header frame, then raw little-endian array frames.

    frame 0      msgpack map: version, kind, robot, seq, time_ns, [session], arrays, kind fields
    frame 1..n   the bytes of each array named in header["arrays"], C order, little-endian

Arrays travel as their own frames so that neither side copies them (1.0 ms vs 2.3 ms round trip
for three 480x640 cameras, measured in scripts/bench/bench_transport.py). docs/protocol.md is the
reference for drivers in other languages; keep the two in step.

Decoding is strict and bounded, because the bytes come from another process: header size, frame
count and array sizes are checked before anything is parsed or built; msgpack runs with limits
and an ext_hook that refuses; dtypes come from an allowlist, so object or big-endian arrays cannot
be expressed; every array's byte length must equal what its shape and dtype say; the header's
fields are checked against its kind's (controller.wire.header_schema). Any failure is a
`ProtocolError` with a code and a sentence. This module imports numpy and msgpack only: drivers
use it without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

from controller.errors import ErrorCode, ProtocolError
from controller.wire.header_schema import (
    KINDS,
    PROTOCOL_VERSION,
    check_fields,
    is_type,
    refuse_foreign_types,
)

# The only dtypes that can cross the wire; all little-endian, none can hold Python objects.
DTYPES: dict[str, np.dtype] = {
    "uint8": np.dtype("<u1"),
    "uint16": np.dtype("<u2"),
    "int32": np.dtype("<i4"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

MAX_NDIM = 4


@dataclass(frozen=True)
class Limits:
    """Upper bounds applied before any parsing. The daemon narrows the array limits to its
    policy's spec (controller.daemon.service.limits_for).

    A real header is well under 2 KiB; 16 KiB leaves room for a hello of a few hundred joints
    with limits. Header size and value count are bounded because checking a header is Python
    work on the control loop's thread: 64 KiB of empty maps took 13-19 ms there."""

    max_header_bytes: int = 16 * 1024
    max_header_values: int = 4096
    max_arrays: int = 32
    max_array_bytes: int = 64 * 1024 * 1024
    max_str_len: int = 4096
    max_container_len: int = 1024

    @property
    def max_frames(self) -> int:
        return 1 + self.max_arrays


DEFAULT_LIMITS = Limits()


@dataclass
class Message:
    """A decoded message. `arrays` are read-only views on the received frames (no copy)."""

    kind: str
    header: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return int(self.header["seq"])

    @property
    def session(self) -> str | None:
        value = self.header.get("session")
        return value if isinstance(value, str) else None


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ProtocolError(
        ErrorCode.NOT_ALLOWED, f"msgpack ext data (type {code}) is not allowed in a header"
    )


def _map_without_duplicates(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """msgpack would keep the last of two equal keys; another decoder may keep the first, so
    such a map means different things to different readers: refuse it."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[Any] = set()
        for key, _ in pairs:
            if key in seen:
                raise ProtocolError(ErrorCode.MALFORMED, f"the header repeats the map key {key!r}")
            seen.add(key)
    return result


def _unpack_header(raw: Any, limits: Limits) -> dict[str, Any]:
    size = len(raw)
    if size > limits.max_header_bytes:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"header frame is {size} bytes; the limit is {limits.max_header_bytes}",
        )
    header = _unpack(raw, limits)
    if not isinstance(header, dict):
        raise ProtocolError(ErrorCode.MALFORMED, "header frame must be a msgpack map")
    refuse_foreign_types(header, limits.max_header_values)
    # Once more with a Python check of every map's keys: only now that the header is known to
    # be small (a hook per map on 16 KiB of empty maps would cost the loop milliseconds).
    _unpack(raw, limits, object_pairs_hook=_map_without_duplicates)
    return header


def _unpack(raw: Any, limits: Limits, **hooks: Any) -> Any:
    try:
        return msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=True,
            ext_hook=_refuse_ext,
            max_str_len=limits.max_str_len,
            # bin and ext are parsed (bounded by the header size) so that they can be refused
            # below with one clear sentence, whatever their length.
            max_bin_len=limits.max_header_bytes,
            max_array_len=limits.max_container_len,
            max_map_len=limits.max_container_len,
            max_ext_len=limits.max_header_bytes,
            **hooks,
        )
    except ProtocolError:
        raise
    except msgpack.StackError:  # its own message is empty
        raise ProtocolError(
            ErrorCode.MALFORMED, "header frame nests lists or maps too deeply to decode"
        ) from None
    except Exception as exc:  # msgpack raises several types for bad input; all mean the same
        raise ProtocolError(
            ErrorCode.MALFORMED,
            f"header frame is not a valid msgpack map ({type(exc).__name__}: {exc})",
        ) from None


def _array_descriptors(header: dict[str, Any], limits: Limits) -> list[tuple[str, np.dtype, tuple]]:
    entries = header["arrays"]
    if len(entries) > limits.max_arrays:
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"{len(entries)} arrays declared; the limit is {limits.max_arrays}",
        )
    seen: set[str] = set()
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {"name", "dtype", "shape"}:
            raise ProtocolError(
                ErrorCode.MALFORMED, "each entry of 'arrays' must be a map of name, dtype and shape"
            )
        name, dtype_name, shape = entry["name"], entry["dtype"], entry["shape"]
        if not isinstance(name, str) or not name or name in seen:
            raise ProtocolError(ErrorCode.MALFORMED, f"array name {name!r} is empty or repeated")
        seen.add(name)
        dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
        if dtype is None:
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"array {name!r}: dtype {dtype_name!r} is not allowed; use one of "
                f"{sorted(DTYPES)} (little-endian)",
            )
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(is_type(d, int) and 0 <= d <= limits.max_array_bytes for d in shape)
        ):
            raise ProtocolError(
                ErrorCode.SHAPE,
                f"array {name!r}: shape must be a list of at most {MAX_NDIM} non-negative integers",
            )
        out.append((name, dtype, tuple(shape)))
    return out


def decode(
    frames: Sequence[Any], limits: Limits = DEFAULT_LIMITS, kinds: Sequence[str] = KINDS
) -> Message:
    """Frames as received (bytes, memoryview or zmq.Frame) -> Message, or ProtocolError.
    `kinds`: the kinds this end accepts; another known kind is refused with not_allowed."""
    if not frames:
        raise ProtocolError(ErrorCode.MALFORMED, "empty message")
    if len(frames) > limits.max_frames:
        # The daemon stops reading a message past the limit, so the count is a lower bound.
        raise ProtocolError(
            ErrorCode.NOT_ALLOWED,
            f"the message has more than {limits.max_frames} frames, the limit (one header + "
            f"{limits.max_arrays} arrays)",
        )
    # zmq.Frame exposes .buffer; bytes and arrays are buffers already. Views, never copies.
    buffers = [memoryview(getattr(f, "buffer", f)).cast("B") for f in frames]
    header = _unpack_header(buffers[0], limits)
    kind = check_fields(header, kinds)
    descriptors = _array_descriptors(header, limits)
    if len(descriptors) != len(buffers) - 1:
        raise ProtocolError(
            ErrorCode.MALFORMED,
            f"header declares {len(descriptors)} arrays but {len(buffers) - 1} array frames came",
        )
    arrays: dict[str, np.ndarray] = {}
    for (name, dtype, shape), buf in zip(descriptors, buffers[1:], strict=True):
        # Python integers: an int64 product of four large dimensions wraps (even to 0).
        count = math.prod(shape)
        expected = count * dtype.itemsize
        if expected > limits.max_array_bytes:
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"array {name!r} declares {expected} bytes; the limit is {limits.max_array_bytes}",
            )
        # A zero dimension makes the array empty, but numpy still refuses shapes whose other
        # dimensions multiply past its index range: bound those as well.
        extent = math.prod(max(d, 1) for d in shape) * dtype.itemsize
        if extent > limits.max_array_bytes:
            raise ProtocolError(
                ErrorCode.NOT_ALLOWED,
                f"array {name!r}: shape {list(shape)} is too large (its non-zero dimensions "
                f"span {extent} bytes; the limit is {limits.max_array_bytes})",
            )
        if len(buf) != expected:
            raise ProtocolError(
                ErrorCode.SHAPE,
                f"array {name!r}: shape {list(shape)} of {dtype_name(dtype)} needs {expected} "
                f"bytes but its frame has {len(buf)}",
            )
        arrays[name] = np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)
    return Message(kind=kind, header=header, arrays=arrays)


def dtype_name(dtype: np.dtype) -> str:
    return _DTYPE_NAMES.get(np.dtype(dtype).newbyteorder("<"), str(dtype))


def encode(
    kind: str,
    *,
    robot: str,
    seq: int,
    time_ns: int,
    fields: Mapping[str, Any] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    version: int = PROTOCOL_VERSION,
) -> list[Any]:
    """Build the frames of one message; arrays are passed through without copying when they are
    already C-contiguous little-endian with an allowed dtype. `version` other than the current
    one only for an `error` to a peer that speaks an older version (OLDER_VERSIONS)."""
    descriptors = []
    payload: list[Any] = []
    for name, array in (arrays or {}).items():
        array = np.asarray(array)
        wire_dtype = array.dtype.newbyteorder("<")
        if wire_dtype not in _DTYPE_NAMES:
            raise ValueError(
                f"array {name!r}: dtype {array.dtype} cannot be sent; use {sorted(DTYPES)}"
            )
        if array.dtype != wire_dtype or not array.flags.c_contiguous:
            # astype, not ascontiguousarray: that one turns a 0-d array into shape (1,).
            array = array.astype(wire_dtype, order="C")
        descriptors.append(
            {"name": name, "dtype": _DTYPE_NAMES[wire_dtype], "shape": list(array.shape)}
        )
        payload.append(array)
    header = {
        "version": version,
        "kind": kind,
        "robot": robot,
        "seq": seq,
        "time_ns": time_ns,
        "arrays": descriptors,
    }
    if fields:
        header.update(fields)
    return [msgpack.packb(header, use_bin_type=True), *payload]
