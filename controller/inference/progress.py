"""Saying what a slow start-up is doing: progress lines, a heartbeat while a compile gives no
sign of life, and one-line causes for logs and status."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

Progress = Callable[[str], None]


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
