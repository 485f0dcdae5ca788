"""How much one connection may ask of the loop thread before its messages are dropped unread.

Every message costs the loop thread Python work: a decode, checks, for a refusal an `error`
reply (tens of microseconds). The daemon's receive queue is unbounded (see
controller/daemon/transport.py), so a client that sends faster than the loop can handle would make
that queue, and the daemon's memory, grow for as long as it goes on. A connection that, within
one window (a second), sends more than `max_messages` messages or causes more than
`max_refusals` refusals is muted until the window ends: its messages are received and dropped
without being decoded or answered (a few microseconds each). A working driver sends an
observation per camera frame, far below the budget; a broken one still hears why it is refused,
`max_refusals` times a second.
"""

from __future__ import annotations

MAX_TRACKED = 1024  # connections remembered; quiet ones are forgotten past this
WINDOW_NS = 1_000_000_000


class ConnectionBudget:
    def __init__(self, max_messages: int, max_refusals: int = 100) -> None:
        self.max_messages = max_messages
        self.max_refusals = max_refusals
        # identity -> [window start, messages, refusals, muted (0 or 1)]
        self._windows: dict[bytes, list[int]] = {}
        self.dropped = 0  # messages dropped unread while their connection was muted

    def admit(self, identity: bytes, now_ns: int) -> bool:
        """Whether to handle this connection's message; False: drop it unread (counted)."""
        window = self._window(identity, now_ns)
        window[1] += 1
        if window[3] or window[1] > self.max_messages:
            window[3] = 1
            self.dropped += 1
            return False
        return True

    def refused(self, identity: bytes, now_ns: int) -> bool:
        """One refusal on this connection; True when that used up its budget (now muted)."""
        window = self._window(identity, now_ns)
        window[2] += 1
        if window[2] > self.max_refusals and not window[3]:
            window[3] = 1
            return True
        return False

    def _window(self, identity: bytes, now_ns: int) -> list[int]:
        window = self._windows.get(identity)
        if window is None or now_ns - window[0] >= WINDOW_NS:
            if window is None and len(self._windows) >= MAX_TRACKED:
                self._forget(now_ns)
            window = self._windows[identity] = [now_ns, 0, 0, 0]
        return window

    def _forget(self, now_ns: int) -> None:
        old = [i for i, window in self._windows.items() if now_ns - window[0] >= WINDOW_NS]
        for identity in old:
            del self._windows[identity]
        if len(self._windows) >= MAX_TRACKED:  # all recent: a swarm of new connections
            self._windows.clear()
