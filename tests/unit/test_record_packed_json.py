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


def test_a_non_finite_number_is_refused_and_so_is_an_array_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        to_json(pack({"actions": np.array([[0.0, 1.0], [math.nan, 2.0]], np.float32)})[0])
    with pytest.raises(TypeError, match="cannot be JSON"):
        pack({"names": np.array(["a", "b"])})
    with pytest.raises(TypeError, match="cannot be JSON"):
        pack({"what": object()})
