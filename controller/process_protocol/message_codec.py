"""How a message between the control process and its inference process travels: a msgpack map
with its `kind` and its fields, arrays as their raw bytes with dtype and shape; never pickle.

    data = pack_map({"kind": "ready", "pinned": True})
    fields = MessageFields(unpack_map(data))      # each field taken once, its type checked
    pinned = fields.boolean("pinned")
    fields.done()                                 # a field nobody took is refused too

The typed messages are `process_messages`; this is what they share. Every way a message can be
malformed raises MessageError with one sentence, never a KeyError or TypeError.

Only numpy, msgpack and the standard library (the control process never imports torch).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import msgpack
import numpy as np

from controller.errors import PolicyError

# A chunk or a plan is at most 10,000 x 1,024 float32 (the spec's bounds): 40 MB.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

MAX_DIMENSIONS = 32  # numpy's own limit in its older versions

# The dtypes an array may travel as: plain numbers (an object array would need pickle).
ARRAY_DTYPES = frozenset(
    (
        "bool",
        *(f"int{bits}" for bits in (8, 16, 32, 64)),
        *(f"uint{bits}" for bits in (8, 16, 32, 64)),
        *(f"float{bits}" for bits in (16, 32, 64)),
    )
)


class MessageError(PolicyError):
    """A message between the two processes does not have the expected form (our fault, never
    the robot's: so not a ValueError, which would refuse the robot's observation)."""


def pack_map(fields: dict[str, Any]) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)


def unpack_map(data: bytes) -> dict[str, Any]:
    """The map `data` holds; MessageError unless it is one with a string `kind`."""
    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=len(data))
    except Exception as exc:  # msgpack raises several types; all mean the same here
        raise MessageError(f"undecodable message between the processes: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
        raise MessageError("a message between the processes must be a map with a 'kind'")
    return message


# Looked up, not computed: every observation's request and reply passes here, on the control
# loop's thread (numpy's dtype.name and np.dtype(name) take microseconds).
_DTYPES = {name: np.dtype(name) for name in ARRAY_DTYPES}  # native byte order
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


def pack_array(array: np.ndarray) -> dict[str, Any]:
    """An array as a map of its dtype, shape and raw (native byte order, C order) bytes."""
    name = _NAMES.get(array.dtype)
    if name is None:  # another byte order, or a dtype that cannot travel
        name = _NAMES.get(array.dtype.newbyteorder("="))
        if name is None:
            raise MessageError(
                f"an array of dtype {array.dtype} cannot travel between the processes"
            )
        array = array.astype(_DTYPES[name])
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # never 0-d here (those are contiguous)
    return {"dtype": name, "shape": list(array.shape), "data": array.tobytes()}


def unpack_array(value: Any, what: str) -> np.ndarray:
    """An array from `pack_array`'s form (a new, writable array)."""
    if not isinstance(value, dict) or len(value) != 3:
        raise MessageError(f"{what}: expected an array (a map of dtype, shape and data)")
    name, shape, data = value.get("dtype"), value.get("shape"), value.get("data")
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        if name is None or shape is None or data is None:
            raise MessageError(f"{what}: expected an array (a map of dtype, shape and data)")
        raise MessageError(f"{what}: {name!r} is not a dtype an array travels as")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMENSIONS
        or not all(_is_int(n) and 0 <= n <= MAX_MESSAGE_BYTES for n in shape)
    ):
        raise MessageError(f"{what}: bad shape {shape!r}")
    if not isinstance(data, bytes):
        raise MessageError(f"{what}: the array's data must be bytes")
    if len(data) != dtype.itemsize * math.prod(shape):
        raise MessageError(f"{what}: {len(data)} bytes do not fill {name} {tuple(shape)}")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def pack_arrays(arrays: Mapping[str, np.ndarray] | None) -> dict[str, Any] | None:
    if arrays is None:
        return None
    return {name: pack_array(value) for name, value in arrays.items()}


