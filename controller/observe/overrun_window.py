"""k of the last n events over budget: the trigger of the tier ladder's demotion and of the
planner's fall-back to its prior.

    window = OverrunWindow(k=3, n=20)
    if window.record(seconds > budget):   # True on the event that makes k overruns of the last n
        demote()                          # the window starts empty again

O(1) per event, no allocation after construction; one thread records.
"""

from __future__ import annotations


class OverrunWindow:
    def __init__(self, k: int, n: int) -> None:
        if not 1 <= k <= n:
            raise ValueError(f"an overrun window needs 1 <= k <= n, got k={k}, n={n}")
        self.k, self.n = k, n
        self._over = [False] * n  # a ring of the last n events
        self._next = 0
        self._seen = 0  # events since the last clear, at most n
        self.overruns = 0  # overruns among them

    def record(self, over: bool) -> bool:
        """One event, over budget or not; True (and the window cleared) when it is the k-th
        overrun among the last n events."""
        slot = self._next
        if self._seen == self.n:
            self.overruns -= self._over[slot]  # the oldest event leaves the window
        else:
            self._seen += 1
        self._over[slot] = over
        self._next = (slot + 1) % self.n
        self.overruns += over
        if over and self.overruns >= self.k:
            self.clear()
            return True
        return False

    def clear(self) -> None:
        """Forget every event (after a switch, so the next decision sees only new events)."""
        self._seen = self._next = self.overruns = 0
