"""How long the garbage collector stops the daemon's process, timed into telemetry.

    pauses = GcPauses(telemetry).install()   # after gc.freeze(), at start
    pauses.remove()                          # at stop

A collection holds the GIL from start to end, whichever thread's allocation triggered it, so
every thread of the process (the control loop included) waits for it: a full collection over
many objects is a pause of milliseconds. The control tick leaves no garbage behind
(tests/integration/test_tick_allocations.py) and the start-up objects are frozen, so what is
collected comes from messages and inference requests; this section says how often and how long.
Collections never overlap, so the section has one writer at a time.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from controller.observe.telemetry import GC_PAUSE, Telemetry


class GcPauses:
    def __init__(self, telemetry: Telemetry) -> None:
        self._enabled = telemetry.enabled
        self._section = telemetry.section(GC_PAUSE)
        self._started = 0

    def install(self) -> GcPauses:
        if self._enabled and self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def remove(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.monotonic_ns()
        elif self._started:
            self._section.record_ns(time.monotonic_ns() - self._started)
            self._started = 0
