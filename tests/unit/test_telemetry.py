"""Histograms, sections, counters, the GPU event timer and the status table (no torch needed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.observe.gpu_timing import NOOP_GPU_TIMER, GpuTimer
from controller.observe.histogram import (
    DEFAULT_BOUNDS_NS,
    MAX_RELATIVE_WIDTH,
    Histogram,
    coarse_cumulative,
)
from controller.observe.instruments import NOOP_SECTION, Section
from controller.observe.status_view import fmt_duration, render_status
from controller.observe.telemetry import BUILTIN_SECTIONS, MODEL, Telemetry, TelemetryConfig

# -- histogram -------------------------------------------------------------------------------------


def test_bounds_cover_1us_to_100s_exact_at_1_2_5_with_1_5_percent_buckets() -> None:
    assert DEFAULT_BOUNDS_NS[0] == 1_000 and DEFAULT_BOUNDS_NS[-1] == 100 * 10**9
    bounds = set(DEFAULT_BOUNDS_NS)
    for exponent in range(3, 11):
        for mantissa in (1, 2, 5):
            assert mantissa * 10**exponent in bounds
    widths = np.diff(DEFAULT_BOUNDS_NS) / np.asarray(DEFAULT_BOUNDS_NS[:-1])
    assert widths.max() == pytest.approx(MAX_RELATIVE_WIDTH)
    assert 0.01 < widths.max() < 0.016


@pytest.mark.parametrize("q", [1, 10, 25, 50, 75, 90, 99, 99.9])
def test_percentiles_match_numpy_within_one_bucket(q: float) -> None:
    rng = np.random.default_rng(1)
    seconds = rng.lognormal(mean=math.log(2e-3), sigma=1.0, size=20_000)  # ~0.1 ms .. 50 ms
    h = Histogram()
    for value in seconds:
        h.record(float(value))
    estimate = h.percentile(q)
    assert estimate is not None
    exact = np.percentile(seconds, q, method="inverted_cdf")  # the order statistic itself
    assert abs(estimate - exact) / exact <= MAX_RELATIVE_WIDTH + 1e-6
    interpolated = np.percentile(seconds, q)  # numpy's default (linear)
    assert abs(estimate - interpolated) / interpolated < 0.02


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.floats(min_value=1e-6, max_value=100.0, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=300,
    ),
    st.floats(min_value=0.0, max_value=100.0),
)
def test_any_sample_percentile_lands_in_the_bucket_of_the_true_order_statistic(
    values: list[float], q: float
) -> None:
    h = Histogram()
    for value in values:
        h.record(value)
    ns = np.asarray([round(v * 1e9) for v in values])  # what the histogram saw
    exact = np.percentile(ns, q, method="inverted_cdf") / 1e9
    estimate = h.percentile(q)
    assert estimate is not None
    tolerance = max(exact * 0.0156, 16e-9)  # one bucket (1.55% below 3 us, whole ns)
    assert abs(estimate - exact) <= tolerance
    assert h.count == len(values)
    assert h.max == pytest.approx(ns.max() / 1e9)
    assert h.min == pytest.approx(ns.min() / 1e9)
    assert h.sum == pytest.approx(ns.sum() / 1e9)


def test_edges_underflow_overflow_nan_negative_and_empty() -> None:
    h = Histogram()
    assert h.percentile(50) is None and h.max is None and h.count == 0
    h.record_ns(-5)  # a clock that went backwards counts as 0
    h.record(float("nan"))  # ignored
    h.record(250.0)  # past the last bound: the overflow bucket
    assert h.count == 2
    assert h.percentile(0) == 0.0
    assert h.percentile(100) == pytest.approx(250.0)
    counts = h.counts()
    assert counts[0] == 1 and counts[-1] == 1 and len(counts) == len(DEFAULT_BOUNDS_NS) + 1
    h.reset()
    assert h.count == 0 and h.sum == 0 and h.max is None


def test_snapshot_is_json_and_buckets_coarsen_to_exact_cumulative_counts() -> None:
    rng = np.random.default_rng(2)
    ns = (rng.lognormal(math.log(1e6), 1.5, 5000)).astype(np.int64)
    h = Histogram()
    for value in ns:
        h.record_ns(int(value))
    snap = h.snapshot(buckets=True)
    json.dumps(snap)
    assert snap["count"] == 5000 == sum(c for _, c in snap["buckets"])
    assert snap["p50_s"] == pytest.approx(np.percentile(ns, 50) / 1e9, rel=0.02)
    le = [10_000, 100_000, 1_000_000, 10_000_000, 100_000_000]
    cumulative, total = coarse_cumulative(snap["buckets"], le)
    assert total == 5000
    assert cumulative == [int((ns <= bound).sum()) for bound in le]


def test_recording_allocates_nothing_that_stays() -> None:
    h = Histogram()
    values = [int(v) for v in np.random.default_rng(3).integers(1_000, 10**9, 20_000)]
    for value in values[:1000]:
        h.record_ns(value)  # warm the int caches and the bisect path
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for value in values:
            h.record_ns(value)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 4096  # bytes: nothing per record (20,000 records)


def test_a_reader_thread_never_sees_a_torn_snapshot() -> None:
    h = Histogram()
    stop = threading.Event()
    errors: list[str] = []

    def read() -> None:
        while not stop.is_set():
            snap = h.snapshot(buckets=True)
            if snap["count"] != sum(c for _, c in snap["buckets"]):
                errors.append("count disagrees with its buckets")

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(50_000):
        h.record_ns(1_000 + i)
    stop.set()
    reader.join()
    assert not errors
    assert h.count == 50_000


# -- sections with a fake clock --------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


def test_section_times_blocks_calls_and_laps_on_the_injected_clock() -> None:
    clock = FakeClock()
    telemetry = Telemetry(clock=clock)
    model = telemetry.section(MODEL)
    assert telemetry.section(MODEL) is model  # one object per name
    with model:
        clock.advance(2_000_000)  # 2 ms
    assert model.count == 1 and model.max == pytest.approx(2e-3)

    @telemetry.section("decorated")
    def work(ns: int) -> str:
        clock.advance(ns)
        return "done"

    assert work(5_000) == "done"
    assert telemetry.section("decorated").max == pytest.approx(5e-6)

    started = model.start()
    clock.advance(3_000_000)
    model.stop(started)
    a, b = telemetry.section("a"), telemetry.section("b")
    t = clock()
    clock.advance(7_000)
    t = a.lap(t)
    clock.advance(11_000)
    b.lap(t)
    assert a.max == pytest.approx(7e-6) and b.max == pytest.approx(11e-6)
    assert model.count == 2 and model.sum == pytest.approx(5e-3)


def test_section_records_even_when_the_block_raises() -> None:
    clock = FakeClock()
    section = Telemetry(clock=clock).section("boom")
    with pytest.raises(RuntimeError), section:
        clock.advance(1_000_000)
        raise RuntimeError("x")
    assert section.count == 1


def test_disabled_telemetry_hands_out_no_ops_and_leaves_functions_untouched() -> None:
    telemetry = Telemetry(enabled=False)
    assert telemetry.section("a") is NOOP_SECTION is telemetry.section("b")

    def fn() -> int:
        return 1

    assert telemetry.section("a")(fn) is fn  # a wrapped call site costs nothing
    with telemetry.section("a"):
        pass
    telemetry.counter("c").inc()
    telemetry.gauge("g").set(3)
    telemetry.record("x", 0.1)
    assert telemetry.gpu_timer("gpu", event_factory=FakeEvent) is NOOP_GPU_TIMER
    snap = telemetry.snapshot()
    assert snap == {"enabled": False, "sections": {}, "counters": {}, "gauges": {}}


def test_counters_gauges_labels_and_the_snapshot() -> None:
    telemetry = Telemetry(clock=FakeClock())
    telemetry.counter("demotions", cause="overrun").inc()
    telemetry.counter("demotions", cause="overrun").inc(2)
    telemetry.gauge("robots").set(3)
    telemetry.record("model", 0.004, tier="graph")
    snap = telemetry.snapshot()
    json.dumps(snap)
    assert snap["counters"]["demotions{cause=overrun}"]["value"] == 3
    assert snap["gauges"]["robots"]["value"] == 3
    model = snap["sections"]["model{tier=graph}"]
    assert model["labels"] == {"tier": "graph"} and model["count"] == 1
    assert model["p50_s"] == pytest.approx(0.004, rel=0.016)
    assert model["help"] == BUILTIN_SECTIONS["model"]
    assert (
        "buckets" not in model
        and "buckets" in telemetry.snapshot(buckets=True)["sections"]["model{tier=graph}"]
    )
    telemetry.reset()
    assert telemetry.snapshot()["sections"]["model{tier=graph}"]["count"] == 0


def test_config_defaults_and_from_config() -> None:
    config = TelemetryConfig()
    assert config.enabled and config.cuda_events
    assert not Telemetry.from_config(TelemetryConfig(enabled=False)).enabled
    with pytest.raises(ValueError):
        TelemetryConfig(enabeld=True)  # type: ignore[call-arg]


# -- GPU timer, with fake CUDA events --------------------------------------------------------------


class FakeGpu:
    """A stream's clock: work finishes when the test says so."""

    now_ms = 0.0
    done_until = -1.0


