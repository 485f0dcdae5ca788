"""What a robot's session keeps of its observations between the driver and the inference feed:
the window of recent states a policy sees (StateHistory) and the newest accepted observation
waiting for its query step (PendingObservation)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PendingObservation:
    """An accepted observation waiting for the query period to come round."""

    step: int  # the control step it belongs to
    obs_seq: int
    received_ns: int
    images: dict[str, np.ndarray]
    state_window: np.ndarray  # (state_history, state_size) float32, this state last


class StateHistory:
    """The last K state vectors, oldest first; at episode start the first one fills every slot."""

    def __init__(self, length: int, size: int) -> None:
        self._buffer = np.zeros((length, size), dtype=np.float32)
        self._filled = False

    def push(self, state: np.ndarray) -> np.ndarray:
        """Add the newest state; return a copy of the window (it travels to the inference feed)."""
        if not self._filled:
            self._buffer[:] = state
            self._filled = True
        else:
            self._buffer[:-1] = self._buffer[1:]
            self._buffer[-1] = state
        return self._buffer.copy()

    def clear(self) -> None:
        """A new episode: the next state fills every slot."""
        self._filled = False
