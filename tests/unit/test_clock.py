"""The Pacer on a fake clock: absolute deadlines, sleep-then-spin, lateness, skipped ticks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.daemon.pacer import MonotonicClock, Pacer

PERIOD = 5_000_000  # 200 Hz
SPIN = 1_000_000
START = 10_000_000_000


class FakeClock:
    """Time moves only when the code under test reads it or sleeps.

    Every `now_ns()` read costs `read_cost_ns` (so a spin loop makes progress), and every sleep
    wakes `oversleep_ns` late, like an OS sleep.
    """

    def __init__(self, start_ns: int = START, read_cost_ns: int = 100, oversleep_ns: int = 0):
        self.t = start_ns
        self.read_cost_ns = read_cost_ns
        self.oversleep_ns = oversleep_ns
        self.reads = 0
        self.sleeps: list[int] = []

    def now_ns(self) -> int:
        now = self.t
        self.t += self.read_cost_ns
        self.reads += 1
        return now

    def sleep_until(self, deadline_ns: int) -> None:
        self.sleeps.append(deadline_ns)
        self.t = max(self.t, deadline_ns + self.oversleep_ns)

    def work(self, ns: int) -> None:
        """The tick's own work (or a stall) takes this long."""
        self.t += ns

    def jump_to(self, t: int) -> None:
        """A stall that ends at exactly `t`."""
        assert t >= self.t
        self.t = t


class RecordingIdle:
    """An idle hook (the daemon polls its socket here) that records what it was asked."""

    def __init__(self, clock: FakeClock, fraction: float = 1.0) -> None:
        self.clock = clock
        self.fraction = fraction  # how much of the slack each call uses (< 1: returns early)
        self.calls: list[int] = []

    def __call__(self, until_ns: int) -> None:
        self.calls.append(until_ns)
        slack = until_ns - self.clock.t
        self.clock.t += max(1, int(slack * self.fraction))


def test_period_must_be_positive():
    with pytest.raises(ValueError, match="period_ns"):
        Pacer(0)
    with pytest.raises(ValueError, match="period_ns"):
        Pacer(-5)


def test_start_sets_the_deadline_of_step_zero():
    clock = FakeClock()
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    assert pacer.start_ns == START
    assert pacer.deadline_of(0) == START
    assert pacer.deadline_of(3) == START + 3 * PERIOD
    pacer.start(START + 123)
    assert pacer.deadline_of(2) == START + 123 + 2 * PERIOD


def test_ten_thousand_ticks_land_on_absolute_deadlines_without_drift():
    # Sleep wakes 200 us late, each tick's work takes 0.5..3.5 ms: a relative sleep would drift
    # by seconds over 10,000 ticks. Absolute deadlines plus a 1 ms spin land within one clock
    # read of every deadline.
    clock = FakeClock(read_cost_ns=2_500, oversleep_ns=200_000)
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    jitter = random.Random(7)
    lateness = []
    for expected_step in range(10_000):
        step = pacer.wait()
        returned_at = clock.t - clock.read_cost_ns  # the read that ended the spin
        assert step == expected_step
        assert returned_at == pacer.deadline_of(step) + pacer.last_lateness_ns
        lateness.append(pacer.last_lateness_ns)
        clock.work(jitter.randrange(500_000, 3_500_000))
    assert pacer.missed_ticks == 0
    # (Step 0 is late by the one read `start()` made.)
    assert 0 <= min(lateness) and max(lateness) <= clock.read_cost_ns
    assert pacer.deadline_of(9_999) == START + 9_999 * PERIOD
    # The last tick is still within one clock read of its absolute deadline.
    assert abs(returned_at - (START + 9_999 * PERIOD)) < clock.read_cost_ns


def test_sleep_stops_spin_ns_before_the_deadline_and_the_spin_covers_the_rest():
    clock = FakeClock(read_cost_ns=1_000)
    idle = RecordingIdle(clock)
    pacer = Pacer(PERIOD, SPIN, clock=clock, idle=idle)
    pacer.start()
    pacer.wait()  # step 0: its deadline is now
    clock.work(1_500_000)

    reads_before = clock.reads
    step = pacer.wait()

    assert step == 1
    assert idle.calls == [pacer.deadline_of(1) - SPIN]
    # After the idle hook returned at deadline - spin, the pacer read the clock until the
    # deadline: about spin / read_cost reads, and it stopped at the first read past it.
    assert clock.reads - reads_before >= SPIN // clock.read_cost_ns
    assert 0 <= pacer.last_lateness_ns < clock.read_cost_ns


