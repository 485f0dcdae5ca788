"""The threads beside the control loop follow it under SCHED_FIFO, below it, once it is real-time
(controller.daemon.helper_threads); nothing changes before."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from controller.daemon.helper_threads import HELPER_PRIORITY, REALTIME_POLICY, HelperThreads


@pytest.fixture
def waiting() -> Iterator[tuple[threading.Event, list[threading.Thread]]]:
    release = threading.Event()
    threads: list[threading.Thread] = []

    yield release, threads
    release.set()
    for thread in threads:
        thread.join(5)


def started(waiting: tuple[threading.Event, list[threading.Thread]], name: str) -> threading.Thread:
    release, threads = waiting
    thread = threading.Thread(target=release.wait, name=name, daemon=True)
    thread.start()
    threads.append(thread)
    return thread


def test_helpers_follow_the_loop_once_it_is_real_time(waiting) -> None:  # type: ignore[no-untyped-def]
    calls: list[tuple[int, int]] = []
    helpers = HelperThreads(set_fifo=lambda tid, priority: calls.append((tid, priority)))
    before = started(waiting, "tempo-recorder")
    helpers.add(before)
    helpers.add(None)  # a part without a thread (no recorder): left out
    assert calls == []  # the loop is not real-time: helpers stay ordinary
    helpers.follow_loop(50)
    assert calls == [(before.native_id, HELPER_PRIORITY)]
    after = started(waiting, "tempo-helper")
    helpers.add(after)  # added once the loop is real-time: raised at once
    assert calls[-1] == (after.native_id, HELPER_PRIORITY)


def test_a_loop_at_the_lowest_priority_shares_it_and_ended_threads_are_skipped(waiting) -> None:  # type: ignore[no-untyped-def]
    calls: list[tuple[int, int]] = []
    helpers = HelperThreads(set_fifo=lambda tid, priority: calls.append((tid, priority)))
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    helpers.add(ended)
    helpers.add(threading.Thread(target=lambda: None))  # never started: no native id
    live = started(waiting, "tempo-recorder")
    helpers.add(live)
    helpers.follow_loop(1)
    assert calls == [(live.native_id, 1)]


def test_a_refused_helper_is_logged_and_the_rest_follow(waiting, caplog) -> None:  # type: ignore[no-untyped-def]
    calls: list[int] = []

    def refuse_the_first(tid: int, priority: int) -> None:
        calls.append(tid)
        if len(calls) == 1:
            raise ProcessLookupError(3, "No such process")

    helpers = HelperThreads(set_fifo=refuse_the_first)
    first, second = started(waiting, "tempo-recorder"), started(waiting, "tempo-helper")
    helpers.add(first)
    helpers.add(second)
    helpers.follow_loop(50)
    assert calls == [first.native_id, second.native_id]
    assert "tempo-recorder stays under ordinary scheduling" in caplog.text


@pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="Linux scheduling")
def test_a_real_helper_runs_fifo_and_what_it_starts_does_not(waiting) -> None:  # type: ignore[no-untyped-def]
    """With the right to (root or CAP_SYS_NICE): the helper runs SCHED_FIFO, and a thread it
    starts runs ordinary (SCHED_RESET_ON_FORK)."""
    try:
        os.sched_setscheduler(0, REALTIME_POLICY, os.sched_param(HELPER_PRIORITY))
    except PermissionError:
        pytest.skip("SCHED_FIFO is refused here")
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    seen: dict[str, int] = {}
    go = threading.Event()

    def helper() -> None:
        go.wait(5)
        seen["helper"] = os.sched_getscheduler(0)
        child = threading.Thread(target=lambda: seen.setdefault("child", os.sched_getscheduler(0)))
        child.start()
        child.join(5)

    thread = threading.Thread(target=helper, daemon=True)
    thread.start()
    helpers = HelperThreads()
    helpers.add(thread)
    helpers.follow_loop(50)
    go.set()
    thread.join(5)
    # The helper's policy carries the reset flag; the child's is plain.
    assert seen == {"helper": REALTIME_POLICY, "child": os.SCHED_OTHER}
