"""How often marks are kept: each may write a ring's seconds to disk (a hostile trial's five
robots marking once a second wrote 489 MiB in 12 s). Per robot at most one a second and
`record.marks_per_minute` a minute; all robots together `record.marks_per_minute_all` a minute.
A mark past a budget is refused with a sentence (the caller counts it). Used from the loop's
thread only (a driver's marks and an operator's are both kept there)."""

from __future__ import annotations

import collections

MINUTE_NS = 60_000_000_000
MIN_INTERVAL_NS = 1_000_000_000  # a robot's marks, at most one a second
FORGET_AFTER = 256  # robots remembered before those without a mark this minute are forgotten


class MarkBudget:
    def __init__(self, per_robot: int, in_all: int) -> None:
        self.per_robot = per_robot
        self.in_all = in_all
        self._robots: dict[str, collections.deque[int]] = {}
        self._all: collections.deque[int] = collections.deque()

    def take(self, robot: str, now_ns: int) -> str | None:
        """None when a mark of `robot` now is within every budget (and counted), else why not."""
        since = now_ns - MINUTE_NS
        kept = self._robots.get(robot)
        if kept is None:
            self._forget_quiet(since)
            kept = self._robots[robot] = collections.deque()
        for times in (kept, self._all):
            while times and times[0] <= since:
                times.popleft()
        if kept and now_ns - kept[-1] < MIN_INTERVAL_NS:
            return "a robot may mark at most one moment a second; this mark was not kept"
        if len(kept) >= self.per_robot:
            return (
                f"robot {robot} marked {len(kept)} moments within the last minute, its budget "
                "(record.marks_per_minute); this mark was not kept"
            )
        if len(self._all) >= self.in_all:
            return (
                f"the robots marked {len(self._all)} moments within the last minute, the "
                "budget of all together (record.marks_per_minute_all); this mark was not kept"
            )
        kept.append(now_ns)
        self._all.append(now_ns)
        return None

    def _forget_quiet(self, since: int) -> None:
        if len(self._robots) >= FORGET_AFTER:
            self._robots = {r: t for r, t in self._robots.items() if t and t[-1] > since}
