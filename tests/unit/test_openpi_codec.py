"""openpi's msgpack array encoding: what openpi-client packs is read back; hostile maps are
refused with one sentence (a ProtocolError), never built."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from controller.errors import ErrorCode, ProtocolError
from controller.openpi.codec import DecodeLimits, decode, encode

msgpack_numpy = pytest.importorskip("openpi_client.msgpack_numpy")

LIMITS = DecodeLimits()


def _array_map(data: bytes, dtype: str, shape: list[int]) -> dict[bytes, object]:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def _refused(frame: bytes, limits: DecodeLimits = LIMITS) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode(frame, limits)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return caught.value


def test_what_openpi_client_packs_is_read_back() -> None:
    rng = np.random.default_rng(0)
    obs = {
        "images": {"cam_high": rng.integers(0, 256, (3, 224, 224), dtype=np.uint8)},
        "state": rng.random(14),
        "step": np.int64(7),
        "prompt": "fold the towel",
    }
    got = decode(msgpack_numpy.packb(obs), LIMITS)
    assert np.array_equal(got["images"]["cam_high"], obs["images"]["cam_high"])
    assert got["state"].dtype == np.float64 and np.array_equal(got["state"], obs["state"])
    assert got["step"] == 7 and got["prompt"] == "fold the towel"


def test_what_is_encoded_openpi_client_unpacks() -> None:
    chunk = np.arange(50 * 14, dtype=np.float32).reshape(50, 14)
    reply = msgpack_numpy.unpackb(encode({"actions": chunk, "server_timing": {"infer_ms": 2.5}}))
    assert reply["actions"].shape == (50, 14) and np.array_equal(reply["actions"], chunk)
    assert reply["server_timing"] == {"infer_ms": 2.5}


@pytest.mark.parametrize("dtype", ["|O", "|V8", "<c16", "<U4", "|S4", ">f4", "<M8[s]"])
def test_dtypes_outside_the_allowlist_are_refused(dtype: str) -> None:
    frame = msgpack.packb({"x": _array_map(b"\0" * 16, dtype, [1])}, use_bin_type=True)
    assert _refused(frame).code == ErrorCode.NOT_ALLOWED


def test_an_object_array_from_a_pickling_packer_is_refused() -> None:
    # What msgpack-numpy (lebedov) would send for an object array: pickle bytes, dtype "|O".
    import pickle

    payload = pickle.dumps([1, 2])
    frame = msgpack.packb({"x": _array_map(payload, "|O", [2])}, use_bin_type=True)
    assert "not accepted" in str(_refused(frame))


def test_bytes_that_do_not_fill_the_shape_are_refused() -> None:
    frame = msgpack.packb({"x": _array_map(b"\0" * 10, "<f4", [3])}, use_bin_type=True)
    error = _refused(frame)
    assert error.code == ErrorCode.SHAPE and "needs 12 bytes" in str(error)


@pytest.mark.parametrize("shape", [[-1], [1.5], "3", [1] * 9, [True]])
def test_bad_shapes_are_refused(shape: object) -> None:
    frame = msgpack.packb({"x": _array_map(b"", "|u1", shape)}, use_bin_type=True)  # type: ignore[arg-type]
    assert _refused(frame).code == ErrorCode.MALFORMED


def test_limits_refuse_oversized_requests_and_too_many_arrays() -> None:
    small = DecodeLimits(max_message_bytes=1000, max_arrays=2, max_array_bytes=600)
    big = msgpack_numpy.packb({"x": np.zeros(2000, np.uint8)})
    assert "at most 1000" in str(_refused(big, small))
    frame = msgpack_numpy.packb({"x": np.zeros(700, np.uint8)})
    assert _refused(frame, DecodeLimits(max_array_bytes=600)).code == ErrorCode.MALFORMED
    many = msgpack_numpy.packb({f"x{i}": np.zeros(1, np.uint8) for i in range(3)})
    assert "more than 2 arrays" in str(_refused(many, small))


def test_junk_ext_and_non_maps_are_refused() -> None:
    _refused(b"\xc1garbage")
    _refused(msgpack.packb({"x": msgpack.ExtType(1, b"abc")}))
    _refused(msgpack.packb([1, 2, 3]))
    _refused(msgpack.packb({1: 2}, strict_types=False))
    with pytest.raises(ProtocolError, match="not text"):
        decode("a text frame", LIMITS)  # type: ignore[arg-type]


def test_a_map_with_extra_array_keys_is_refused() -> None:
    array = _array_map(b"\0", "|u1", [1])
    array[b"extra"] = 1
    assert _refused(msgpack.packb({"x": array}, use_bin_type=True)).code == ErrorCode.MALFORMED
