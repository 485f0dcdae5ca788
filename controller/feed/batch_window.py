"""When to send the robots' waiting requests as one batch (execution.batch_window_us).

    window = BatchWindow(window_us, sizes, step_times)
    wait_ns = window.wait_ns(waiting, now_ns)   # 0: go now with what is waiting

With no window (0) the feed takes whatever is waiting at that moment and never waits. With a
window it waits for more robots, at most `window_us` after the earliest waiting request came,
and never past the moment a waiting robot's chunk would be late: its deadline is the
observation's arrival plus its budget (the control period times its query period), and the
step must start at least the measured step time of the bucket the batch would need before it.
A robot that needs its chunk sooner (200 Hz) is therefore never held back for one that can wait
(10 Hz): the batch leaves by the soonest deadline among the robots in it. A full batch (the
largest bucket) leaves at once. Nothing here reads a clock: the caller passes the time, so the
rules can be checked with a made-up clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Waiting:
    """A request as the window sees it: when its observation came, and how long after that its
    chunk is due (None: no deadline known, only the window bounds its wait)."""

    received_ns: int
    budget_ns: int | None


StepTimes = Callable[[], Mapping[int, float]]  # batch size -> measured step time, seconds


class BatchWindow:
    def __init__(
        self, window_us: int, sizes: Sequence[int], step_times: StepTimes = lambda: {}
    ) -> None:
        self.window_ns = int(window_us) * 1000
        self.sizes = tuple(sorted({1, *sizes}))
        self._step_times = step_times

    @property
    def largest(self) -> int:
        return self.sizes[-1]

    def bucket_for(self, count: int) -> int:
        """The bucket `count` requests run in (the largest when none holds them all)."""
        return next((s for s in self.sizes if s >= count), self.sizes[-1])

    def step_ns(self, count: int) -> int:
        """The measured step time of the bucket `count` requests would need (0 if unknown; a
        bucket not measured takes the next larger one's time, else the largest known)."""
        times = self._step_times()
        bucket = self.bucket_for(count)
        known = sorted(times.items())
        for size, seconds in known:
            if size >= bucket:
                return int(seconds * 1e9)
        return int(known[-1][1] * 1e9) if known else 0

    def wait_ns(self, waiting: Sequence[Waiting], now_ns: int) -> int:
        """How long to wait before sending `waiting` (0: send now). Never negative."""
        if not waiting or self.window_ns <= 0 or len(waiting) >= self.largest:
            return 0
        go_ns = min(w.received_ns for w in waiting) + self.window_ns
        # If one more robot joins, the batch needs the next bucket: its step time must still
        # fit before every waiting robot's deadline.
        step_ns = self.step_ns(len(waiting) + 1)
        for w in waiting:
            if w.budget_ns is not None:
                go_ns = min(go_ns, w.received_ns + w.budget_ns - step_ns)
        return max(0, go_ns - now_ns)


def waiting_sessions(ready: Iterable[Any], largest: int) -> list[Any]:
    """Distinct robots (their RobotQueues) with a request waiting, in order of arrival, up to
    `largest`: robots that left, or already taken, are skipped (the feeds' ready deques hold a
    robot once per submit; its mailbox only the newest request)."""
    sessions: list[Any] = []
    for session in ready:
        if len(sessions) >= largest:
            break
        if session.closed or any(s is session for s in sessions):
            continue
        if session.requests.peek() is not None:
            sessions.append(session)
    return sessions


def step_times_of(status: Mapping[str, Any]) -> dict[int, float]:
    """Batch size -> measured step time (seconds) of the serving tier, from a runner's status
    (`Runner.status`, also as an inference process reports it); {} before it is known."""
    tier = status.get("tier")
    times: dict[int, float] = {}
    for report in status.get("tiers") or []:
        if report.get("name") == tier and report.get("step_s") is not None:
            times[1] = float(report["step_s"])
    for bucket in status.get("buckets") or []:
        step_ms = (bucket.get("step_ms") or {}).get(tier)
        if step_ms is not None:
            times[int(bucket["size"])] = float(step_ms) / 1e3
    return times
