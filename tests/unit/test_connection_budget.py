"""One connection's budget: past it, its messages are dropped unread for the rest of the second."""

from __future__ import annotations

from controller.daemon.connection_budget import MAX_TRACKED, WINDOW_NS, ConnectionBudget


def test_past_its_refusals_a_connection_is_muted_until_the_window_ends() -> None:
    budget = ConnectionBudget(max_messages=1000, max_refusals=3)
    for t in range(4):
        assert budget.admit(b"a", t)
    assert [budget.refused(b"a", t) for t in range(4)] == [False, False, False, True]
    assert not budget.admit(b"a", 10) and not budget.admit(b"a", WINDOW_NS - 1)
    assert budget.dropped == 2
    assert budget.admit(b"b", 10), "another connection is not affected"
    assert budget.admit(b"a", WINDOW_NS), "a fresh budget in the next window"
    assert not budget.refused(b"a", WINDOW_NS)


def test_past_its_messages_a_connection_is_muted_until_the_window_ends() -> None:
    budget = ConnectionBudget(max_messages=5)
    assert [budget.admit(b"a", t) for t in range(7)] == [True] * 5 + [False] * 2
    assert budget.admit(b"a", WINDOW_NS + 1)


def test_a_steady_driver_is_never_muted() -> None:
    budget = ConnectionBudget(max_messages=4 * 200 + 100)
    assert all(budget.admit(b"a", i * 5_000_000) for i in range(2000))  # 200 Hz for 10 s


def test_many_connections_do_not_grow_it_without_bound() -> None:
    budget = ConnectionBudget(max_messages=10)
    for i in range(10 * MAX_TRACKED):
        budget.admit(i.to_bytes(4, "little"), i * 1000)
    assert len(budget._windows) <= MAX_TRACKED
