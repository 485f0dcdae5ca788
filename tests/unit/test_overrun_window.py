"""k of the last n events over budget (the ladder's demotion, the planner's prior fall-back)."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.observe.overrun_window import OverrunWindow


def feed(window: OverrunWindow, events: str) -> list[int]:
    """Indices of the events (x: over, .: within budget) on which the window fired."""
    return [i for i, e in enumerate(events) if window.record(e == "x")]


def test_the_kth_overrun_fires_and_the_one_before_does_not() -> None:
    assert feed(OverrunWindow(k=3, n=5), "xx...") == []
    assert feed(OverrunWindow(k=3, n=5), "xx..x") == [4]
    assert feed(OverrunWindow(k=1, n=1), ".x.x") == [1, 3]


def test_an_overrun_n_events_back_still_counts_and_one_more_back_does_not() -> None:
    # k overruns spanning exactly n events: all in the window
    assert feed(OverrunWindow(k=2, n=4), "x..x") == [3]
    # spanning n + 1 events: the first has left the window
    assert feed(OverrunWindow(k=2, n=4), "x...x") == []
    assert feed(OverrunWindow(k=3, n=4), "xx.x") == [3]
    assert feed(OverrunWindow(k=3, n=4), "xx..x") == []


def test_firing_empties_the_window() -> None:
    window = OverrunWindow(k=2, n=10)
    assert feed(window, "xx") == [1]
    assert window.overruns == 0
    assert feed(window, "x") == []  # one overrun after the switch is not two
    assert feed(window, "x") == [0]


def test_clear_forgets_the_events_so_far() -> None:
    window = OverrunWindow(k=2, n=3)
    window.record(True)
    window.clear()
    assert not window.record(True)
    assert window.record(True)


def test_k_and_n_are_checked() -> None:
    for k, n in ((0, 3), (4, 3), (1, 0)):
        with pytest.raises(ValueError, match="1 <= k <= n"):
            OverrunWindow(k, n)


def reference(k: int, n: int, events: list[bool]) -> list[int]:
    """The windows' old form (a deque of the last n flags, summed), for comparison."""
    last: deque[bool] = deque(maxlen=n)
    fired = []
    for i, over in enumerate(events):
        last.append(over)
        if over and sum(last) >= k:
            last.clear()
            fired.append(i)
    return fired


@given(st.integers(1, 8), st.integers(0, 8), st.lists(st.booleans(), max_size=120))
def test_it_fires_exactly_where_a_deque_of_the_last_n_would(
    k: int, extra: int, events: list[bool]
) -> None:
    n = k + extra
    window = OverrunWindow(k, n)
    assert [i for i, over in enumerate(events) if window.record(over)] == reference(k, n, events)
