"""The percentile summary of a list of measured times, for benchmark and profile tables.

    s = summarize(seconds, scale=1e3)       # the same figures in ms
    s.p50, s.p99, s.mean, s.max, s.count
    s.as_dict()                             # {"count", "mean", "p50", "p90", "p99", "min", "max"}
                                            # (None for each figure when there are no samples)

Exact, from every sample (numpy's default, linear interpolation between order statistics); the
caller picks the unit by `scale`, which multiplies every figure but the count. Telemetry's
streaming histogram (controller.observe.histogram) is a different thing: fixed buckets filled on
the hot path, percentiles to within a bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Summary:
    """Figures of a set of samples, in the unit `summarize` was asked for; NaN with no samples."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float

    def as_dict(self, suffix: str = "") -> dict[str, float | int | None]:
        """Every figure by name (`suffix` appended to each but the count: "_ms" -> "p50_ms"),
        None for no samples (JSON has no NaN)."""
        out: dict[str, float | int | None] = {"count": self.count}
        for key, value in asdict(self).items():
            if key != "count":
                out[key + suffix] = value if self.count else None
        return out


def summarize(samples: Sequence[float] | np.ndarray, scale: float = 1.0) -> Summary:
    """count, mean, p50, p90, p99, min and max of `samples`, each times `scale` (1e3: seconds
    -> ms, 1e-3: ns -> us)."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        nan = float("nan")
        return Summary(0, nan, nan, nan, nan, nan, nan)
    if scale != 1.0:
        values = values * scale
    p50, p90, p99 = np.percentile(values, (50, 90, 99))
    return Summary(
        count=int(values.size),
        mean=float(values.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        min=float(values.min()),
        max=float(values.max()),
    )
