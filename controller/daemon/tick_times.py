"""The control tick's telemetry, per robot: `ensembler` (its new chunks merged, then this step's
action proposed), `guards` (teleop mix and guard chain), `send` and `obs_to_action`.

The tick merges every robot's chunks (read) before it proposes any robot's action (update), so
a robot's merge time is kept in its slot until its update adds it to `ensembler`. Off (telemetry
disabled), the loop does not call this at all: one bool test per robot and phase.
"""

from __future__ import annotations

from controller.observe.telemetry import ENSEMBLER, GUARDS, OBS_TO_ACTION, SEND, Telemetry


class TickTimes:
    """Laps of one robot's update at a time (an `ActionPipeline.step` StepLaps)."""

    def __init__(self, telemetry: Telemetry, robots: int) -> None:
        """`robots`: the most sessions a tick iterates (server.max_robots)."""
        self.enabled = telemetry.enabled
        self.clock = telemetry.clock
        self._ensembler = telemetry.section(ENSEMBLER)
        self._guards = telemetry.section(GUARDS)
        self.send = telemetry.section(SEND)
        self.obs_to_action = telemetry.section(OBS_TO_ACTION)
        self._merge_ns = [0] * robots  # per position in the tick's sessions
        self._t = 0

    def merged(self, index: int, started: int) -> None:
        """The robot at `index` merged its chunks from `started` until now."""
        if index < len(self._merge_ns):
            self._merge_ns[index] = self.clock() - started

    def updating(self, index: int) -> None:
        """The robot at `index` starts its update: its ensembler time counts its merge."""
        if index < len(self._merge_ns):
            self._t = self.clock() - self._merge_ns[index]
            self._merge_ns[index] = 0
        else:
            self._t = self.clock()

    def proposed(self) -> None:
        self._t = self._ensembler.lap(self._t)

    def checked(self) -> None:
        self._t = self._guards.lap(self._t)
