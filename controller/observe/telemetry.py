"""Named timing sections, counters and gauges for the daemon's hot path.

    telemetry = Telemetry()                              # enabled; Telemetry(enabled=False): off
    model = telemetry.section(MODEL)                     # look up once, at construction
    with model:                                          # context manager ...
        tier.run()
    handle = telemetry.section(RECEIVE)(dispatcher.handle)   # ... or a wrapper / decorator
    t0 = model.start(); ...; model.stop(t0)              # ... or explicit, inside a tick
    telemetry.counter("demotions", cause="overrun").inc()
    telemetry.gauge("robots_connected").set(2)
    telemetry.snapshot()                                 # JSON-able dict for the status socket

Every section (controller.observe.instruments) records into its own preallocated `Histogram`:
entering and leaving a section reads the clock twice and stores one value in a preallocated
ring, which is folded into the bucket counts every couple of hundred records; no allocation per
record.

Off means off. A disabled `Telemetry` hands out one shared no-op object for every section,
counter and gauge, and wrapping a function (`section(name)(fn)`) returns `fn` itself, so a
wrapped call site costs nothing. Code that times inline blocks checks `telemetry.enabled` once,
when it is built, and keeps the result in an attribute:

    self._timed = telemetry.enabled                      # in __init__
    if self._timed: t0 = self._clock()                   # in the tick: one bool test when off
    ...
    if self._timed: self._t_guards.stop(t0)

GPU work is timed with CUDA event pairs (`gpu_timer`): `begin`/`end` record events on the
stream, and finished pairs are turned into durations later with `event.query()`, never
`synchronize()`, so timing never makes the loop wait for the GPU (controller.observe.gpu_timing).
The events come from the caller's factory (controller.inference.device_timer): this package is
the control process's too, and imports no torch.

Threads: each section, counter and gauge has one writer thread (the one whose code it times).
`snapshot()` may run on any thread and sees values at most a record or two old.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controller.observe.gpu_timing import NOOP_GPU_TIMER, GpuTimer, _NoopGpuTimer
from controller.observe.instruments import (
    NOOP_METRIC,
    NOOP_SECTION,
    Clock,
    Counter,
    Gauge,
    NoopMetric,
    NoopSection,
    Section,
)

# The built-in sections' names, re-exported: section_names has no pydantic, so that `tempo
# status` renders them on a driver's install.
from controller.observe.section_names import (  # noqa: F401
    BUILTIN_SECTIONS,
    ENSEMBLER,
    GC_PAUSE,
    GUARDS,
    INFERENCE,
    MAILBOX_WAIT,
    MODEL,
    MODEL_GPU,
    OBS_TO_ACTION,
    POSTPROCESS,
    PREPROCESS,
    PROCESS_STEP,
    RECEIVE,
    SEND,
    TICK,
    TICK_LATENESS,
    UPLOAD,
)


class TelemetryConfig(BaseModel):
    """Timing of the daemon's hot path (for `tempo status` and /metrics)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Time the built-in sections (receive, upload, model, ensembler, guards, "
        "send, tick lateness, observation-to-action ...) into fixed-size histograms. Costs "
        "about 14 us per control step on a slow 2-core CPU: 0.07% of a 20 ms period, 0.1-0.3% "
        "of an ACT step, 2.5% of a 0.55 ms tiny-policy step (scripts/bench/bench_telemetry.py). "
        "false removes the timing code from the hot path, and with it every duration in `tempo "
        "status` (tick lateness, latency and inference figures are then empty).",
    )
    cuda_events: bool = Field(
        default=True,
        description="On CUDA, also time the model on the GPU with CUDA events, read later "
        "without synchronizing (section model_gpu).",
    )


def series_key(name: str, labels: dict[str, str]) -> str:
    """`name` or `name{a=x,b=y}` (labels sorted): the key of one series in a snapshot."""
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={labels[k]}" for k in sorted(labels)) + "}"


# -- the registry ----------------------------------------------------------------------------------


