"""Pacing on absolute deadlines: sleep until shortly before each tick, then spin.

OS sleep wakes 0.1-0.2 ms late on these machines; spinning the last stretch lands within a few
microseconds, but only a short stretch: a thread that spins long is preempted across its
deadline when the machine is busy (p99 0.9 ms late spinning 1 ms, 50 us spinning 0.1 ms, on an
H100 host beside two busy processes; scripts/soak/bench_floor.py). Deadlines are absolute
multiples of the period from the start, so error never accumulates. A tick that is missed
entirely is counted and skipped, never made up with a burst. The clock is injectable so that
tests run on a fake one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int: ...

    def sleep_until(self, deadline_ns: int) -> None:
        """Sleep (without spinning) until about `deadline_ns`; may return early, never much late."""
        ...


class MonotonicClock:
    def now_ns(self) -> int:
        return time.monotonic_ns()

    def sleep_until(self, deadline_ns: int) -> None:
        remaining = deadline_ns - time.monotonic_ns()
        if remaining > 0:
            time.sleep(remaining / 1e9)


class Pacer:
    """Yields control steps at a fixed period.

    `idle(until_ns)` is called with the slack before each tick (the daemon polls its socket there);
    it must return by `until_ns`. The last `spin_ns` before each deadline are spun.
    """

    def __init__(
        self,
        period_ns: int,
        spin_ns: int = 100_000,
        clock: Clock | None = None,
        idle: Callable[[int], None] | None = None,
    ) -> None:
        if period_ns <= 0:
            raise ValueError("period_ns must be positive")
        self.period_ns = period_ns
        self.spin_ns = spin_ns
        self.clock = clock or MonotonicClock()
        self._idle = idle or self.clock.sleep_until
        self.start_ns = 0
        self.step = 0
        self.missed_ticks = 0
        self.last_lateness_ns = 0
        self.last_idle_overrun_ns = 0  # how far past the deadline the idle work had run (0: not)

    def start(self, start_ns: int | None = None) -> None:
        """Step 0's deadline is `start_ns` (default: now)."""
        self.start_ns = self.clock.now_ns() if start_ns is None else start_ns
        self.step = 0
        self.missed_ticks = 0

    def deadline_of(self, step: int) -> int:
        return self.start_ns + step * self.period_ns

    def wait(self) -> int:
        """Wait for the next tick; return its step. Lateness of that tick: `last_lateness_ns`."""
        deadline = self.deadline_of(self.step)
        now = self.clock.now_ns()
        if now - deadline >= self.period_ns:
            # Woke up a whole period or more late: skip the missed ticks instead of bursting them.
            skipped = (now - deadline) // self.period_ns
            self.missed_ticks += skipped
            self.step += skipped
            deadline = self.deadline_of(self.step)
        spin_from = deadline - self.spin_ns
        while now < spin_from:
            self._idle(spin_from)
            now = self.clock.now_ns()
        self.last_idle_overrun_ns = max(0, now - deadline)
        while now < deadline:
            now = self.clock.now_ns()
        self.last_lateness_ns = now - deadline
        step = self.step
        self.step += 1
        return step
