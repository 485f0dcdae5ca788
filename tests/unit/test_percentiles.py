"""The one percentile summary of the tools' and scripts' tables: exact, in the caller's unit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.observe.percentiles import Summary, summarize


def test_figures_of_a_known_list() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s == Summary(count=4, mean=2.5, p50=2.5, p90=3.7, p99=s.p99, min=1.0, max=4.0)
    assert s.p99 == pytest.approx(3.97)


@given(
    st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=200),
    st.sampled_from([1.0, 1e3, 1e-3, 1e6]),
)
def test_every_figure_is_numpys_in_the_callers_unit(samples: list[float], scale: float) -> None:
    s = summarize(samples, scale=scale)
    scaled = np.asarray(samples) * scale
    assert s.count == len(samples)
    for got, want in (
        (s.p50, np.median(scaled)),
        (s.p90, np.percentile(scaled, 90)),
        (s.p99, np.percentile(scaled, 99)),
        (s.mean, scaled.mean()),
        (s.min, scaled.min()),
        (s.max, scaled.max()),
    ):
        assert got == pytest.approx(float(want), rel=1e-12, abs=1e-12)


def test_no_samples_gives_no_figures_and_the_dict_keeps_every_key() -> None:
    empty = summarize(np.array([]))
    assert empty.count == 0 and math.isnan(empty.p50) and math.isnan(empty.max)
    as_dict = empty.as_dict()
    assert list(as_dict) == ["count", "mean", "p50", "p90", "p99", "min", "max"]
    assert as_dict["count"] == 0 and {as_dict[k] for k in list(as_dict)[1:]} == {None}
    assert summarize([0.002], scale=1e3).as_dict("_ms") == {
        "count": 1,
        "mean_ms": 2.0,
        "p50_ms": 2.0,
        "p90_ms": 2.0,
        "p99_ms": 2.0,
        "min_ms": 2.0,
        "max_ms": 2.0,
    }
