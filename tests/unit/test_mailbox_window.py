"""Mailbox (latest wins) and windows between histogram snapshots."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.feed.mailbox import Mailbox
from controller.observe.histogram import Histogram, window

# -- Mailbox -------------------------------------------------------------------------------------


def test_an_empty_mailbox_gives_none():
    box: Mailbox[int] = Mailbox()
    assert box.take() is None
    assert box.peek() is None
    assert box.replaced == 0


def test_the_latest_item_wins_and_overwrites_are_counted():
    box: Mailbox[str] = Mailbox()
    assert box.put("a") is False  # nothing was waiting
    assert box.put("b") is True  # "a" was never taken
    assert box.put("c") is True
    assert box.replaced == 2
    assert box.take() == "c"


def test_take_empties_the_mailbox_and_peek_does_not():
    box: Mailbox[int] = Mailbox()
    box.put(1)
    assert box.peek() == 1
    assert box.peek() == 1
    assert box.take() == 1
    assert box.take() is None
    assert box.put(2) is False  # the slot was empty again: not a replacement
    assert box.replaced == 0


def test_falsy_items_are_items():
    box: Mailbox[int] = Mailbox()
    box.put(0)
    assert box.put(0) is True
    assert box.take() == 0


def test_two_threads_lose_nothing_but_replaced_items():
    box: Mailbox[int] = Mailbox()
    count = 20_000
    taken: list[int] = []
    done = threading.Event()

    def producer() -> None:
        for i in range(count):
            box.put(i)
        done.set()

    def consumer() -> None:
        while True:
            finished = done.is_set()  # read before take: nothing can arrive after a final take
            item = box.take()
            if item is not None:
                taken.append(item)
            elif finished:
                return

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)

    # Every item was either taken exactly once or counted as replaced; order is kept; the last
    # one is never lost.
    assert len(taken) + box.replaced == count
    assert taken == sorted(set(taken))
    assert taken[-1] == count - 1


# -- a window between two histogram snapshots (how bench_loop and the hostile suite read lateness)


def test_an_empty_window_has_no_figures():
    h = Histogram()
    h.record_ns(5_000)
    snap = h.snapshot(buckets=True)
    assert window(snap, snap) == {
        "count": 0,
        "p50_s": None,
        "p90_s": None,
        "p99_s": None,
        "max_s": None,
    }


def test_a_window_sees_only_what_was_recorded_after_the_first_snapshot():
    h = Histogram()
    for us in (9_000, 8_000, 7_000):  # big values before the window: must not show
        h.record_ns(us * 1000)
    before = h.snapshot(buckets=True)
    for us in (10, 20, 30, 500):
        h.record_ns(us * 1000)
    w = window(before, h.snapshot(buckets=True))
    assert w["count"] == 4
    assert w["max_s"] == pytest.approx(500e-6, rel=0.016)  # within one bucket
    assert w["p50_s"] == pytest.approx(20e-6, rel=0.016)


def test_a_window_never_puts_a_percentile_above_its_max_and_survives_a_reset():
    h = Histogram()
    h.record_ns(1_003_000)
    w = window(Histogram().snapshot(buckets=True), h.snapshot(buckets=True))
    assert w["p50_s"] <= w["max_s"] == pytest.approx(1.003e-3)
    before = h.snapshot(buckets=True)
    h.reset()
    h.record_ns(2_000_000)
    assert window(before, h.snapshot(buckets=True))["count"] == 1
    with pytest.raises(ValueError, match="buckets=True"):
        window(h.snapshot(), h.snapshot(buckets=True))


@settings(max_examples=60, deadline=None)
@given(
    old=st.lists(st.integers(0, 10**9), max_size=50),
    new=st.lists(st.integers(2_000, 10**9), min_size=1, max_size=300),  # above bucket 0
    q=st.sampled_from([50, 90, 99]),
)
def test_window_percentiles_lie_within_a_bucket_of_numpy(old, new, q):
    h = Histogram()
    for ns in old:
        h.record_ns(ns)
    before = h.snapshot(buckets=True)
    for ns in new:
        h.record_ns(ns)
    w = window(before, h.snapshot(buckets=True))
    assert w["count"] == len(new)
    true = float(np.percentile(new, q, method="inverted_cdf")) / 1e9
    assert w[f"p{q}_s"] == pytest.approx(true, rel=0.02)
    assert w["max_s"] == pytest.approx(max(new) / 1e9, rel=0.02)
    assert w["max_s"] >= max(new) / 1e9 * (1 - 1e-9)  # never below the true worst
