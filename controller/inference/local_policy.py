"""A served policy whose model runs in this process: the runner, or PriorFallback over two
runners. Besides what the daemon asks of any served policy (controller.feed.served_policy), the
inference process's server and the fallback ask it for its extra outputs and to upload frames
from page-locked memory it did not allocate."""

from __future__ import annotations

from typing import Protocol

from controller.feed.served_policy import ServedPolicy


class LocalPolicy(ServedPolicy, Protocol):
    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the extra outputs after the chunk (a planner's mean), in order."""
        ...

    def add_pinned_region(self, address: int, size: int) -> None:
        """Frames in this page-locked memory are uploaded by DMA without a staging copy."""
        ...

    def remove_pinned_region(self, address: int, size: int) -> None: ...
