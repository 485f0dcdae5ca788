"""One connected robot: everything the daemon keeps per driver, fully separate from the others.

Threading: the loop thread owns a session. The inference worker only takes from `requests` and
appends to `chunks` (a deque: append and popleft are atomic), so no lock guards the rest.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

from controller.action.ensembler import ChunkEnsembler
from controller.action.guards import GuardChain
from controller.action.teleop import TeleopMixer
from controller.inference.mailbox import Mailbox
from policies.base import PolicySpec

OFFSET_WINDOW = 32  # observations the clock-offset estimate looks back over


@dataclass
class InferenceRequest:
    """One observation for the worker, tagged with the control step it belongs to."""

    step: int
    obs_seq: int
    received_ns: int
    images: dict[str, np.ndarray]
    state: np.ndarray  # (state_history, state_size) float32


@dataclass
class Chunk:
    start_step: int
    actions: np.ndarray  # (chunk_size, action_dim) float32
    obs_seq: int
    obs_received_ns: int
    inference_ns: int


class StateHistory:
    """The last K state vectors, oldest first; at episode start the first one fills every slot."""

    def __init__(self, length: int, size: int) -> None:
        self._buffer = np.zeros((length, size), dtype=np.float32)
        self._filled = False

    def push(self, state: np.ndarray) -> np.ndarray:
        """Add the newest state; return a copy of the window (it travels to the worker thread)."""
        if not self._filled:
            self._buffer[:] = state
            self._filled = True
        else:
            self._buffer[:-1] = self._buffer[1:]
            self._buffer[-1] = state
        return self._buffer.copy()


@dataclass
class Session:
    id: str
    identity: bytes
    robot: str
    spec: PolicySpec
    created_ns: int
    ensembler: ChunkEnsembler
    guards: GuardChain
    teleop: TeleopMixer
    history: StateHistory
    last_seen_ns: int = 0
    last_obs_seq: int = -1
    last_obs_received_ns: int = 0  # 0: no observation yet
    clock_offset_ns: int = 0  # driver's monotonic clock minus ours (see record_clock_offset)
    send_seq: int = 0
    last_request_step: int = -(10**18)
    pending: InferenceRequest | None = None  # waiting for the query period to come round
    teleop_values: np.ndarray | None = None
    newest_chunk_obs_seq: int = -1
    closed: bool = False
    requests: Mailbox[InferenceRequest] = field(default_factory=Mailbox)
    chunks: collections.deque[Chunk] = field(default_factory=collections.deque)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)

    def __post_init__(self) -> None:
        dim = self.spec.action_dim
        # Per-tick scratch buffers, allocated once.
        self.proposed = np.zeros(dim, dtype=np.float32)
        self.mixed = np.zeros(dim, dtype=np.float32)
        self.command = np.zeros(dim, dtype=np.float32)
        self.last_command: np.ndarray | None = None
        self._offsets = np.full(OFFSET_WINDOW, np.iinfo(np.int64).min, dtype=np.int64)
        self._offset_index = 0

    def record_clock_offset(self, driver_time_ns: int, received_ns: int) -> None:
        """Estimate the driver's clock minus ours. Each observation gives (true offset - its
        transport delay); the largest of the recent ones is the least delayed, so the best
        estimate, and deadlines converted with it are never late because of one slow message."""
        self._offsets[self._offset_index] = driver_time_ns - received_ns
        self._offset_index = (self._offset_index + 1) % OFFSET_WINDOW
        self.clock_offset_ns = int(self._offsets.max())
