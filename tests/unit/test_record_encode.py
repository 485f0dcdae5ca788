"""controller.record.schemas.encode builds a record's JSON a row at a time (so the writer
thread lets the control loop run between rows); its bytes must be exactly json.dumps'."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.record.schemas import encode

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
scalars |= st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=40,
)


def reference(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), values, max_size=6))
def test_encode_is_json_dumps_byte_for_byte(value) -> None:  # type: ignore[no-untyped-def]
    assert encode(value) == reference(value)


def test_a_chunk_and_keys_that_are_not_strings_encode_as_json_dumps_does() -> None:
    chunk = [[i * 0.1 + j for j in range(14)] for i in range(100)]
    for value in ({"actions": chunk, "tier": "graph"}, {"a": {1: [[1.0]], None: []}}, {"e": [[]]}):
        assert encode(value) == reference(value)


def test_a_non_finite_number_is_refused_wherever_it_is() -> None:
    with pytest.raises(ValueError):
        encode({"actions": [[0.0, 1.0], [math.nan, 2.0]]})
