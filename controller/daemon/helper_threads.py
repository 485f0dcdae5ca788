"""The control process's threads that run Python beside the control loop, under SCHED_FIFO below
it once the loop runs under SCHED_FIFO itself (`control.realtime_priority`).

    helpers = HelperThreads()
    helpers.add(recorder.thread)          # started threads: the recorder's writer
    helpers.follow_loop(priority)         # from the loop's thread, once it is real-time

Why: the GIL has no priority inheritance. A helper that holds it and is then preempted by an
ordinary process (the inference process, the recorder's file process) leaves the real-time loop
waiting for the GIL until the OS runs that helper again: milliseconds on a busy machine. Under
SCHED_FIFO at HELPER_PRIORITY no ordinary process takes a helper's core while it holds the GIL,
and the loop, higher still, gets the GIL back at the next switch interval. A helper's work is
bounded by what the daemon itself records and it sleeps between, so it cannot starve the machine;
the kernel's real-time throttling is the backstop. Threads whose work a client decides (the
status thread, /metrics' per-connection threads) stay ordinary: a flood of requests runs at the
machine's pace, not the loop's.

Measured (scripts/soak/bench_recording.py, the demo ACT on a 2-core CPU, 200 Hz, three 480x640
cameras at 30 Hz, loop at SCHED_FIFO 50, continuous recording): waits between ticks that ended
over 0.5 ms late with the loop blocked more than once (the GIL): docs/recording.md.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

HELPER_PRIORITY = 1  # the lowest real-time priority: below any loop's


# What a real-time thread starts (the recorder's file process, a swap's thread) starts ordinary:
# the file process compresses at full speed and must not run above the inference process. (Linux
# only: elsewhere the loop's sched_setscheduler is missing and the daemon says so at start.)
REALTIME_POLICY = getattr(os, "SCHED_FIFO", 0) | getattr(os, "SCHED_RESET_ON_FORK", 0)


def set_realtime(native_id: int, priority: int) -> None:
    """Thread `native_id` (0: the calling one) under REALTIME_POLICY at `priority`. On Linux a
    thread's native id is a pid for sched_setscheduler: only that thread changes."""
    os.sched_setscheduler(native_id, REALTIME_POLICY, os.sched_param(priority))


class HelperThreads:
    def __init__(self, set_fifo: Callable[[int, int], None] = set_realtime) -> None:
        self._set_fifo = set_fifo
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._priority: int | None = None  # set once the loop is real-time

    def add(self, thread: threading.Thread | None) -> None:
        """A started thread (None: a part that runs none, left out); under SCHED_FIFO at once
        when the loop is already."""
        if thread is None:
            return
        with self._lock:
            self._threads.append(thread)
            priority = self._priority
        if priority is not None:
            self._raise(thread, priority)

    def follow_loop(self, loop_priority: int) -> None:
        """Call once the loop's thread runs SCHED_FIFO at `loop_priority`: every helper, added
        or to come, runs SCHED_FIFO at HELPER_PRIORITY (a loop at priority 1 shares it)."""
        priority = min(HELPER_PRIORITY, loop_priority)
        with self._lock:
            self._priority = priority
            threads = list(self._threads)
        for thread in threads:
            self._raise(thread, priority)
        if threads:
            names = ", ".join(thread.name for thread in threads)
            log.info("threads beside the loop (%s) run under SCHED_FIFO priority %d", names,
                     priority)  # fmt: skip

    def _raise(self, thread: threading.Thread, priority: int) -> None:
        native_id = thread.native_id
        if native_id is None or not thread.is_alive():
            return  # ended (or never started): nothing left to schedule
        try:
            self._set_fifo(native_id, priority)
        except OSError as exc:
            # The loop got SCHED_FIFO, so the right is there; a thread that ended meanwhile is
            # the likely cause. The loop keeps its priority either way.
            log.warning("thread %s stays under ordinary scheduling (%s): the loop may wait for "
                        "the GIL while it is preempted", thread.name, exc)  # fmt: skip
