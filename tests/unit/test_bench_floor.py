"""scripts.soak.bench_floor reads cyclictest's histogram into the percentiles it compares."""

from __future__ import annotations

import pytest

from scripts.soak import bench_floor


def _output(counts: dict[int, int], overflows: int, maximum: int) -> str:
    lines = ["# /dev/cpu_dma_latency set to 0us", "# Histogram"]
    lines += [f"{us:06d} {counts.get(us, 0):06d}" for us in range(60)]
    lines += [
        f"# Total: {sum(counts.values()) + overflows:09d}",
        "# Min Latencies: 00003",
        f"# Max Latencies: {maximum:05d}",
        f"# Histogram Overflows: {overflows:05d}",
    ]
    return "\n".join(lines) + "\n"


def test_percentiles_come_from_the_histogram_counts() -> None:
    floor = bench_floor.parse_histogram(_output({5: 90, 10: 9, 50: 1}, 0, 50))
    assert floor == {"wakeups": 100.0, "p50_us": 5.0, "p99_us": 10.0, "max_us": 50.0}


def test_overflows_count_as_wakeups_past_the_histogram() -> None:
    floor = bench_floor.parse_histogram(_output({5: 97}, 3, 31_000))
    assert floor["wakeups"] == 100.0
    assert floor["p99_us"] == bench_floor.HISTOGRAM_US  # the overflows reach the 99th percentile
    assert floor["max_us"] == 31_000.0


def test_output_without_a_histogram_is_refused() -> None:
    with pytest.raises(ValueError, match="no histogram"):
        bench_floor.parse_histogram("cyclictest: invalid option\n")
