"""The one device timer: wall clock on a CPU (never synchronizing), CUDA event pairs on CUDA
(faked here: the events read a fake GPU clock and say when they were waited for)."""

from __future__ import annotations

import pytest

import controller.inference.device_timer as device_timer
from controller.inference.device_timer import DeviceTimer


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_on_a_cpu_it_reads_the_wall_clock_around_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(device_timer.time, "perf_counter_ns", clock)
    timer = DeviceTimer("cpu")
    assert not timer.cuda and timer.how == "wall clock" and timer.event_factory is None

    def work() -> str:
        clock.ns += 3_000_000
        return "chunk"

    assert timer.time(work) == ("chunk", pytest.approx(0.003))
    steps = iter([1_000, 2_000, 5_000])

    def varied() -> None:
        clock.ns += next(steps)

    assert timer.time_each(varied, 3) == pytest.approx([1e-6, 2e-6, 5e-6])
    span = timer.span()
    span.begin()
    clock.ns += 7_000
    span.end()
    clock.ns += 1_000_000  # after end: not counted
    assert span.seconds() == pytest.approx(7e-6)


class FakeGpu:
    now_ms = 0.0
    waits = 0
    recorded = 0
    recorded_at_first_wait: int | None = None


class FakeEvent:
    def __init__(self) -> None:
        self.at: float | None = None
        self.waited = False

    def record(self, stream: object = None) -> None:
        self.at = FakeGpu.now_ms
        FakeGpu.recorded += 1

    def synchronize(self) -> None:
        self.waited = True
        FakeGpu.waits += 1
        if FakeGpu.recorded_at_first_wait is None:
            FakeGpu.recorded_at_first_wait = FakeGpu.recorded

    def elapsed_time(self, end: FakeEvent) -> float:
        if not end.waited:
            raise RuntimeError("elapsed_time before the end event has happened")
        assert self.at is not None and end.at is not None
        return end.at - self.at


def test_on_cuda_it_records_event_pairs_and_reads_them_after_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device_timer, "_cuda_event", FakeEvent)
    FakeGpu.now_ms, FakeGpu.waits, FakeGpu.recorded = 0.0, 0, 0
    FakeGpu.recorded_at_first_wait = None
    timer = DeviceTimer("cuda:0")  # torch.device only: no CUDA device is touched
    assert timer.cuda and timer.how == "CUDA events"
    assert timer.event_factory is FakeEvent  # what telemetry's GpuTimer ring is built from
    durations = iter([2.0, 0.5, 4.0])

    def work() -> None:
        FakeGpu.now_ms += next(durations)

    samples = timer.time_each(work, 3)
    assert samples == pytest.approx([2e-3, 0.5e-3, 4e-3])
    assert FakeGpu.recorded_at_first_wait == 6  # all three pairs queued before the first wait
    FakeGpu.now_ms += 10.0  # between calls: not counted
    durations = iter([1.5])
    assert timer.time(work)[1] == pytest.approx(1.5e-3)
