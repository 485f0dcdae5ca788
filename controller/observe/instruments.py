"""The instruments Telemetry hands out: `Section` (a Histogram that times a stretch of code,
as a context manager, a wrapper or explicit start/stop), `Counter` and `Gauge`, and the shared
no-op ones a disabled Telemetry hands out instead, so that off costs nothing at the call site.
Created and looked up by name only through controller.observe.telemetry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from controller.observe.histogram import Histogram

F = TypeVar("F", bound=Callable[..., Any])
Clock = Callable[[], int]  # nanoseconds, monotonic


class Section(Histogram):
    """One named, timed stretch of code: a Histogram that can time itself.

    Not re-entrant as a context manager (one start slot): nest different sections, not the same
    one; the wrapper form keeps its start time local and is safe under recursion. Recording is
    inlined in `__exit__`, `stop` and `lap` (a call less than going through `record_ns`).
    """

    __slots__ = ("name", "labels", "measured", "_clock", "_start")

    def __init__(
        self, name: str, labels: dict[str, str], clock: Clock, measured: str = "wall"
    ) -> None:
        super().__init__()
        self.name = name
        self.labels = labels
        self.measured = measured
        self._clock = clock
        self._start = 0

    @property
    def histogram(self) -> Histogram:
        return self

    def __enter__(self) -> Section:
        self._start = self._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        ns = self._clock() - self._start
        # The ring push is written out here, in stop() and in lap() rather than calling
        # record_ns: one Python call less per record is ~0.1 us on the tick's path.
        i = self._i
        self._ring[i] = ns
        if i == self._last:
            self._fold()
        else:
            self._i = i + 1

    def __call__(self, fn: F) -> F:
        """Wrap `fn` so every call is timed (the start time is local: safe under recursion)."""
        clock, record = self._clock, self.record_ns

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                record(clock() - started)

        return timed  # type: ignore[return-value]

    def start(self) -> int:
        """The clock now; pass it to `stop` or `lap`."""
        return self._clock()

    def stop(self, started: int) -> None:
        ns = self._clock() - started
        i = self._i
        self._ring[i] = ns
        if i == self._last:
            self._fold()
        else:
            self._i = i + 1

    def lap(self, started: int) -> int:
        """Record now - started and return now: back-to-back sections share clock reads,
        `t = a.lap(t); ...; t = b.lap(t)`."""
        now = self._clock()
        i = self._i
        self._ring[i] = now - started
        if i == self._last:
            self._fold()
        else:
            self._i = i + 1
        return now


class NoopSection:
    """What a disabled Telemetry hands out: does nothing, and wrapping returns `fn` itself."""

    __slots__ = ()
    name = ""
    measured = "off"

    def __enter__(self) -> NoopSection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, fn: F) -> F:
        return fn

    def start(self) -> int:
        return 0

    def stop(self, started: int) -> None:
        return None

    def lap(self, started: int) -> int:
        return 0

    def record_ns(self, ns: int) -> None:
        return None

    def record(self, seconds: float) -> None:
        return None


NOOP_SECTION = NoopSection()


class Counter:
    """A monotonically increasing count (exported as `<name>_total`)."""

    __slots__ = ("name", "labels", "value")

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name, self.labels = name, labels
        self.value: float = 0

    def inc(self, n: float = 1) -> None:
        self.value += n


class Gauge:
    """A value that goes up and down (last write wins)."""

    __slots__ = ("name", "labels", "value")

    def __init__(self, name: str, labels: dict[str, str]) -> None:
        self.name, self.labels, self.value = name, labels, 0.0

    def set(self, value: float) -> None:
        self.value = value


class NoopMetric:
    __slots__ = ()
    value = 0

    def inc(self, n: float = 1) -> None:
        return None

    def set(self, value: float) -> None:
        return None


NOOP_METRIC = NoopMetric()
