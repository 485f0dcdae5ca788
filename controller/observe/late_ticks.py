"""Late ticks, and whether the OS had taken the loop's core away before each.

A tick later than `threshold_ns` is counted. It is counted as preempted too when the loop's
thread was switched out involuntarily (getrusage RUSAGE_THREAD, ru_nivcsw) since the tick
before: that tells the OS scheduler (another process on the core; the cure is
`control.realtime_priority` or a core of its own) from a wait inside the process (the GIL, a
long handler), whose cure is in the code. One system call a tick, made by the loop's thread.
"""

from __future__ import annotations

import resource

LATE_TICK_NS = 100_000  # the lateness a 200 Hz loop should stay under (p99)


def _involuntary_switches() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


class LateTicks:
    def __init__(self, threshold_ns: int = LATE_TICK_NS) -> None:
        self.threshold_ns = threshold_ns
        self.count = 0
        self.preempted = 0
        self._switches = 0

    def record(self, lateness_ns: int) -> None:
        """Call from the loop's own thread, once a tick."""
        switches = _involuntary_switches()
        if lateness_ns > self.threshold_ns:
            self.count += 1
            if switches != self._switches:
                self.preempted += 1
        self._switches = switches

    def as_dict(self) -> dict[str, int]:
        return {
            "over_us": self.threshold_ns // 1000,
            "count": self.count,
            "preempted": self.preempted,
        }
