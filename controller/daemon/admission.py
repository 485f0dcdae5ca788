"""Admission by capacity: a policy takes another robot only while its device can serve them all.

The rule (docs/protocol.md, hello's `policy`): a policy's robots each ask for a chunk at its
query rate (control rate / query period); waiting requests run together as one batch step, so
every query round costs one step of the bucket the robots form (the smallest configured batch
size that holds them), or several steps of the largest bucket when they are more:

    load(n) = query_hz x ceil(n / largest bucket) x step time of the bucket n robots form

A hello is refused (`full`) when load(robots + 1) would exceed `execution.max_load`, with the
numbers: the load now, with one more, and the ceiling. Step times are the ones the runner
measured (controller.feed.batch_window.step_times_of); before any is known, every robot is
admitted. The first robot is always taken (a policy slower than its query rate still serves
one robot from its chunks; refusing it would serve nobody), and without `max_load` (the
default) every robot is, up to server.max_robots. Robots already served are never touched by
a refusal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from controller.errors import ErrorCode, ProtocolError
from controller.feed.batch_window import BatchWindow, StepTimes


class Capacity:
    def __init__(
        self,
        name: str,
        query_hz: float,
        batch_sizes: Sequence[int],
        max_load: float | None,
        step_times: StepTimes,
    ) -> None:
        """`query_hz`: how often one robot asks for a chunk; `step_times`: batch size ->
        measured step time in seconds, as known now ({} before any step)."""
        self.name = name
        self.query_hz = query_hz
        self.max_load = max_load
        self._step_times = step_times
        # Only its buckets and step-time lookup are used (no window, no waiting).
        self._buckets = BatchWindow(0, batch_sizes, step_times)

    def load(self, robots: int) -> float | None:
        """The share of the device's time `robots` robots need (None: no step time yet)."""
        if robots <= 0:
            return 0.0
        step_ns = self._buckets.step_ns(robots)
        if step_ns <= 0:
            return None
        batches = math.ceil(robots / self._buckets.largest)
        return self.query_hz * batches * step_ns / 1e9

    def admit(self, robots: int) -> None:
        """Raise ProtocolError (`full`) unless the policy, serving `robots`, can take one more."""
        if self.max_load is None or robots == 0:
            return
        needed = self.load(robots + 1)
        if needed is None or needed <= self.max_load:
            return
        now = self.load(robots) or 0.0
        raise ProtocolError(
            ErrorCode.FULL,
            f"policy {self.name!r} cannot take another robot: serving {robots} robot"
            f"{'' if robots == 1 else 's'} needing {now:.2f} of its inference time, one more "
            f"needs {needed:.2f}, it can give {self.max_load:.2f} (execution.max_load)",
        )

    def summary(self, robots: int) -> dict[str, Any]:
        """For status: the robots, their query rate, the load they make and the ceiling."""
        return {
            "robots": robots,
            "query_hz": self.query_hz,
            "load": self.load(robots),
            "max_load": self.max_load,
            # Keyed by text: the status snapshot goes out as msgpack and JSON.
            "step_ms": {str(size): s * 1e3 for size, s in sorted(self._step_times().items())},
        }
