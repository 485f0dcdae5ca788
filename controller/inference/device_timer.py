"""How long work takes on the device it runs on: CUDA events on a CUDA device, else wall clock.

    timer = DeviceTimer(device)
    out, seconds = timer.time(tier.run)              # one call; waits for its end on CUDA
    samples = timer.time_each(tier.run, 200)         # every call recorded, one wait at the end
    span = timer.span(); span.begin(); ...; span.end(); span.seconds()   # a reusable pair

On a CPU the work runs synchronously, so `time.perf_counter_ns` around it is its time and nothing
is synchronized. On CUDA a span is a pair of timing events recorded on the current stream, and
reading its seconds waits for the end event: for tools and start-up, never the serving step.
Telemetry's `GpuTimer` (controller.observe.gpu_timing), which never waits, takes its events from
`event_factory`: the control process's packages never import torch, so the factory comes from
here, the inference process's side.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def _cuda_event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


class Span:
    """One begin/end pair, reusable: `begin()`, the work, `end()`, then `seconds()`."""

    __slots__ = ("_cuda", "_begin", "_end")

    def __init__(self, cuda: bool) -> None:
        self._cuda = cuda
        self._begin: Any = _cuda_event() if cuda else 0
        self._end: Any = _cuda_event() if cuda else 0

    def begin(self) -> None:
        if self._cuda:
            self._begin.record()
        else:
            self._begin = time.perf_counter_ns()

    def end(self) -> None:
        if self._cuda:
            self._end.record()
        else:
            self._end = time.perf_counter_ns()

    def seconds(self) -> float:
        """The time from `begin` to `end`; on CUDA, waits until the end event has happened."""
        if self._cuda:
            self._end.synchronize()
            return float(self._begin.elapsed_time(self._end)) / 1e3
        return (self._end - self._begin) / 1e9


class DeviceTimer:
    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.how = "CUDA events" if self.cuda else "wall clock"  # for tables: how a row was timed
        self._span: Span | None = None

    @property
    def event_factory(self) -> Callable[[], Any] | None:
        """Makes one CUDA timing event (for telemetry's GpuTimer ring); None off CUDA."""
        return _cuda_event if self.cuda else None

    def span(self) -> Span:
        return Span(self.cuda)

    def time(self, work: Callable[[], T]) -> tuple[T, float]:
        """(what `work` returned, its seconds), through one span this timer reuses."""
        span = self._span
        if span is None:
            span = self._span = self.span()
        span.begin()
        out = work()
        span.end()
        return out, span.seconds()

    def time_each(self, work: Callable[[], object], iterations: int) -> list[float]:
        """Seconds of each of `iterations` calls of `work`, back to back; on CUDA every pair is
        recorded first and read after a single wait, so the calls queue as in serving."""
        spans = [self.span() for _ in range(iterations)]
        for span in spans:
            span.begin()
            work()
            span.end()
        return [span.seconds() for span in spans]
