"""Late ticks, and what made each late, as far as the loop can tell.

A tick later than `threshold_ns` is counted, and attributed:
- preempted: the loop's thread was switched out involuntarily (getrusage RUSAGE_THREAD,
  ru_nivcsw) since the tick before: the OS scheduler gave its core to another thread (the cure
  is `control.realtime_priority`, or a core of its own);
- idle overran: the work between ticks ran past the deadline before the final spin could
  start; `idle_overran_by` names the longest step of that work: "tick" (the tick before ran
  long), "handle" (one message's handling), "service" (the inference process's channel),
  "wait" (a poll or sleep that returned late);
- the rest were late during the spin without losing the core: waiting for the GIL, which
  another thread of the process held.
One system call a tick, made by the loop's thread.
"""

from __future__ import annotations

import collections
import resource

LATE_TICK_NS = 100_000  # the lateness a 200 Hz loop should stay under (p99)


def _involuntary_switches() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


class LateTicks:
    def __init__(self, threshold_ns: int = LATE_TICK_NS) -> None:
        self.threshold_ns = threshold_ns
        self.count = 0
        self.preempted = 0
        self.idle_overran = 0
        self.idle_overran_by: collections.Counter[str] = collections.Counter()
        self._switches: int | None = None  # none seen yet: the first tick is not attributed

    def record(
        self,
        lateness_ns: int,
        idle_overrun_ns: int = 0,
        longest_step: tuple[str, int] = ("", 0),
        last_tick_ns: int = 0,
    ) -> None:
        """Call from the loop's own thread, once a tick. `idle_overrun_ns`: how far past the
        deadline the work between ticks had run (Pacer.last_idle_overrun_ns); `longest_step`:
        that work's longest step (RouterTransport.take_longest); `last_tick_ns`: how long the
        tick before took."""
        switches = _involuntary_switches()
        if lateness_ns > self.threshold_ns:
            self.count += 1
            if self._switches is not None and switches != self._switches:
                self.preempted += 1
            elif idle_overrun_ns > 0:
                self.idle_overran += 1
                step, duration_ns = longest_step
                self.idle_overran_by["tick" if last_tick_ns > duration_ns else step or "?"] += 1
        self._switches = switches

    def as_dict(self) -> dict[str, int | dict[str, int]]:
        return {
            "over_us": self.threshold_ns // 1000,
            "count": self.count,
            "preempted": self.preempted,
            "idle_overran": self.idle_overran,
            "idle_overran_by": dict(self.idle_overran_by),
        }
