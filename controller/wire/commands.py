"""What a driver keeps of the daemon's actions and holds: the newest one by step, which the
robot may apply now (never past its deadline, never stale), and the counts of what arrived
late, lost or twice. Only numpy and the standard library (a driver imports this)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from controller.wire.protocol import Message


@dataclass(frozen=True)
class Command:
    """What the robot should do now: `action` (apply `action`) or `hold` (keep position)."""

    kind: str
    action: np.ndarray | None = None
    step: int = -1
    obs_seq: int = -1
    deadline_ns: int = 0
    reason: str = ""


@dataclass
class ClientCounters:
    actions: int = 0
    holds: int = 0
    expired: int = 0  # actions that reached us (or were asked for) past their deadline
    errors: int = 0
    reconnects: int = 0
    dropped_observations: int = 0  # sent while not connected
    lost: int = 0  # gaps in the daemon's action/hold sequence numbers
    duplicated: int = 0  # an action/hold sequence number seen twice (or going backwards)
    last_error: str = ""
    frames_on_socket: int = 0  # frames in place, but every slot was the daemon's: sent instead
    frames_lost_unread: int = 0  # frames in place: a slot taken back before the daemon read it
    error_codes: dict[str, int] = field(default_factory=dict)


class CommandInbox:
    """One session's actions and holds as they arrive (see the module doc); counts into
    `counters` (actions, holds, expired, lost, duplicated). on_command(command, session), if
    given, sees each action and hold as it arrives, whether or not it becomes the newest."""

    def __init__(
        self, counters: ClientCounters, on_command: Callable[[Command, str], None] | None = None
    ) -> None:
        self.counters = counters
        self._on_command = on_command
        self.latest: Command | None = None
        self._latest_received_ns = 0
        self._last_daemon_seq = 0

    def clear(self) -> None:
        """Forget the newest command (a new hello: nothing from before it is ever returned)."""
        self.latest = None

    def new_session(self) -> None:
        """A welcome: the daemon numbers the new session's actions and holds from 1 again."""
        self._last_daemon_seq = 0

    def take(self, message: Message, session: str) -> None:
        """An action or hold of this session (`session`, the welcome's), as received."""
        header = message.header
        self._count_sequence(message.seq)
        if message.kind == "action":
            self.counters.actions += 1
            self._store(
                session,
                Command(
                    "action",
                    action=message.arrays["action"],
                    step=header["step"],
                    obs_seq=header["obs_seq"],
                    deadline_ns=header["deadline_ns"],
                ),
            )
            if time.monotonic_ns() > header["deadline_ns"]:
                self.counters.expired += 1
        elif message.kind == "hold":
            self.counters.holds += 1
            self._store(session, Command("hold", step=header["step"], reason=header["reason"]))

    def current(self, now_ns: int, stale_after_ns: int) -> Command:
        """The newest action if its deadline has not passed, else `hold` (reason `expired`,
        counted), `hold` when none came for `stale_after_ns` (reason `no_action`), or the
        daemon's own `hold`."""
        latest = self.latest
        if latest is None or now_ns - self._latest_received_ns > stale_after_ns:
            return Command("hold", reason="no_action")
        if latest.kind == "action" and now_ns > latest.deadline_ns:
            self.counters.expired += 1
            return Command("hold", step=latest.step, reason="expired")
        return latest

    def _count_sequence(self, seq: int) -> None:
        """The daemon numbers each session's actions and holds 1, 2, 3, ...: gaps are lost
        messages, repeats are duplicates."""
        if seq <= self._last_daemon_seq:
            self.counters.duplicated += 1
            return
        self.counters.lost += seq - self._last_daemon_seq - 1
        self._last_daemon_seq = seq

    def _store(self, session: str, command: Command) -> None:
        if self._on_command is not None:
            self._on_command(command, session)
        if self.latest is None or command.step >= self.latest.step:
            self.latest = command
            self._latest_received_ns = time.monotonic_ns()
