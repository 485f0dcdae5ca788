"""What a driver sends may reach the daemon's log, never forge it: `shown` escapes a client's
string (robot names, reasons, joint names, keys, session ids) before any log call, and
`LineLimiter` keeps a line that a driver can cause once per message to one every few seconds.

    log.warning("refused robot %s", shown(name))
    more = limiter.due(("arm0", "teleop"))     # None: logged recently, this one only counted
    if more is not None: log.info("...%s", f" ({more} more since the last line)" if more else "")
"""

from __future__ import annotations

import collections
import time
from collections.abc import Hashable

NAME_CHARS = 80  # a robot name, joint name, key or session id, as shown in a log line
TEXT_CHARS = 500  # a refusal's sentence, which may quote what the driver sent
# A line a driver can cause per message is logged at most this often per key; the rest are
# counted and the count goes into the next line.
LINE_INTERVAL_NS = 10_000_000_000
MAX_KEYS = 1000  # keys remembered; many (a hostile driver's names) start the memory over


def shown(value: object, limit: int = NAME_CHARS) -> str:
    """`value` as text safe for one log line: control characters, ANSI escapes and line or
    paragraph separators escaped as in repr (a newline reads `\\n`, ESC `\\x1b`), and at most
    `limit` characters, the rest replaced by a marker saying how long it was."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit and text.isprintable():
        return text  # the usual case: a plain name
    head = text[:limit]
    if not head.isprintable():  # str.isprintable: False for Cc, Cf, Zl, Zp and non-space Zs
        head = "".join(c if c.isprintable() or c == " " else ascii(c)[1:-1] for c in head)
    if len(text) > limit or len(head) > limit:
        return f"{head[:limit]}...[{len(text)} characters]"
    return head


class LineLimiter:
    """At most one log line per key every `interval_ns` (monotonic clock); `due` says when."""

    def __init__(self, interval_ns: int = LINE_INTERVAL_NS) -> None:
        self.interval_ns = interval_ns
        self._logged_ns: dict[Hashable, int] = {}
        self._unlogged: collections.Counter[Hashable] = collections.Counter()

    def due(self, key: Hashable) -> int | None:
        """None: a line for `key` was logged within the interval (this one is counted);
        otherwise log now, and the number is how many were not logged since the last line."""
        now = time.monotonic_ns()
        last = self._logged_ns.get(key)
        if last is not None and now - last < self.interval_ns:
            self._unlogged[key] += 1
            return None
        if len(self._logged_ns) > MAX_KEYS:
            self._logged_ns.clear()
            self._unlogged.clear()
        self._logged_ns[key] = now
        return self._unlogged.pop(key, 0)
