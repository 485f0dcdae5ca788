"""Late ticks are counted, and told apart by whether the OS switched the loop's thread out."""

from __future__ import annotations

import pytest

from controller.observe import late_ticks
from controller.observe.late_ticks import LateTicks


def test_late_ticks_count_only_those_over_the_threshold_and_tell_preemption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    switches = iter([0, 0, 1, 1, 3])  # involuntary switches seen at each tick
    monkeypatch.setattr(late_ticks, "_involuntary_switches", lambda: next(switches))
    ticks = LateTicks(threshold_ns=100_000)
    for lateness_ns, overrun_ns in ((5_000, 0), (250_000, 0), (300_000, 0), (150_000, 40_000),
                                    (90_000, 0)):  # fmt: skip
        ticks.record(lateness_ns, overrun_ns)
    # late: the 2nd (no switch since the 1st, the spin started in time), the 3rd (switched
    # out), the 4th (its idle work ran past the deadline); the 5th was switched out but on time.
    assert ticks.as_dict() == {"over_us": 100, "count": 3, "preempted": 1, "idle_overran": 1}


def test_the_real_counter_reads_this_thread() -> None:
    assert late_ticks._involuntary_switches() >= 0
