"""Several inference processes' channels as the one side channel the transport services and
polls beside the robots' socket (controller.daemon.transport.receive_until): each is serviced
in turn, and the poll wakes for a reply on any of them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from controller.feed.inference_feed import Pollable, SideChannel


class PollGroup:
    """The channels awaiting a reply now, as one Pollable: every member's descriptors."""

    def __init__(self, members: tuple[Pollable, ...]) -> None:
        self.members = members

    def filenos(self) -> list[int]:
        return [fileno for member in self.members for fileno in member.filenos()]


class SideChannels:
    def __init__(self, sides: Sequence[SideChannel]) -> None:
        self._sides = tuple(sides)
        self._group = PollGroup(())

    def service(self, until_ns: int) -> None:
        for side in self._sides:
            side.service(until_ns)

    @contextlib.contextmanager
    def polled(self) -> Iterator[PollGroup | None]:
        """Every channel awaiting a reply, each held (no restart closes it) while polled."""
        with contextlib.ExitStack() as held:
            polled = [held.enter_context(side.polled()) for side in self._sides]
            members = tuple(p for p in polled if p is not None)
            if members != self._group.members:
                self._group = PollGroup(members)
            yield self._group if members else None