def test_the_default_idle_is_the_clock_sleep():
    clock = FakeClock()
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    pacer.wait()
    pacer.wait()
    assert clock.sleeps == [pacer.deadline_of(1) - SPIN]


def test_an_idle_hook_that_returns_early_is_called_again_until_the_spin_starts():
    clock = FakeClock()
    idle = RecordingIdle(clock, fraction=0.5)  # e.g. a poll that returns when a message comes
    pacer = Pacer(PERIOD, SPIN, clock=clock, idle=idle)
    pacer.start()
    pacer.wait()
    idle.calls.clear()

    pacer.wait()

    assert len(idle.calls) > 1
    assert set(idle.calls) == {pacer.deadline_of(1) - SPIN}
    assert 0 <= pacer.last_lateness_ns < clock.read_cost_ns


def test_no_idle_when_the_tick_is_already_inside_the_spin_window():
    clock = FakeClock()
    idle = RecordingIdle(clock)
    pacer = Pacer(PERIOD, SPIN, clock=clock, idle=idle)
    pacer.start()
    pacer.wait()
    clock.work(PERIOD - SPIN // 2)  # work ran into the last half millisecond

    assert pacer.wait() == 1
    assert idle.calls == []
    assert 0 <= pacer.last_lateness_ns < clock.read_cost_ns


def test_a_late_wake_is_reported_as_lateness():
    clock = FakeClock(oversleep_ns=SPIN + 300_000)  # the OS sleep overshot the whole spin
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    pacer.wait()

    assert pacer.wait() == 1
    assert pacer.last_lateness_ns == 300_000
    assert pacer.missed_ticks == 0


def test_work_that_overruns_part_of_a_period_makes_that_tick_late_not_missed():
    clock = FakeClock()
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    pacer.wait()
    clock.jump_to(pacer.deadline_of(1) + 2_000_000)  # step 1's deadline passed 2 ms ago

    assert pacer.wait() == 1
    assert pacer.last_lateness_ns == 2_000_000
    assert pacer.missed_ticks == 0


def test_a_stall_of_several_periods_is_counted_and_skipped_without_a_burst():
    clock = FakeClock(read_cost_ns=10)
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    assert pacer.wait() == 0
    clock.jump_to(pacer.deadline_of(3) + PERIOD // 2)  # stalled: steps 1 and 2 are gone

    # The tick whose period is running now (step 3, half a period late) goes out once...
    assert pacer.wait() == 3
    assert pacer.missed_ticks == 2
    assert pacer.last_lateness_ns == PERIOD // 2
    # ...and the next one waits for its own deadline: no catching up.
    assert pacer.wait() == 4
    returned_at = clock.t - clock.read_cost_ns
    assert pacer.deadline_of(4) <= returned_at < pacer.deadline_of(4) + clock.read_cost_ns
    assert pacer.missed_ticks == 2
    assert pacer.wait() == 5
    assert pacer.missed_ticks == 2


def test_a_stall_of_whole_periods_skips_to_the_tick_due_now():
    clock = FakeClock(read_cost_ns=10)
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    pacer.wait()
    clock.jump_to(pacer.deadline_of(4))  # now is exactly step 4's deadline

    assert pacer.wait() == 4
    assert pacer.missed_ticks == 3
    assert pacer.last_lateness_ns == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 6 * PERIOD), min_size=1, max_size=60))
def test_every_tick_runs_within_its_own_period_and_skips_are_counted(work):
    clock = FakeClock(read_cost_ns=500, oversleep_ns=150_000)
    pacer = Pacer(PERIOD, SPIN, clock=clock)
    pacer.start()
    previous = pacer.wait()
    for duration in work:
        clock.work(duration)
        step = pacer.wait()
        returned_at = clock.t - clock.read_cost_ns
        assert step > previous
        # Within its own period: two ticks can never go out for one period (no burst).
        assert pacer.deadline_of(step) <= returned_at < pacer.deadline_of(step + 1)
        assert 0 <= pacer.last_lateness_ns < PERIOD
        previous = step
    assert pacer.missed_ticks == previous - len(work)


def test_monotonic_clock_reads_and_sleeps():
    clock = MonotonicClock()
    before = clock.now_ns()
    clock.sleep_until(before - 1_000_000)  # in the past: returns at once
    clock.sleep_until(clock.now_ns() + 1_000_000)
    assert clock.now_ns() - before >= 1_000_000
