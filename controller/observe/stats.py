"""Fixed-size sample windows for the live figures (latency, tick lateness).

Preallocated numpy rings: recording a sample is one store, no allocation. Percentiles are computed
only when someone asks (status requests, summaries), never per tick.
"""

from __future__ import annotations

import numpy as np


class SampleWindow:
    """The last `capacity` samples of one quantity."""

    def __init__(self, capacity: int = 4096) -> None:
        self._values = np.zeros(capacity, dtype=np.float64)
        self._next = 0
        self.count = 0  # total recorded, including overwritten ones

    def record(self, value: float) -> None:
        self._values[self._next] = value
        self._next = (self._next + 1) % len(self._values)
        self.count += 1

    def values(self) -> np.ndarray:
        return self._values[: min(self.count, len(self._values))].copy()

    def percentiles(self, *qs: float) -> list[float]:
        data = self.values()
        if data.size == 0:
            return [float("nan")] * len(qs)
        return [float(v) for v in np.percentile(data, qs)]

    def max(self) -> float:
        data = self.values()
        return float(data.max()) if data.size else float("nan")
