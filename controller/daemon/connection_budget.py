"""How much one connection, and every newcomer together, may ask of the loop thread.

Every message costs the loop thread Python work: a decode, checks, for a refusal an `error`
reply (tens of microseconds), for a hello a session and a welcome. The daemon's receive queue is
unbounded (see controller/daemon/transport.py) and ZeroMQ hands the loop one message of each
connection in turn, so what one connection may cost the loop is what bounds how long another
robot's observation waits. Three budgets, each past its end dropping messages unread (a few
microseconds each), counted:

    per connection, a rate and a burst   `per_tick` messages per tick's time (period) on
                                         average, up to `burst` at once (a token bucket, kept
                                         as its theoretical arrival time): a driver sends
                                         about one observation per tick, and a daemon that
                                         read late finds a backlog of a few dozen; a
                                         flooder's backlog costs the loop `burst` messages
                                         once, then `per_tick` a tick, never all in one go
    per connection, per second           `max_messages` messages handled (those within
                                         the rate) or `max_refusals`
                                         refusals; past either, the connection is muted for
                                         the rest of the second (a broken driver still hears
                                         why, `max_refusals` times a second)
    every message from a connection      `greetings_per_tick` in all, per tick's time: a
    without a session                    storm of new connections (each with budgets of its
                                         own) costs the loop a few decodes a tick
    every hello                          `hellos_per_s` in all on average, up to
                                         `hello_burst` at once (opening a session costs the
                                         loop about half a millisecond): a fleet reconnecting
                                         gets in at once, a hello storm opens a few sessions
                                         a second; a hello dropped is sent again by its driver
                                         (the handshake's time-out); a connection that holds
                                         a session, one hello a second before that budget

Windows are the clock's multiples of the period (the second: of a second), so a test drives
the budget with its own `now_ns`.
"""

from __future__ import annotations

MAX_TRACKED = 1024  # connections remembered; quiet ones are forgotten past this
WINDOW_NS = 1_000_000_000

# A connection's window: [second start, messages, refusals, muted (0 or 1), the bucket's
# theoretical arrival time: when it would be full again, hellos handled on its session]
_START, _MESSAGES, _REFUSALS, _MUTED, _FULL_AT, _HELLOS = range(6)


class ConnectionBudget:
    def __init__(
        self,
        max_messages: int,
        max_refusals: int = 100,
        *,
        period_ns: int = 20_000_000,
        per_tick: int = 4,
        burst: int = 64,
        greetings_per_tick: int = 16,
        hellos_per_s: int = 50,
        hello_burst: int = 8,
    ) -> None:
        self.max_messages = max_messages
        self.max_refusals = max_refusals
        self.period_ns = period_ns
        self.per_tick = per_tick
        self.burst = burst
        self._cost_ns = period_ns // per_tick  # of the bucket, per message
        self._tolerance_ns = (burst - 1) * self._cost_ns
        self.greetings_per_tick = greetings_per_tick
        self.hello_burst = hello_burst
        self._hello_cost_ns = 1_000_000_000 // hellos_per_s
        self._hello_tolerance_ns = (hello_burst - 1) * self._hello_cost_ns
        self._hellos_full_at = 0
        self._windows: dict[bytes, list[int]] = {}
        self._greeting_tick = -1
        self._greetings = 0
        self.dropped = 0  # messages dropped unread while their connection was muted
        self.over_rate = 0  # dropped unread past a connection's rate and burst
        self.greetings_dropped = 0  # newcomers' messages dropped past their budget
        self.hellos_dropped = 0  # hellos dropped past theirs

    @property
    def tracked(self) -> int:
        """How many connections' windows are kept now (at most MAX_TRACKED)."""
        return len(self._windows)

    def admit(self, identity: bytes, now_ns: int, newcomer: bool = False) -> bool:
        """Whether to handle this connection's message; False: drop it unread (counted).
        `newcomer`: the connection has no session (its message is charged to the greetings)."""
        window = self._window(identity, now_ns)
        if window[_MUTED]:
            self.dropped += 1
            return False
        full_at = max(window[_FULL_AT], now_ns)
        if full_at - now_ns > self._tolerance_ns:
            # Not counted towards max_messages: a good driver's backlog after a long stall
            # of the daemon must not mute its fresh observations for the rest of the second.
            self.over_rate += 1
            return False
        window[_MESSAGES] += 1
        if window[_MESSAGES] > self.max_messages:
            window[_MUTED] = 1
            self.dropped += 1
            return False
        window[_FULL_AT] = full_at + self._cost_ns
        return not newcomer or self.greeting(now_ns)

    def hello(self, now_ns: int, holder: bytes | None = None) -> bool:
        """One hello (decoded) within the hellos' budget; False: drop it (counted).
        `holder`: the connection's identity when it holds a session already; such a connection
        gets one hello a second, before the budget of all, so that one connection's hello storm
        cannot spend every newcomer's (a reconnecting driver says hello on a fresh socket)."""
        window = self._window(holder, now_ns) if holder is not None else None
        if window is not None and window[_HELLOS]:
            self.hellos_dropped += 1
            return False
        full_at = max(self._hellos_full_at, now_ns)
        if full_at - now_ns > self._hello_tolerance_ns:
            self.hellos_dropped += 1
            return False
        self._hellos_full_at = full_at + self._hello_cost_ns
        if window is not None:
            window[_HELLOS] = 1
        return True

    def greeting(self, now_ns: int) -> bool:
        """One newcomer's message within this tick's budget of them; False: drop it (counted)."""
        tick = now_ns // self.period_ns
        if tick != self._greeting_tick:
            self._greeting_tick, self._greetings = tick, 0
        self._greetings += 1
        if self._greetings > self.greetings_per_tick:
            self.greetings_dropped += 1
            return False
        return True

    def refused(self, identity: bytes, now_ns: int) -> bool:
        """One refusal on this connection; True when that used up its budget (now muted)."""
        window = self._window(identity, now_ns)
        window[_REFUSALS] += 1
        if window[_REFUSALS] > self.max_refusals and not window[_MUTED]:
            window[_MUTED] = 1
            return True
        return False

    def _window(self, identity: bytes, now_ns: int) -> list[int]:
        window = self._windows.get(identity)
        if window is None or now_ns - window[_START] >= WINDOW_NS:
            if window is None and len(self._windows) >= MAX_TRACKED:
                self._forget(now_ns)
            full_at = window[_FULL_AT] if window is not None else 0
            window = self._windows[identity] = [now_ns, 0, 0, 0, full_at, 0]
        return window

    def _forget(self, now_ns: int) -> None:
        old = [i for i, window in self._windows.items() if now_ns - window[_START] >= WINDOW_NS]
        for identity in old:
            del self._windows[identity]
        if len(self._windows) >= MAX_TRACKED:  # all recent: a swarm of new connections
            self._windows.clear()