class FakeEvent:
    def __init__(self) -> None:
        self.at: float | None = None

    def record(self, stream: object = None) -> None:
        self.at = FakeGpu.now_ms

    def query(self) -> bool:
        return self.at is not None and self.at <= FakeGpu.done_until

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("elapsed_time on an unfinished event would block")
        assert self.at is not None and end.at is not None
        return end.at - self.at

    def synchronize(self) -> None:
        raise AssertionError("the loop must never synchronize")


def test_gpu_timer_resolves_finished_pairs_later_without_waiting() -> None:
    FakeGpu.now_ms, FakeGpu.done_until = 0.0, -1.0
    telemetry = Telemetry(clock=FakeClock())
    timer = telemetry.gpu_timer("model_gpu", ring=3, event_factory=FakeEvent)
    assert isinstance(timer, GpuTimer)
    section = telemetry.section("model_gpu")
    assert isinstance(section, Section) and section.measured == "cuda_events"
    for duration in (1.0, 2.0):
        timer.begin()
        FakeGpu.now_ms += duration
        timer.end()
    assert timer.poll() == 2 and section.count == 0  # nothing finished: nothing recorded
    FakeGpu.done_until = 1.0  # the first pair is done
    assert timer.poll() == 1
    assert section.count == 1 and section.max == pytest.approx(1e-3)
    timer.begin()
    FakeGpu.now_ms += 4.0
    timer.end()
    timer.begin()  # now three pairs in flight: the ring is full
    timer.end()
    timer.begin()  # the ring is full of unfinished pairs: this step is not timed
    timer.end()
    assert timer.dropped == 1
    FakeGpu.done_until = 1e9
    assert timer.poll() == 0
    assert section.count == 4
    assert telemetry.snapshot()["sections"]["model_gpu"]["dropped"] == 1


