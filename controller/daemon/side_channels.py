"""Several inference processes' channels as the one side channel the transport services and
polls beside the robots' socket (controller.daemon.transport.receive_until): each is serviced
in turn, and the poll wakes for a reply on any of them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from controller.link.inference_feed import Pollable, SideChannel


class PollGroup:
    """The channels awaiting a reply now; the same object while they stay the same, so the
    transport rebuilds its poller only when one changes (a process restarted)."""

    def __init__(self, members: tuple[Pollable, ...]) -> None:
        self.members = members

    def fileno(self) -> int:
        """The first member's (a group is a Pollable); the transport polls all `filenos`."""
        return self.members[0].fileno()

    def filenos(self) -> list[int]:
        return [member.fileno() for member in self.members]


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
