"""Saying what a slow start-up is doing: progress lines, a heartbeat while a compile gives no
sign of life, and one-line causes for logs and status."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator

Progress = Callable[[str], None]


def to_stderr(command: str) -> Progress:
    """Progress lines of `tempo <command>` on stderr, flushed at once: stdout holds only the
    command's result (its report, its JSON), so a script reading it never sees them."""

    def say(message: str) -> None:
        print(f"tempo {command}: {message}", file=sys.stderr, flush=True)

    return say


class PacedProgress:
    """Passes a progress line on only when `every_s` has gone by since the last one it passed
    (the first and a `last` always go): a loop of thousands of quick steps says how far it is
    every few seconds, not once a step."""

    def __init__(
        self, say: Progress, every_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._say, self._every_s, self._clock = say, every_s, clock
        self._said_at: float | None = None

    def __call__(self, message: str, last: bool = False) -> None:
        now = self._clock()
        if last or self._said_at is None or now - self._said_at >= self._every_s:
            self._said_at = now
            self._say(message)


@contextlib.contextmanager
def heartbeat(say: Progress, message: str, every_s: float = 5.0) -> Iterator[None]:
    """Say `message`, then repeat it with the elapsed time every `every_s` until the block ends
    (a cold compile gives no sign of life for minutes). `say` is called from a helper thread."""
    say(message)
    started = time.monotonic()
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            say(f"{message} ({time.monotonic() - started:.0f} s)")

    thread = threading.Thread(target=beat, name="tempo-runner-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def first_line(exc: BaseException, limit: int = 300) -> str:
    """A one-line cause for logs and status (torch errors can span pages)."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    line = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
