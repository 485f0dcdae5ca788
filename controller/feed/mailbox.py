"""Latest-wins slot: a producer overwrites, a consumer takes the newest item.

Observations and inference requests are only worth their newest value: acting on an old camera
frame is worse than skipping it. Overwritten items are counted, not queued.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: T | None = None
        self.replaced = 0

    def put(self, item: T) -> bool:
        """Store `item`; True if it replaced one nobody took."""
        with self._lock:
            replaced = self._item is not None
            self._item = item
            if replaced:
                self.replaced += 1
            return replaced

    def take(self) -> T | None:
        with self._lock:
            item, self._item = self._item, None
            return item

    def peek(self) -> T | None:
        with self._lock:
            return self._item
