"""What a lockstep environment needs of the daemon's messages: the first action computed from
each observation.

The daemon sends one action or hold per robot per tick. A chunk's first row goes out at the tick
it lands on, its later rows at the next ticks with the same observation seq, so the client's
`receive` (the newest command) may already hold row 1 or 2 when a loaded driver looks. LeRobot's
eval loop applies the first action of each chunk it asks for (n_action_steps 1): this records
that one as it arrives (TempoClient's `on_command`), before a newer one replaces it.

A lockstep client says so in its hello, so each chunk plays from the tick it lands on: the first
action computed from an observation is its chunk's first row, however long inference took.
"""

from __future__ import annotations

import numpy as np

from controller.wire.commands import Command


class FirstAnswers:
    """Pass `on_command` to the TempoClient (connect_env_client(on_command=...))."""

    def __init__(self) -> None:
        self._first: dict[int, tuple[np.ndarray, int]] = {}  # obs seq -> (action, its step)

    def on_command(self, command: Command, session: str) -> None:
        if command.kind != "action" or command.action is None or command.obs_seq < 0:
            return
        if command.obs_seq not in self._first:
            self._first[command.obs_seq] = (command.action.copy(), command.step)
            for old in [s for s in self._first if s < command.obs_seq - 64]:
                del self._first[old]

    def take(self, seq: int) -> tuple[np.ndarray, int] | None:
        """The first action computed from observation `seq` or a newer one, and its step."""
        answered = [s for s in self._first if s >= seq]
        if not answered:
            return None
        return self._first.pop(min(answered))
