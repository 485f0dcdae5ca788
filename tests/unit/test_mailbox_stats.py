"""Mailbox (latest wins) and SampleWindow (fixed ring, percentiles on demand)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.inference.mailbox import Mailbox
from controller.observe.stats import SampleWindow

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


# -- SampleWindow --------------------------------------------------------------------------------


def test_an_empty_window_gives_nan():
    window = SampleWindow(8)
    assert window.values().size == 0
    assert all(math.isnan(v) for v in window.percentiles(50, 99))
    assert len(window.percentiles(50, 90, 99)) == 3
    assert math.isnan(window.max())
    assert window.count == 0


def test_percentiles_equal_numpy_before_the_window_fills():
    window = SampleWindow(100)
    samples = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for value in samples:
        window.record(value)
    assert window.count == len(samples)
    assert sorted(window.values().tolist()) == sorted(samples)
    assert window.percentiles(0, 50, 90, 100) == pytest.approx(
        np.percentile(samples, [0, 50, 90, 100]).tolist()
    )
    assert window.max() == 9.0


def test_the_window_keeps_only_the_last_capacity_samples():
    window = SampleWindow(5)
    for value in range(13):  # wraps twice and a bit
        window.record(float(value))
    assert window.count == 13
    assert sorted(window.values().tolist()) == [8.0, 9.0, 10.0, 11.0, 12.0]
    assert window.percentiles(50) == [10.0]
    assert window.max() == 12.0  # 12 is the newest, not an old value left behind


def test_values_is_a_copy():
    window = SampleWindow(4)
    window.record(1.0)
    values = window.values()
    values[0] = 99.0
    assert window.values().tolist() == [1.0]


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.integers(1, 50),
    samples=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=200),
    qs=st.lists(st.floats(0, 100), min_size=1, max_size=4),
)
def test_percentiles_equal_numpy_on_the_retained_window(capacity, samples, qs):
    window = SampleWindow(capacity)
    for value in samples:
        window.record(value)
    retained = samples[-capacity:]
    assert sorted(window.values().tolist()) == sorted(retained)
    assert window.percentiles(*qs) == pytest.approx(np.percentile(retained, qs).tolist())
    assert window.max() == max(retained)
    assert window.count == len(samples)