def unpack_arrays(value: Any, what: str) -> dict[str, np.ndarray] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(name, str) for name in value):
        raise MessageError(f"{what}: expected a map of names to arrays")
    return {name: unpack_array(array, f"{what} {name!r}") for name, array in value.items()}


def as_float32(array: np.ndarray) -> np.ndarray:
    """What the policy's arrays travel as (chunks, plans, state, memory): float32."""
    return np.asarray(array, dtype=np.float32)


def float32_arrays(arrays: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
    if arrays is None:
        return None
    return {name: as_float32(value) for name, value in arrays.items()}


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int to isinstance


class MessageFields:
    """A received message's fields, each taken once with its type checked (MessageError with
    the message's kind and the field's name otherwise); `done()` refuses any left over."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.kind: str = message["kind"]
        self._message = message
        self._taken: list[str] = []

    def _take(self, name: str) -> Any:
        value = self._message.get(name, _MISSING)
        if value is _MISSING:
            raise MessageError(f"a {self.kind!r} message lacks its {name!r} field")
        self._taken.append(name)
        return value

    def _wrong(self, name: str, expected: str, value: Any) -> MessageError:
        return MessageError(
            f"the {name!r} field of a {self.kind!r} message must be {expected}, "
            f"not {type(value).__name__}"
        )

    def _integer(self, name: str, value: Any) -> int:
        if type(value) is not int:  # bool is an int to isinstance
            raise self._wrong(name, "an integer", value)
        return value

    def integer(self, name: str) -> int:
        return self._integer(name, self._take(name))

    def optional_integer(self, name: str) -> int | None:
        value = self._take(name)
        return None if value is None else self._integer(name, value)

    def boolean(self, name: str) -> bool:
        value = self._take(name)
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false", value)
        return value

    def text(self, name: str) -> str:
        value = self._take(name)
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def texts(self, name: str) -> tuple[str, ...]:
        value = self._take(name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(name, "a list of strings", value)
        return tuple(value)

    def _mapping(self, name: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise self._wrong(name, "a map with string keys", value)
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        return self._mapping(name, self._take(name))

    def optional_mapping(self, name: str) -> dict[str, Any] | None:
        value = self._take(name)
        return None if value is None else self._mapping(name, value)

    def array(self, name: str) -> np.ndarray:
        return unpack_array(self._take(name), f"the {name!r} field of a {self.kind!r} message")

    def optional_array(self, name: str) -> np.ndarray | None:
        value = self._take(name)
        if value is None:
            return None
        return unpack_array(value, f"the {name!r} field of a {self.kind!r} message")

    def arrays(self, name: str) -> dict[str, np.ndarray] | None:
        """A map of names to arrays, or None."""
        return unpack_arrays(self._take(name), f"the {name!r} field of a {self.kind!r} message")

    def done(self) -> None:
        if len(self._taken) != len(self._message) - 1:  # each field but `kind` taken once
            left = set(self._message) - set(self._taken) - {"kind"}
            names = ", ".join(repr(name) for name in sorted(left))
            raise MessageError(f"a {self.kind!r} message has unexpected fields: {names}")


_MISSING = object()


def same_value(a: Any, b: Any) -> bool:
    """Whether two field values are the same: arrays by dtype, shape and every byte (NaN
    included), maps, lists and dataclasses element by element, anything else by `==`."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_value, a, b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            same_value(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and bool(a == b)


class Message:
    """One message between the processes: `fields()` encodes it, `read()` decodes it."""

    KIND: ClassVar[str]

    @property
    def kind(self) -> str:
        return self.KIND

    def fields(self) -> dict[str, Any]:
        return {}

    @classmethod
    def read(cls, fields: MessageFields) -> Message:
        return cls()

    def __eq__(self, other: object) -> bool:
        # Field by field, arrays by dtype, shape and bytes (a dataclass's == fails on arrays).
        return type(self) is type(other) and all(
            same_value(getattr(self, f.name), getattr(other, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        )

    __hash__ = None  # type: ignore[assignment]
