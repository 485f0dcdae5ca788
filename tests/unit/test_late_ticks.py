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
    assert ticks.as_dict() == {
        "over_us": 100, "count": 3, "preempted": 1, "idle_overran": 1,
        "idle_overran_by": {"?": 1},
    }  # fmt: skip


def test_an_overrun_is_put_down_to_the_longest_step_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(late_ticks, "_involuntary_switches", lambda: 0)
    ticks = LateTicks(threshold_ns=100_000)
    ticks.record(300_000, 200_000, ("handle", 1_500_000), last_tick_ns=80_000)
    ticks.record(300_000, 200_000, ("wait", 900_000), last_tick_ns=4_000_000)
    ticks.record(300_000, 0, ("wait", 900_000), last_tick_ns=0)  # late in the spin: no overrun
    assert ticks.idle_overran_by == {"handle": 1, "tick": 1}


def test_the_real_counter_reads_this_thread() -> None:
    assert late_ticks._involuntary_switches() >= 0