class Telemetry:
    """Sections, counters and gauges by name (and optional labels), created on first use.

    Look them up once, where the code that uses them is built; lookups take a dict access and
    creating one allocates its histogram (~10 KB), neither of which belongs in a tick.
    """

    def __init__(
        self, enabled: bool = True, clock: Clock = time.perf_counter_ns, cuda_events: bool = True
    ) -> None:
        self.enabled = enabled
        self.cuda_events = cuda_events
        self.clock = clock
        self._sections: dict[str, Section] = {}
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Gauge] = {}
        self._gpu: dict[str, GpuTimer] = {}

    @classmethod
    def from_config(cls, config: TelemetryConfig) -> Telemetry:
        return cls(enabled=config.enabled, cuda_events=config.cuda_events)

    def now(self) -> int:
        return self.clock()

    def section(self, name: str, **labels: str) -> Section | NoopSection:
        """The section `name` (created on first use); the shared no-op when disabled."""
        if not self.enabled:
            return NOOP_SECTION
        key = series_key(name, labels)
        found = self._sections.get(key)
        if found is None:
            found = self._sections[key] = Section(name, dict(labels), self.clock)
        return found

    def record(self, name: str, seconds: float, **labels: str) -> None:
        """Record a duration into section `name` (a lookup per call: for code off the hot path;
        hot code keeps the Section and calls `record_ns` on it)."""
        self.section(name, **labels).record(seconds)

    def record_ns(self, name: str, ns: int, **labels: str) -> None:
        self.section(name, **labels).record_ns(ns)

    def counter(self, name: str, **labels: str) -> Counter | NoopMetric:
        if not self.enabled:
            return NOOP_METRIC
        key = series_key(name, labels)
        found = self._counters.get(key)
        if found is None:
            found = self._counters[key] = Counter(name, dict(labels))
        return found

    def gauge(self, name: str, **labels: str) -> Gauge | NoopMetric:
        if not self.enabled:
            return NOOP_METRIC
        key = series_key(name, labels)
        found = self._gauges.get(key)
        if found is None:
            found = self._gauges[key] = Gauge(name, dict(labels))
        return found

    def gpu_timer(
        self,
        name: str,
        ring: int = 16,
        event_factory: Callable[[], Any] | None = None,
        **labels: str,
    ) -> GpuTimer | _NoopGpuTimer:
        """A CUDA-event timer recording into section `name`, its events made by `event_factory`
        (the caller's: controller.inference.device_timer, as this package imports no torch); the
        no-op when telemetry or `cuda_events` is off, or without a factory (no CUDA device)."""
        if not (self.enabled and self.cuda_events) or event_factory is None:
            return NOOP_GPU_TIMER
        key = series_key(name, labels)
        found = self._gpu.get(key)
        if found is None:
            section = self.section(name, **labels)
            if not isinstance(section, Section):  # unreachable: enabled was checked
                return NOOP_GPU_TIMER
            section.measured = "cuda_events"
            found = self._gpu[key] = GpuTimer(section, ring, event_factory)
        return found

    def reset(self) -> None:
        """Zero every histogram and counter (call while nothing records, e.g. between runs)."""
        for section in list(self._sections.values()):
            section.histogram.reset()
        for counter in list(self._counters.values()):
            counter.value = 0

    def snapshot(self, buckets: bool = False) -> dict[str, Any]:
        """JSON-able state for the status socket and /metrics:

            {"enabled": bool,
             "sections": {key: {"name", "labels", "measured", "help", "count", "sum_s",
                                "mean_s", "min_s", "max_s", "p50_s", "p90_s", "p99_s",
                                ["buckets": [[upper_ns | None, count], ...]], ["dropped"]}},
             "counters": {key: {"name", "labels", "value"}},
             "gauges":   {key: {"name", "labels", "value"}}}

        Safe from any thread (see the module docstring); buckets=True for /metrics only.
        """
        sections: dict[str, Any] = {}
        for key, section in list(self._sections.items()):
            entry = {
                "name": section.name,
                "labels": dict(section.labels),
                "measured": section.measured,
                "help": BUILTIN_SECTIONS.get(section.name, ""),
            }
            entry.update(section.histogram.snapshot(buckets=buckets))
            sections[key] = entry
        for key, timer in list(self._gpu.items()):
            if key in sections:
                sections[key]["dropped"] = timer.dropped
        return {
            "enabled": self.enabled,
            "sections": sections,
            "counters": {
                key: {"name": c.name, "labels": dict(c.labels), "value": c.value}
                for key, c in list(self._counters.items())
            },
            "gauges": {
                key: {"name": g.name, "labels": dict(g.labels), "value": g.value}
                for key, g in list(self._gauges.items())
            },
        }
