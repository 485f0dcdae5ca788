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
    assert budget.tracked <= MAX_TRACKED


def test_a_connection_gets_its_burst_at_once_then_its_rate_per_tick() -> None:
    budget = ConnectionBudget(max_messages=10_000, period_ns=1000, per_tick=2, burst=5)
    assert [budget.admit(b"a", 0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert budget.over_rate == 2 and budget.dropped == 0
    assert budget.admit(b"b", 0), "another connection's bucket is its own"
    # One tick later: its rate's worth again (2), not the whole burst.
    assert [budget.admit(b"a", 1000) for _ in range(3)] == [True, True, False]
    # A driver at its rate is never dropped; quiet for a while, it has its whole burst again.
    assert all(budget.admit(b"a", 2000 + 500 * i) for i in range(100))
    assert [budget.admit(b"a", 10**6) for _ in range(6)] == [True] * 5 + [False]


def test_newcomers_messages_have_one_budget_a_tick() -> None:
    budget = ConnectionBudget(max_messages=10_000, period_ns=1000, greetings_per_tick=2)
    assert budget.admit(b"new-1", 0, newcomer=True)
    assert budget.admit(b"new-2", 1, newcomer=True)
    assert not budget.admit(b"new-3", 2, newcomer=True)
    assert budget.admit(b"old", 3), "a connection with a session is not a newcomer"
    assert budget.greetings_dropped == 1
    assert budget.admit(b"new-3", 1000, newcomer=True), "the next tick's budget"


def test_hellos_have_a_rate_and_a_burst_in_all() -> None:
    budget = ConnectionBudget(max_messages=10_000, hellos_per_s=10, hello_burst=3)
    assert [budget.hello(0) for _ in range(4)] == [True, True, True, False]
    assert budget.hellos_dropped == 1
    assert budget.hello(100_000_000) and not budget.hello(100_000_000)  # 10 a second
    assert all(budget.hello(10**10 + i * 100_000_000) for i in range(20))  # at its rate


def test_a_backlog_past_the_burst_does_not_mute_the_next_observations() -> None:
    # A 50 Hz driver after a 7 s stall of the daemon: 350 queued messages read at once. The
    # burst takes 64, the rest are dropped past the rate, and those drops do not count
    # towards max_messages (300 a second), so the next ticks' observations are handled.
    period = 20_000_000
    budget = ConnectionBudget(max_messages=4 * 50 + 100, period_ns=period)
    now = 10 * period
    taken = sum(budget.admit(b"arm", now + i) for i in range(350))
    assert taken == 64 and budget.over_rate == 350 - 64 and budget.dropped == 0
    assert all(budget.admit(b"arm", now + k * period) for k in range(1, 20))


def test_a_connection_with_a_session_gets_one_hello_a_second_before_the_budget_of_all() -> None:
    # One connection's hello storm (it holds a session: its hellos pass the newcomers' budget)
    # must not spend the hellos every reconnecting driver needs.
    budget = ConnectionBudget(max_messages=10_000, hellos_per_s=10, hello_burst=3)
    assert budget.hello(0, b"storm")
    assert not any(budget.hello(i, b"storm") for i in range(1, 200))
    assert budget.hello(300, b"fresh-1") and budget.hello(301, b"fresh-2")  # the burst's rest
    assert budget.hello(WINDOW_NS, b"storm")  # its next second
