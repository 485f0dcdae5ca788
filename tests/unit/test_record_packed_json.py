"""controller.record.packed_json: the daemon packs a record (its arrays as bytes) and the file
process writes its JSON. The bytes must be exactly json.dumps' of the record with its arrays
as lists, and never more than the bound the recorder counts for the file's size."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from controller.record.packed_json import pack, to_json

dtypes = st.sampled_from(["<f4", "<f8", "<f2", "<i8", "<i4", "|u1", "|i1", "|b1"])
arrays = dtypes.flatmap(
    lambda dtype: hnp.arrays(
        dtype,
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
        elements={"allow_nan": False, "allow_infinity": False} if "f" in dtype else None,
    )
)
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5)
scalars |= st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    scalars | arrays,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=30,
)


def as_lists(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {key: as_lists(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_lists(item) for item in value]
    return value


def reference(value: object) -> bytes:
    return json.dumps(as_lists(value), separators=(",", ":"), allow_nan=False).encode()


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values, max_size=6))
def test_the_file_process_writes_json_dumps_bytes_within_the_bound(value) -> None:  # type: ignore[no-untyped-def]
    packed, bound = pack(value)
    written = to_json(packed)
    assert written == reference(value)
    assert len(written) <= bound


def test_a_chunk_a_context_and_the_worst_cases_of_the_bound() -> None:
    rng = np.random.default_rng(0)
    chunk = rng.standard_normal((100, 14)).astype(np.float32) * 1e-30  # long reprs
    worst = {
        "actions": chunk,
        "flags": [False] * 50,
        "control": "\x01" * 40,
        "tiny": np.full(7, 6e-8, np.float16),
        "memory": {"mean": {"data": rng.standard_normal(24), "shape": [2, 12]}},
        "mask": np.zeros((1, 48), bool),
        "ids": np.arange(48, dtype=np.int64) - 2**62,
        "none": None,
        "keys": {1: [np.float32(0.5)], None: []},
    }
    packed, bound = pack(worst)
    written = to_json(packed)
    assert written == reference({**worst, "keys": {1: [0.5], None: []}})
    assert len(written) <= bound
    assert json.loads(written)["actions"] == chunk.tolist()  # float32 values exactly


def test_an_empty_array_with_leading_dimensions_stays_within_the_bound() -> None:
    for shape in [(1000, 0), (10, 10, 0), (0,), (3, 0, 5)]:
        packed, bound = pack({"a": np.zeros(shape, np.float32)})
        assert len(to_json(packed)) <= bound


def test_what_json_cannot_hold_is_refused_where_it_is_packed() -> None:
    with pytest.raises(ValueError, match="NaN or an infinity"):
        pack({"actions": np.array([[0.0, 1.0], [math.nan, 2.0]], np.float32)})
    with pytest.raises(ValueError, match="NaN or an infinity"):
        pack({"memory": {"data": np.array([np.inf], np.float16)}})
    for array in (np.array(["a", "b"]), np.zeros(2, np.longdouble), np.zeros(2, complex)):
        with pytest.raises(TypeError, match="cannot be JSON"):
            pack({"x": array})
    with pytest.raises(TypeError, match="cannot be JSON"):
        pack({"what": object()})


def test_a_message_that_is_not_json_ends_the_file_process_naming_its_topic(tmp_path) -> None:
    from controller.record.file_client import FileProcessError, RecordingFiles

    files = RecordingFiles()
    try:
        file = files.open(tmp_path / "a.mcap", {}, "none")
        nan, _ = pack({"step_ms": math.nan})  # a Python float: checked by the file process
        file.write_json("/arm/chunk", "tempo.Chunk", 0, 0, (nan, 100))
        with pytest.raises(FileProcessError, match="/arm/chunk message is not JSON"):
            file.close()
    finally:
        files.stop()
