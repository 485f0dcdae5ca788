"""Timing GPU work with CUDA event pairs, never waiting for the GPU (see `GpuTimer`).

Made through `Telemetry.gpu_timer(name, event_factory=...)`, which hands out `NOOP_GPU_TIMER` when
telemetry or `telemetry.cuda_events` is off, or when the caller has no event factory (no CUDA
device). The factory comes from the caller, the inference process's side
(controller.inference.device_timer): this package never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.observe.instruments import Section


class GpuTimer:
    """Times GPU work with CUDA event pairs, without ever waiting for the GPU.

        timer = telemetry.gpu_timer(MODEL_GPU, event_factory=DeviceTimer(device).event_factory)
        timer.begin(stream); tier.run(); timer.end(stream)   # records two events, returns at once

    Pairs go into a ring of `ring` preallocated pairs. Every `begin` (and `poll`) first resolves
    the pairs whose end event has completed (`event.query()`, non-blocking) into the histogram,
    oldest first, so a duration shows up at most a step or two after the work. If the ring is
    full of unfinished pairs (the GPU is more than `ring` steps behind), that step is not timed
    and `dropped` counts it. Call from one thread (the one that enqueues the work), never inside
    a CUDA graph capture.

    event_factory: makes one timing event (`torch.cuda.Event(enable_timing=True)` in serving);
    tests pass fakes with `record(stream)`, `query()` and `elapsed_time(other)` (ms).
    """

    def __init__(
        self,
        section: Section,
        ring: int,
        event_factory: Callable[[], Any],
    ) -> None:
        if ring < 1:
            raise ValueError("a GpuTimer needs a ring of at least one event pair")
        self.section = section
        self._ring = ring
        self._begin = [event_factory() for _ in range(ring)]
        self._end = [event_factory() for _ in range(ring)]
        self._head = 0  # pairs begun and ended
        self._tail = 0  # pairs resolved
        self._skipping = False
        self.dropped = 0

    def begin(self, stream: Any = None) -> None:
        self.poll()
        if self._head - self._tail >= self._ring:
            self._skipping = True
            self.dropped += 1
            return
        self._begin[self._head % self._ring].record(stream)

    def end(self, stream: Any = None) -> None:
        if self._skipping:
            self._skipping = False
            return
        self._end[self._head % self._ring].record(stream)
        self._head += 1

    def poll(self) -> int:
        """Resolve finished pairs into the histogram; returns how many are still pending."""
        record = self.section.histogram.record_ns
        while self._tail < self._head:
            slot = self._tail % self._ring
            end = self._end[slot]
            if not end.query():
                break
            record(int(self._begin[slot].elapsed_time(end) * 1e6))
            self._tail += 1
        return self._head - self._tail

    def __enter__(self) -> GpuTimer:
        self.begin()
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()


class _NoopGpuTimer:
    __slots__ = ()
    dropped = 0

    def begin(self, stream: Any = None) -> None:
        return None

    def end(self, stream: Any = None) -> None:
        return None

    def poll(self) -> int:
        return 0

    def __enter__(self) -> _NoopGpuTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


NOOP_GPU_TIMER = _NoopGpuTimer()
