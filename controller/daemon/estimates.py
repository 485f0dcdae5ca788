"""What a session estimates about its robot from what arrives: the driver's clock offset (from
observations) and the inference delay in control steps (from chunks). Preallocated rings; no
call allocates but an int."""

from __future__ import annotations

import numpy as np

OFFSET_WINDOW = 32  # observations the clock-offset estimate looks back over
# An observation whose clock offset is this far above the estimate is a clock jump (a stamp
# seconds in the future, say), not a measurement: the estimate ignores it, unless this many in a
# row agree with each other (the estimate started low, behind one delayed first message, or the
# driver's clock really moved): then they are the new estimate.
CLOCK_JUMP_NS = 1_000_000_000
CLOCK_JUMP_CONFIRMATIONS = 8
DELAY_WINDOW = 32  # chunks the inference-delay estimate looks back over
DELAY_PERCENTILE = 90  # of those: one slow inference does not set the delay for the window


class ClockOffset:
    """The driver's monotonic clock minus ours (`offset_ns`), see `record`."""

    def __init__(self) -> None:
        self.offset_ns = 0
        self.last_driver_time_ns = 0  # time_ns of the newest observation the estimate used
        self._offsets = np.full(OFFSET_WINDOW, np.iinfo(np.int64).min, dtype=np.int64)
        self._index = 0
        self._used = 0
        self._jump_offset = 0  # the first of the consecutive jumps seen, and how many
        self._jumps_in_row = 0

    def record(self, driver_time_ns: int, received_ns: int) -> bool:
        """Each observation gives (true offset - its transport delay); the largest of the
        recent ones is the least delayed, so the best estimate, and deadlines converted with it
        are never late because of one slow message. An offset more than CLOCK_JUMP_NS above the
        estimate is ignored (False): one stamp far in the future would otherwise make every
        deadline that late for OFFSET_WINDOW observations. CLOCK_JUMP_CONFIRMATIONS such
        offsets in a row that agree become the new estimate. (An offset far below is a delayed
        message: the maximum ignores it anyway.)"""
        offset = driver_time_ns - received_ns
        if self._used and offset - self.offset_ns > CLOCK_JUMP_NS:
            if self._jumps_in_row and abs(offset - self._jump_offset) <= CLOCK_JUMP_NS:
                self._jumps_in_row += 1
            else:
                self._jump_offset, self._jumps_in_row = offset, 1
            if self._jumps_in_row < CLOCK_JUMP_CONFIRMATIONS:
                return False
            self._offsets.fill(np.iinfo(np.int64).min)  # the old estimate was wrong: start over
        self._jumps_in_row = 0
        self._offsets[self._index] = offset
        self._index = (self._index + 1) % OFFSET_WINDOW
        self._used += 1
        self.offset_ns = int(self._offsets.max())
        self.last_driver_time_ns = driver_time_ns
        return True


class InferenceDelay:
    """A high percentile (DELAY_PERCENTILE) of the observation-to-chunk delays, in control
    steps, of the last DELAY_WINDOW chunks (`steps`): a policy that plans around it (real-time
    chunking) errs on the safe side, without one outlier setting it for long."""

    def __init__(self) -> None:
        self.steps = 0
        self._delays = np.zeros(DELAY_WINDOW, dtype=np.int64)
        self._index = 0
        self._count = 0

    def record(self, steps: int) -> None:
        """A chunk for step s landed at step s + `steps` (once per chunk)."""
        self._delays[self._index] = max(steps, 0)
        self._index = (self._index + 1) % DELAY_WINDOW
        self._count = min(self._count + 1, DELAY_WINDOW)
        recent = self._delays[: self._count]  # the ring, filled slots only
        self.steps = int(np.percentile(recent, DELAY_PERCENTILE, method="higher"))

    def clear(self) -> None:
        """A new episode: no delay measured yet."""
        self._delays.fill(0)
        self._index = 0  # the filled slots are [:_count]: refill from the start
        self._count = 0
        self.steps = 0
