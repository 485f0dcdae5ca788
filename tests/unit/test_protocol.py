"""The wire codec: round trips for every kind, and every way `decode` refuses a message.

`decode` reads bytes from another process, so its contract is: a `Message`, or a `ProtocolError`
with a code and a sentence saying what is wrong. Never another exception, never a crash, never a
large allocation driven by what a header claims.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.errors import ErrorCode, ProtocolError
from controller.wire.header_schema import KINDS, PROTOCOL_VERSION
from controller.wire.protocol import (
    DEFAULT_LIMITS,
    DTYPES,
    MAX_NDIM,
    Limits,
    Message,
    decode,
    encode,
)

JOINTS = ["shoulder", "elbow", "wrist"]
SPEC = {
    "joints": JOINTS,
    "cameras": [{"name": "front", "height": 2, "width": 3}],
    "state_size": 3,
}

# kind -> (fields, arrays) of a valid message of that kind.
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]] = {
    "hello": ({"spec": dict(SPEC, limits={"j0": [-1.0, 1.0]})}, {}),
    "welcome": (
        {
            "session": "3f2a",
            "control_hz": 50.0,
            "spec": dict(SPEC, chunk_size=20, state_history=1),
            "limits": {j: [-1.5, 1.5] for j in JOINTS},
        },
        {},
    ),
    "obs": (
        {"session": "3f2a", "resume": False},
        {
            "front": np.arange(18, dtype=np.uint8).reshape(2, 3, 3),
            "state": np.array([0.1, 0.2, 0.3], dtype=np.float32),
            "teleop": np.array([1.0, 2.0, 3.0], dtype=np.float32),
        },
    ),
    "action": (
        {"session": "3f2a", "step": 42, "obs_seq": 7, "deadline_ns": 123_456_789},
        {"action": np.array([0.5, -0.5, 0.25], dtype=np.float32)},
    ),
    "hold": ({"session": "3f2a", "step": 43, "reason": "no_action"}, {}),
    "teleop": ({"session": "3f2a", "joints": ["wrist"]}, {}),
    "mark": ({"session": "3f2a", "reason": "gripper slipped"}, {}),
    "bye": ({"session": "3f2a"}, {}),
    "error": (
        {"code": "shape", "message": "state must be [3]", "session": "3f2a", "ref_seq": 9},
        {},
    ),
}


def wire(frames: list[Any]) -> list[bytes]:
    """What a peer would receive: every frame as its own bytes object."""
    return [bytes(memoryview(f)) for f in frames]


def header(kind: str = "obs", /, **overrides: Any) -> dict[str, Any]:
    """A valid header of `kind` (without arrays), with `overrides` applied."""
    fields = EXAMPLES[kind][0]
    out: dict[str, Any] = {
        "version": PROTOCOL_VERSION,
        "kind": kind,
        "robot": "arm0",
        "seq": 1,
        "time_ns": 1_000,
        "arrays": [],
        **fields,
    }
    out.update(overrides)
    return out


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def refused(frames: list[Any], code: ErrorCode, *says: str, limits: Limits = DEFAULT_LIMITS):
    """Assert that decode refuses `frames` with `code`, its sentence containing each of `says`."""
    with pytest.raises(ProtocolError) as info:
        decode(frames, limits)
    assert info.value.code is code, f"{info.value.code}: {info.value}"
    for fragment in says:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"
    return info.value


def array_entry(name: str = "a", dtype: Any = "uint8", shape: Any = (4,)) -> dict[str, Any]:
    return {
        "name": name,
        "dtype": dtype,
        "shape": list(shape) if isinstance(shape, tuple) else shape,
    }


# -- round trips ---------------------------------------------------------------------------------


def test_examples_cover_every_kind():
    assert set(EXAMPLES) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_every_kind(kind):
    fields, arrays = EXAMPLES[kind]
    frames = wire(encode(kind, robot="arm0", seq=5, time_ns=77, fields=fields, arrays=arrays))
    assert len(frames) == 1 + len(arrays)

    message = decode(frames)

    assert isinstance(message, Message)
    assert message.kind == kind
    assert message.seq == 5
    assert message.header["version"] == PROTOCOL_VERSION
    assert message.header["robot"] == "arm0"
    assert message.header["time_ns"] == 77
    for name, value in fields.items():
        assert message.header[name] == value
    assert message.session == fields.get("session")
    assert [a["name"] for a in message.header["arrays"]] == list(arrays)
    assert set(message.arrays) == set(arrays)
    for name, sent in arrays.items():
        got = message.arrays[name]
        assert got.dtype == sent.dtype
        assert got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)


def test_decoded_arrays_are_views_on_the_frames():
    fields, arrays = EXAMPLES["obs"]
    frames = wire(encode("obs", robot="arm0", seq=1, time_ns=1, fields=fields, arrays=arrays))

    message = decode(frames)

    for index, name in enumerate(arrays, start=1):
        frame_bytes = np.frombuffer(frames[index], dtype=np.uint8)
        assert np.shares_memory(message.arrays[name], frame_bytes)
        assert not message.arrays[name].flags.writeable  # bytes are immutable: so is the view


def test_decode_reads_zmq_frames_without_copying():
    fields, arrays = EXAMPLES["action"]
    frames = [
        zmq.Frame(f)
        for f in wire(encode("action", robot="r", seq=1, time_ns=1, fields=fields, arrays=arrays))
    ]

    message = decode(frames)

    action = message.arrays["action"]
    np.testing.assert_array_equal(action, arrays["action"])
    assert np.shares_memory(action, np.frombuffer(frames[1].buffer, dtype=np.uint8))


def test_encode_passes_wire_ready_arrays_through_without_copying():
    image = np.zeros((4, 5, 3), dtype=np.uint8)
    state = np.zeros(6, dtype="<f4")

    frames = encode(
        "obs",
        robot="r",
        seq=1,
        time_ns=1,
        fields={"session": "s"},
        arrays={"front": image, "state": state},
    )

    assert frames[1] is image
    assert frames[2] is state


def test_encode_converts_big_endian_and_strided_arrays_to_little_endian_c_order():
    big = np.arange(6, dtype=">f4").reshape(2, 3)
    strided = np.arange(10, dtype="<i4")[::2]
    fortran = np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3))

    frames = encode(
        "obs",
        robot="r",
        seq=1,
        time_ns=1,
        fields={"session": "s"},
        arrays={"big": big, "strided": strided, "fortran": fortran},
    )

    entries = msgpack.unpackb(frames[0])["arrays"]
    assert entries == [
        {"name": "big", "dtype": "float32", "shape": [2, 3]},
        {"name": "strided", "dtype": "int32", "shape": [5]},
        {"name": "fortran", "dtype": "float64", "shape": [2, 3]},
    ]
    assert bytes(memoryview(frames[1])) == np.arange(6, dtype="<f4").tobytes()
    assert bytes(memoryview(frames[2])) == np.array([0, 2, 4, 6, 8], dtype="<i4").tobytes()
    assert bytes(memoryview(frames[3])) == np.arange(6, dtype="<f8").tobytes()  # C order
    message = decode(wire(frames))
    np.testing.assert_array_equal(message.arrays["big"], big)
    np.testing.assert_array_equal(message.arrays["fortran"], fortran)
    assert message.arrays["big"].dtype == np.dtype("<f4")  # little-endian on the way out


def test_encode_keeps_zero_dimensional_and_empty_arrays():
    arrays = {
        "scalar_le": np.array(2.5, dtype="<f8"),
        "scalar_be": np.array(2.5, dtype=">f8"),  # converted: must stay 0-d
        "empty": np.zeros((0, 3), dtype=np.uint16),
    }
    message = decode(
        wire(encode("obs", robot="r", seq=1, time_ns=1, fields={"session": "s"}, arrays=arrays))
    )

    assert message.arrays["scalar_le"].shape == ()
    assert message.arrays["scalar_be"].shape == ()
    assert float(message.arrays["scalar_be"]) == 2.5
    assert message.arrays["empty"].shape == (0, 3)


@pytest.mark.parametrize("dtype", [object, bool, np.int64, np.float16, np.complex64, "U3"])
def test_encode_refuses_dtypes_outside_the_allowlist(dtype):
    with pytest.raises(ValueError, match="cannot be sent"):
        encode("obs", robot="r", seq=1, time_ns=1, arrays={"x": np.zeros(2, dtype=dtype)})


def test_allowlist_is_little_endian_and_object_free():
    assert set(DTYPES) == {"uint8", "uint16", "int32", "float32", "float64"}
    for dtype in DTYPES.values():
        assert dtype == dtype.newbyteorder("<")  # numpy writes native little-endian as "="
        assert not dtype.hasobject


# -- refusals: framing and msgpack ---------------------------------------------------------------


def test_refuses_an_empty_message():
    refused([], ErrorCode.MALFORMED, "empty message")


def test_refuses_too_many_frames():
    # The daemon stops reading an over-long message at the limit: the sentence says "more than
    # 33", never a count it did not see (it once said "35 frames" when 200 were sent).
    frames = [pack(header())] + [b""] * (DEFAULT_LIMITS.max_arrays + 1)
    refused(frames, ErrorCode.NOT_ALLOWED, "more than 33 frames", "32 arrays")


def test_refuses_an_oversize_header_before_parsing_it():
    big = pack(header(robot="x" * 4000, time_ns=1))
    limits = Limits(max_header_bytes=len(big) - 1)
    refused(
        [big],
        ErrorCode.NOT_ALLOWED,
        f"header frame is {len(big)} bytes",
        f"limit is {len(big) - 1}",
        limits=limits,
    )
    # The default limit: 16 KiB; one byte over is refused even though it is garbage.
    refused([b"\xc1" * (16 * 1024 + 1)], ErrorCode.NOT_ALLOWED, "16385 bytes", "16384")


def test_refuses_bytes_that_are_not_msgpack():
    refused([b"\xc1 never used in msgpack"], ErrorCode.MALFORMED, "not a valid msgpack map")


def test_refuses_truncated_msgpack():
    raw = pack(header())
    refused([raw[:-3]], ErrorCode.MALFORMED, "not a valid msgpack map")
    refused([raw[:1]], ErrorCode.MALFORMED, "not a valid msgpack map")


def test_refuses_trailing_bytes_after_the_map():
    raw = pack(header())
    with pytest.raises(msgpack.ExtraData):
        msgpack.unpackb(raw + b"\xc0")
    refused([raw + b"\xc0"], ErrorCode.MALFORMED, "not a valid msgpack map", "ExtraData")


@pytest.mark.parametrize("value", [[1, 2], 5, "obs", None, 1.5])
def test_refuses_a_header_that_is_not_a_map(value):
    refused([pack(value)], ErrorCode.MALFORMED, "must be a msgpack map")


def test_refuses_non_string_map_keys():
    raw = pack({**header(), 1: 2})
    refused([raw], ErrorCode.MALFORMED, "not a valid msgpack map")


def test_refuses_strings_and_containers_over_the_msgpack_limits():
    limits = Limits(max_str_len=16, max_container_len=8)
    refused([pack(header(robot="r" * 17))], ErrorCode.MALFORMED, "max_str_len", limits=limits)
    refused(
        [pack(header("teleop", joints=["j"] * 9))],
        ErrorCode.MALFORMED,
        "max_array_len",
        limits=limits,
    )
    big_map = header("hello", spec={f"k{i}": i for i in range(9)})
    refused([pack(big_map)], ErrorCode.MALFORMED, "max_map_len", limits=limits)


@pytest.mark.parametrize(
    "value",
    [msgpack.ExtType(5, b"abc"), msgpack.ExtType(5, b""), msgpack.Timestamp(1, 0)],
    ids=["ext", "empty-ext", "timestamp"],
)
def test_refuses_msgpack_ext_types_anywhere_in_the_header(value):
    refused([pack(header(robot=value))], ErrorCode.NOT_ALLOWED, "ext", "not allowed")
    nested = header("hello", spec=dict(SPEC, camera_hz=value))
    refused([pack(nested)], ErrorCode.NOT_ALLOWED, "ext", "not allowed")


@pytest.mark.parametrize("value", [b"arm0", b""], ids=["bin", "empty-bin"])
def test_refuses_msgpack_bin_anywhere_in_the_header(value):
    refused([pack(header(robot=value))], ErrorCode.NOT_ALLOWED, "bin", "not allowed")
    # Nested where no field type check would see it, and as a map key.
    refused([pack(header("hello", spec=dict(SPEC, camera_hz=value)))], ErrorCode.NOT_ALLOWED, "bin")
    refused([pack(header("hello", spec={**SPEC, value: 1}))], ErrorCode.NOT_ALLOWED, "bin")


def test_refuses_deep_nesting_cleanly():
    deep = b"\x91" * 10_000 + b"\xc0"  # [[[[...nil...]]]] ten thousand deep: 10 kB
    refused([deep], ErrorCode.MALFORMED, "too deeply")
    inside_a_field = b"\x81\xa4spec" + deep  # {"spec": [[[...]]]}
    refused([inside_a_field], ErrorCode.MALFORMED, "too deeply")


# -- refusals: header fields ---------------------------------------------------------------------


@pytest.mark.parametrize("field", ["version", "kind", "robot", "seq", "time_ns", "arrays"])
def test_refuses_a_missing_common_field(field):
    h = header()
    del h[field]
    refused([pack(h)], ErrorCode.MALFORMED, f"missing the field {field!r}")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("version", "1", "an integer"),
        ("version", 1.0, "an integer"),
        ("kind", 5, "a string"),
        ("robot", None, "a string"),
        ("robot", ["arm0"], "a string"),
        ("seq", "1", "an integer"),
        ("seq", 1.5, "an integer"),
        ("time_ns", 1.5, "an integer"),
        ("arrays", {}, "a list"),
        ("arrays", "none", "a list"),
    ],
)
def test_refuses_a_mistyped_common_field(field, value, expected):
    refused([pack(header(**{field: value}))], ErrorCode.MALFORMED, repr(field), expected)


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("obs", "seq"),
        ("obs", "time_ns"),
        ("obs", "version"),
        ("action", "step"),
        ("action", "deadline_ns"),
        ("error", "ref_seq"),
    ],
)
def test_refuses_a_bool_where_an_integer_is_expected(kind, field):
    # msgpack true is not 1: a bool would slip through isinstance(value, int).
    refused([pack(header(kind, **{field: True}))], ErrorCode.MALFORMED, repr(field), "an integer")


def test_refuses_a_bool_where_a_number_is_expected():
    refused(
        [pack(header("welcome", control_hz=True))], ErrorCode.MALFORMED, "'control_hz'", "a number"
    )


def test_accepts_an_integer_where_a_number_is_expected():
    assert decode([pack(header("welcome", control_hz=50))]).header["control_hz"] == 50


def test_refuses_an_integer_where_a_bool_is_expected():
    refused([pack(header("obs", resume=1))], ErrorCode.MALFORMED, "'resume'", "true or false")


def test_refuses_a_negative_sequence_number():
    refused([pack(header(seq=-1))], ErrorCode.MALFORMED, "'seq' must be in [0, 2^63)")
    refused([pack(header(time_ns=-5))], ErrorCode.MALFORMED, "'time_ns'")
    refused([pack(header(time_ns=2**64 - 1))], ErrorCode.MALFORMED, "'time_ns'")


def test_refuses_a_header_with_too_many_values():
    many = header("hello", spec=dict(SPEC, padding=[[0, 0, 0, 0] for _ in range(1000)]))
    refused([pack(many)], ErrorCode.NOT_ALLOWED, "more than 4096 values")


@pytest.mark.parametrize("version", [0, PROTOCOL_VERSION + 1, 2**40])
def test_refuses_another_protocol_version(version):
    refused(
        [pack(header(version=version))],
        ErrorCode.VERSION,
        f"version {version}",
        f"speaks version {PROTOCOL_VERSION}",
    )


def test_version_is_checked_before_kind_specific_fields():
    # A future version may have other fields: the driver must hear "version", not "unknown field".
    h = header(version=PROTOCOL_VERSION + 1, colour="red")
    refused([pack(h)], ErrorCode.VERSION)


@pytest.mark.parametrize("kind", ["teleport", "", "OBS", "status"])
def test_refuses_an_unknown_kind(kind):
    refused(
        [pack(header(kind=kind))], ErrorCode.NOT_ALLOWED, f"unknown message kind {kind!r}", "hello"
    )


def test_refuses_an_unknown_header_field():
    refused(
        [pack(header(colour="red"))], ErrorCode.MALFORMED, "unknown header field 'colour'", "'obs'"
    )


def test_refuses_a_field_that_belongs_to_another_kind():
    # `step` is an action field; an observation may not carry it.
    refused([pack(header("obs", step=3))], ErrorCode.MALFORMED, "unknown header field 'step'")


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("hello", "spec"),
        ("welcome", "session"),
        ("welcome", "control_hz"),
        ("welcome", "spec"),
        ("obs", "session"),
        ("action", "session"),
        ("action", "step"),
        ("action", "obs_seq"),
        ("action", "deadline_ns"),
        ("hold", "step"),
        ("hold", "reason"),
        ("teleop", "joints"),
        ("bye", "session"),
        ("error", "code"),
        ("error", "message"),
    ],
)
def test_refuses_a_message_missing_a_field_its_kind_requires(kind, field):
    h = header(kind)
    del h[field]
    refused([pack(h)], ErrorCode.MALFORMED, f"a {kind!r} message needs the field {field!r}")


@pytest.mark.parametrize(
    ("kind", "field", "value", "expected"),
    [
        ("hello", "spec", [], "a map"),
        ("obs", "session", 5, "a string"),
        ("hold", "reason", 1, "a string"),
        ("teleop", "joints", "wrist", "a list"),
        ("welcome", "limits", [], "a map"),
        ("error", "session", 3, "a string"),
    ],
)
def test_refuses_a_mistyped_kind_field(kind, field, value, expected):
    refused([pack(header(kind, **{field: value}))], ErrorCode.MALFORMED, repr(field), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_optional_fields_may_be_left_out(kind):
    h = {k: v for k, v in header(kind).items() if k not in ("resume", "limits", "ref_seq")}
    if kind == "error":
        del h["session"]
    assert decode([pack(h)]).kind == kind


# -- refusals: array descriptors -----------------------------------------------------------------


def with_arrays(entries: list[Any], *frames: bytes) -> list[bytes]:
    return [pack(header(arrays=entries)), *frames]


@pytest.mark.parametrize(
    "entry",
    [
        5,
        "state",
        ["state", "float32", [3]],
        {"name": "a", "dtype": "uint8"},
        {"name": "a", "shape": [1]},
        {"dtype": "uint8", "shape": [1]},
        {"name": "a", "dtype": "uint8", "shape": [1], "order": "C"},
    ],
    ids=["int", "str", "list", "no-shape", "no-dtype", "no-name", "extra-key"],
)
def test_refuses_an_arrays_entry_that_is_not_name_dtype_shape(entry):
    refused(with_arrays([entry], b"\0"), ErrorCode.MALFORMED, "name, dtype and shape")


def test_refuses_a_repeated_array_name():
    entries = [array_entry("state", shape=(1,)), array_entry("state", shape=(1,))]
    refused(with_arrays(entries, b"\0", b"\0"), ErrorCode.MALFORMED, "'state'", "repeated")


@pytest.mark.parametrize("name", ["", 5, None])
def test_refuses_an_empty_or_non_string_array_name(name):
    refused(
        with_arrays([array_entry(name, shape=(1,))], b"\0"),
        ErrorCode.MALFORMED,
        "empty or repeated",
    )


@pytest.mark.parametrize(
    "dtype",
    [
        "O",
        "|O",
        "object",
        "V8",
        "[('a', '<f4')]",
        "<f4",
        ">f4",
        "f4",
        "float",
        "int64",
        "bool",
        "float16",
        "complex64",
        "U4",
        "S4",
        "",
        5,
        None,
        ["a", "<f4"],
        {"names": ["a"]},
    ],
)
def test_refuses_a_dtype_outside_the_allowlist(dtype):
    error = refused(
        with_arrays([array_entry(dtype=dtype)], b"\0" * 4),
        ErrorCode.NOT_ALLOWED,
        f"dtype {dtype!r} is not allowed",
        "float32",
    )
    assert "little-endian" in str(error)


@pytest.mark.parametrize(
    "shape",
    [
        "4",
        4,
        None,
        {"0": 4},
        [-1],
        [2, -3],
        [1.0],
        [True],
        [1, 1, 1, 1, 1],
        [None],
        [DEFAULT_LIMITS.max_array_bytes + 1],
    ],
    ids=[
        "str",
        "int",
        "nil",
        "map",
        "negative",
        "negative-2nd",
        "float",
        "bool",
        "5-dims",
        "nil-dim",
        "dim-over-limit",
    ],
)
def test_refuses_a_bad_shape(shape):
    refused(
        with_arrays([array_entry(shape=shape)], b"\0" * 4),
        ErrorCode.SHAPE,
        "'a'",
        f"at most {MAX_NDIM} non-negative integers",
    )


def test_accepts_a_shape_of_max_ndim():
    message = decode(with_arrays([array_entry(shape=[1, 2, 1, 2])], b"\1\2\3\4"))
    assert message.arrays["a"].shape == (1, 2, 1, 2)


def test_refuses_more_arrays_than_the_limit():
    entries = [array_entry(f"a{i}", shape=(1,)) for i in range(DEFAULT_LIMITS.max_arrays + 1)]
    refused(with_arrays(entries), ErrorCode.NOT_ALLOWED, "33 arrays declared", "limit is 32")


def test_refuses_declared_bytes_over_the_limit():
    limits = Limits(max_array_bytes=100)
    entry = array_entry(dtype="float32", shape=(26,))  # 104 bytes
    refused(
        with_arrays([entry], b"\0" * 104),
        ErrorCode.NOT_ALLOWED,
        "declares 104 bytes",
        "limit is 100",
        limits=limits,
    )
    # At the limit it is fine.
    ok = decode(with_arrays([array_entry(dtype="float32", shape=(25,))], b"\0" * 100), limits)
    assert ok.arrays["a"].shape == (25,)


@pytest.mark.parametrize(
    "shape",
    [
        [2**26, 2**26, 2**26, 2**26],  # 2**104 elements: wraps to 0 in int64
        [2**20, 2**20, 2**20, 2**20],
        [2**26, 2],
        [0, 2**26, 2**26, 2**26],
    ],  # empty, but numpy cannot even describe the shape
    ids=["wraps-int64-to-zero", "2**80", "just-over", "zero-dim-with-huge-others"],
)
def test_refuses_huge_declared_arrays_without_allocating(shape):
    frames = with_arrays([array_entry(dtype="float64", shape=shape)], b"")
    tracemalloc.start()
    try:
        refused(frames, ErrorCode.NOT_ALLOWED, "'a'", "the limit is")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.parametrize("size", [0, 11, 13, 24])
def test_refuses_a_frame_whose_length_disagrees_with_its_shape(size):
    entry = array_entry("state", dtype="float32", shape=(3,))
    refused(
        with_arrays([entry], b"\0" * size),
        ErrorCode.SHAPE,
        "'state'",
        "needs 12 bytes",
        f"its frame has {size}",
    )


def test_refuses_fewer_or_more_frames_than_declared_arrays():
    two = [array_entry("a", shape=(1,)), array_entry("b", shape=(1,))]
    refused(with_arrays(two, b"\0"), ErrorCode.MALFORMED, "declares 2 arrays but 1 array frames")
    refused(with_arrays([], b"\0"), ErrorCode.MALFORMED, "declares 0 arrays but 1 array frames")
    refused(with_arrays(two, b"\0", b"\0", b"\0"), ErrorCode.MALFORMED, "declares 2 arrays but 3")


def test_frames_follow_the_order_of_the_arrays_list():
    entries = [array_entry("first", shape=(2,)), array_entry("second", shape=(3,))]
    message = decode(with_arrays(entries, b"\1\2", b"\3\4\5"))
    assert message.arrays["first"].tolist() == [1, 2]
    assert message.arrays["second"].tolist() == [3, 4, 5]


def test_array_bytes_are_read_little_endian():
    entry = array_entry("x", dtype="uint16", shape=(2,))
    message = decode(with_arrays([entry], b"\x01\x00\x00\x01"))
    assert message.arrays["x"].tolist() == [1, 256]


# -- property: decode returns a Message or raises ProtocolError, nothing else --------------------


def decode_or_protocol_error(frames: list[bytes]) -> None:
    try:
        message = decode(frames)
    except ProtocolError as exc:
        assert isinstance(exc.code, ErrorCode)
        assert str(exc)
        return
    assert isinstance(message, Message)
    assert message.kind in KINDS


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=6))
def test_any_bytes_decode_or_raise_protocol_error(frames):
    decode_or_protocol_error(frames)


# Values msgpack can carry, including the ones decode must refuse (bin, ext, bools, floats).
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=4)
    | st.sampled_from(list(KINDS) + list(DTYPES) + ["name", "dtype", "shape", "session"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=8) | st.sampled_from(list(header("action"))), children, max_size=4
        )
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    edits=st.dictionaries(
        st.sampled_from(
            [
                "version",
                "kind",
                "robot",
                "seq",
                "time_ns",
                "arrays",
                "session",
                "step",
                "spec",
                "joints",
                "code",
                "colour",
            ]
        ),
        msgpack_values,
        max_size=3,
    ),
    deletions=st.sets(st.sampled_from(["version", "kind", "seq", "arrays", "session"]), max_size=2),
    data=st.data(),
)
def test_mutated_headers_decode_or_raise_protocol_error(kind, edits, deletions, data):
    fields, arrays = EXAMPLES[kind]
    frames = wire(encode(kind, robot="arm0", seq=3, time_ns=9, fields=fields, arrays=arrays))
    h = msgpack.unpackb(frames[0])
    h.update(edits)
    for name in deletions:
        h.pop(name, None)
    frames[0] = pack(h)
    # Sometimes drop, add or resize an array frame too.
    if len(frames) > 1 and data.draw(st.booleans()):
        i = data.draw(st.integers(1, len(frames) - 1))
        frames[i] = data.draw(st.binary(max_size=64))
    if data.draw(st.booleans()):
        frames.append(data.draw(st.binary(max_size=8)))
    decode_or_protocol_error(frames)


@settings(max_examples=300, deadline=None)
@given(
    entries=st.lists(
        st.fixed_dictionaries(
            {
                "name": st.text(max_size=3) | st.integers(-(2**63), 2**63 - 1),
                "dtype": st.sampled_from([*DTYPES, "O", ">f4", "<f4", "int64"])
                | st.integers(-(2**63), 2**63 - 1),
                "shape": st.lists(
                    st.integers(-2, 2**26 + 1) | st.sampled_from([0, 1, 2, 3, 2**26]),
                    max_size=5,
                )
                | st.integers(-(2**63), 2**63 - 1),
            }
        ),
        max_size=4,
    ),
    sizes=st.lists(st.integers(0, 64), max_size=5),
)
def test_random_array_descriptors_decode_or_raise_protocol_error(entries, sizes):
    frames = with_arrays(entries, *(b"\0" * n for n in sizes))
    decode_or_protocol_error(frames)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_byte_mutations_of_a_valid_message_decode_or_raise_protocol_error(data):
    fields, arrays = EXAMPLES["obs"]
    frames = wire(encode("obs", robot="arm0", seq=3, time_ns=9, fields=fields, arrays=arrays))
    raw = bytearray(frames[0])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    frames[0] = bytes(raw[:cut]) if data.draw(st.booleans()) else bytes(raw)
    decode_or_protocol_error(frames)


# -- docs/protocol.md stays in step with the code ------------------------------------------------


def test_the_worked_example_in_the_protocol_doc_is_what_the_encoder_produces():
    doc = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    block = doc.split("The same 137 bytes in one line:", 1)[1].split("```")[1]
    documented = bytes.fromhex(" ".join(block.split()))
    image = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [255, 255, 255]]], dtype=np.uint8)
    frames = encode(
        "obs",
        robot="arm0",
        seq=7,
        time_ns=1_000_000_000,
        fields={"session": "a1b2"},
        arrays={"front": image, "state": np.array([1.0, -0.5], dtype=np.float32)},
    )
    assert frames[0] == documented
    assert bytes(memoryview(frames[1])).hex(" ") == "ff 00 00 00 ff 00 00 00 ff ff ff ff"
    assert bytes(memoryview(frames[2])).hex(" ") == "00 00 80 3f 00 00 00 bf"
    assert decode([documented, *wire(frames[1:])]).arrays["state"].tolist() == [1.0, -0.5]


# -- issue "hostile inputs, round two": where the codec and the document used to disagree -------


def map_with_repeated_key(pairs: list[tuple[str, Any]]) -> bytes:
    """A msgpack map written by hand, so that it can hold one key twice."""
    return bytes([0x80 | len(pairs)]) + b"".join(pack(k) + pack(v) for k, v in pairs)


def test_refuses_a_header_that_repeats_a_key():
    # msgpack keeps the last `kind` (a bye), a decoder that keeps the first reads an obs.
    pairs = list(header("obs").items()) + [("kind", "bye")]
    refused([map_with_repeated_key(pairs)], ErrorCode.MALFORMED, "repeats the map key 'kind'")


def test_refuses_a_repeated_key_inside_a_nested_map():
    spec = map_with_repeated_key([("joints", JOINTS), ("joints", ["x"])])
    h = header("hello")
    del h["spec"]
    raw = pack(h)
    # Append the spec as the map's last entry: bump the fixmap's count by one.
    raw = bytes([raw[0] + 1]) + raw[1:] + pack("spec") + spec
    refused([raw], ErrorCode.MALFORMED, "repeats the map key 'joints'")


@pytest.mark.parametrize("kind", ["welcome", "action", "hold", "error"])
def test_a_kind_only_the_daemon_sends_is_not_allowed_from_a_driver(kind):
    # Without its fields: the kind is refused as such, not as a message missing fields.
    frames = [pack(header("obs", kind=kind))]
    with pytest.raises(ProtocolError) as info:
        decode(frames, kinds=("hello", "obs", "teleop", "bye"))
    assert info.value.code is ErrorCode.NOT_ALLOWED and repr(kind) in str(info.value)


@pytest.mark.parametrize("kind", ["hello", "teleop", "bye", "welcome", "hold", "error"])
def test_refuses_arrays_on_a_kind_that_carries_none(kind):
    h = header(kind, arrays=[{"name": "state", "dtype": "float32", "shape": [3]}])
    refused([pack(h), np.zeros(3, np.float32).tobytes()], ErrorCode.MALFORMED, "no arrays")


@pytest.mark.parametrize(("kind", "field"), [("obs", "resume"), ("obs", "episode_start")])
def test_nil_in_an_optional_field_means_absent(kind, field):
    frames = encode(
        kind, robot="arm0", seq=1, time_ns=5, fields={"session": "s", field: None}, arrays={}
    )
    h = msgpack.unpackb(frames[0])
    h["arrays"] = []
    message = decode([pack(h)])
    assert field not in message.header


def test_nil_in_a_required_field_is_refused():
    refused([pack(header("obs", session=None))], ErrorCode.MALFORMED, "'session'")