def test_without_an_event_factory_the_gpu_timer_is_the_no_op_and_makes_no_section() -> None:
    telemetry = Telemetry(clock=FakeClock())
    assert telemetry.gpu_timer("model_gpu") is NOOP_GPU_TIMER  # the caller has no CUDA device
    assert Telemetry(cuda_events=False).gpu_timer("g", event_factory=FakeEvent) is NOOP_GPU_TIMER
    assert telemetry.snapshot()["sections"] == {}


def test_the_observe_package_imports_no_torch() -> None:
    """The control process's telemetry must not pull torch in, not even lazily: importing every
    module of controller.observe and using the GPU timer's paths leaves torch unimported."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import controller.observe as o\n"
        "for m in pkgutil.iter_modules(o.__path__):\n"
        "    importlib.import_module('controller.observe.' + m.name)\n"
        "from controller.observe.telemetry import Telemetry\n"
        "Telemetry().gpu_timer('model_gpu')\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# -- the status table ------------------------------------------------------------------------------


def status_dict() -> dict:
    telemetry = Telemetry(clock=FakeClock())
    for ms in (1.0, 2.0, 2.0, 5.0):  # 1, 2 and 5 ms are exact bucket bounds
        telemetry.record("model", ms / 1e3)
    telemetry.record("tick_lateness", 3e-6)
    return {
        "uptime_s": 3723.0,
        "control_hz": 50.0,
        "ticks": 186_150,
        "achieved_hz": 49.99,
        "missed_ticks": 3,
        "actions_sent": 186_000,
        "holds_sent": 12,
        "inferences": 186_000,
        "inference_failures": 1,
        "protocol_errors": {"shape": 2},
        "robots": [
            {
                "robot": "arm-left",
                "last_observation_age_ms": 4.1,
                "guard_state": "ok",
                "guards": {"velocity_limited": 3, "position_clamped": 0, "held_ticks": 40},
            },
            {
                "robot": "arm-right",
                "last_observation_age_ms": None,
                "guard_state": "hold",
                "guards": {},
            },
        ],
        "policy": {
            "tier": "compiled",
            "device": "cuda:0 (NVIDIA H200)",
            "tiers": [
                {"name": "graph", "precision": "fp16", "state": "ready"},
                {"name": "compiled", "precision": "fp16", "state": "ready"},
                {"name": "eager_fp32", "precision": "fp32", "state": "ready"},
            ],
            "demotions": [
                {
                    "time": 1.7e9,
                    "from_tier": "graph",
                    "to_tier": "compiled",
                    "cause": "overrun",
                    "detail": "3 of the last 20 steps took longer than 20.0 ms",
                }
            ],
            "promotions": [],
        },
        "telemetry": telemetry.snapshot(),
    }


def test_status_table_shows_what_an_operator_asks_first() -> None:
    text = render_status(status_dict())
    assert "uptime 1h02m03s" in text
    assert "49.99 / 50 Hz" in text and "missed 3" in text
    assert "policy compiled (fp16) on cuda:0 (NVIDIA H200); also ready: graph, eager_fp32" in text
    assert "demoted" in text and "graph -> compiled (overrun)" in text
    assert "guard interventions 3 (velocity_limited 3)" in text and "protocol errors 2" in text
    line = "query every 100 step(s), play the newest chunk (query_period from checkpoint)"
    assert f"execution: {line}" in render_status({**status_dict(), "execution": line})
    since_start = render_status({**status_dict(), "guard_interventions": {"non_finite": 5}})
    assert "guard interventions 5 (non_finite 5)" in since_start  # totals across disconnects
    model = next(line for line in text.splitlines() if line.startswith("model "))
    p50 = status_dict()["telemetry"]["sections"]["model"]["p50_s"]
    assert p50 == pytest.approx(2e-3, rel=0.016)
    assert "wall" in model and fmt_duration(p50) in model
    assert model.rstrip().endswith(fmt_duration(5e-3))  # max
    assert "tick_lateness" in text and "3.0 us" in text
    lines = text.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("model "))) < lines.index(
        next(x for x in lines if x.startswith("tick_lateness"))
    )  # built-in sections in path order
    left = next(line for line in lines if line.startswith("arm-left"))
    assert "4.10 ms" in left and "3 (velocity_limited 3)" in left
    right = next(line for line in lines if line.startswith("arm-right"))
    assert "never" in right and "hold" in right


def test_status_table_from_an_older_daemon_and_with_telemetry_off() -> None:
    legacy = {
        "uptime_s": 5.0,
        "control_hz": 50.0,
        "achieved_hz": 49.0,
        "ticks": 250,
        "missed_ticks": 0,
        "tick_lateness_us_p50": 2.0,
        "tick_lateness_us_p99": 9.0,
        "tick_lateness_us_max": 30.0,
        "inference_ms_p50": 1.5,
        "inference_ms_p99": 2.5,
        "obs_to_action_ms_p50": float("nan"),
        "obs_to_action_ms_p99": float("nan"),
        "robots": [],
    }
    text = render_status(legacy)
    assert "robots: none connected" in text
    lateness = next(line for line in text.splitlines() if line.startswith("tick_lateness"))
    assert "2.0 us" in lateness and "9.0 us" in lateness and "30.0 us" in lateness
    assert "1.50 ms" in text
    off = render_status({**legacy, "telemetry": {"enabled": False, "sections": {}}})
    assert "telemetry is off" in off
    assert "error" in render_status({"error": "the daemon could not build its status"})
