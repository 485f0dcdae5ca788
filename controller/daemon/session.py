"""One connected robot: everything the daemon keeps per driver, fully separate from the others.

The session owns what a policy must remember about its robot (state history, the plan through
the action pipeline, the estimated inference delay, the policy's own memory) and hands it to the
policy as a `RobotContext` with each inference request: policies keep no per-robot state.

Threading: the loop thread owns a session. The inference worker only takes from `requests` and
appends to `chunks` (a deque: append and popleft are atomic), so no lock guards the rest.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from controller.action.pipeline import ActionPipeline
from controller.daemon.tick_messages import TickHeaders
from controller.link.frame_slots import FrameSlots
from controller.link.inference_feed import Chunk, InferenceRequest, Refusal
from controller.link.mailbox import Mailbox
from policies.base import PolicySpec, RobotContext

OFFSET_WINDOW = 32  # observations the clock-offset estimate looks back over
# An observation whose clock offset is this far above the estimate is a clock jump (a stamp
# seconds in the future, say), not a measurement: the estimate ignores it, unless this many in a
# row agree with each other (the estimate started low, behind one delayed first message, or the
# driver's clock really moved): then they are the new estimate.
CLOCK_JUMP_NS = 1_000_000_000
CLOCK_JUMP_CONFIRMATIONS = 8
DELAY_WINDOW = 32  # chunks the inference-delay estimate looks back over
DELAY_PERCENTILE = 90  # of those: one slow inference does not set the delay for the window


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
        """Add the newest state; return a copy of the window (it travels to the worker thread)."""
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


@dataclass
class Session:
    id: str
    identity: bytes
    robot: str
    spec: PolicySpec
    created_ns: int
    pipeline: ActionPipeline
    history: StateHistory
    tick_headers: TickHeaders | None = None  # the tick's packed action and hold headers
    frame_ring: FrameSlots | None = None  # a same-host driver's frames in place (hello asked)
    last_seen_ns: int = 0
    last_observation_ns: int = 0  # when its last accepted observation came (0: none yet)
    last_driver_time_ns: int = 0  # time_ns of the newest observation the clock estimate used
    last_obs_seq: int = -1
    clock_offset_ns: int = 0  # driver's monotonic clock minus ours (see record_clock_offset)
    send_seq: int = 0
    last_request_step: int = -(10**18)
    pending: PendingObservation | None = None  # the newest observation not yet asked about
    episode: int = 0  # counts episode starts; chunks and memory of an older episode are dropped
    episode_start: bool = True  # no chunk of this episode has come back yet
    memory: Mapping[str, np.ndarray] = field(default_factory=dict)
    newest_chunk_obs_seq: int = -1
    closed: bool = False
    requests: Mailbox[InferenceRequest] = field(default_factory=Mailbox)
    chunks: collections.deque[Chunk] = field(default_factory=collections.deque)
    refused: collections.deque[Refusal] = field(default_factory=collections.deque)
    counters: collections.Counter[str] = field(default_factory=collections.Counter)

    def __post_init__(self) -> None:
        self._offsets = np.full(OFFSET_WINDOW, np.iinfo(np.int64).min, dtype=np.int64)
        self._offset_index = 0
        self._offsets_used = 0
        self._jump_offset = 0  # the first of the consecutive jumps seen, and how many
        self._jumps_in_row = 0
        self._delays = np.zeros(DELAY_WINDOW, dtype=np.int64)
        self._delay_index = 0
        self._delay_count = 0
        self._delay_estimate = 0

    @property
    def idle_since_ns(self) -> int:
        """When the session last did what keeps it alive: an accepted observation (or hello)."""
        return self.last_observation_ns or self.created_ns

    def record_clock_offset(self, driver_time_ns: int, received_ns: int) -> bool:
        """Estimate the driver's clock minus ours. Each observation gives (true offset - its
        transport delay); the largest of the recent ones is the least delayed, so the best
        estimate, and deadlines converted with it are never late because of one slow message.
        An offset more than CLOCK_JUMP_NS above the estimate is ignored (False): one stamp far in
        the future would otherwise make every deadline that late for OFFSET_WINDOW observations.
        CLOCK_JUMP_CONFIRMATIONS such offsets in a row that agree become the new estimate. (An
        offset far below is a delayed message: the maximum ignores it anyway.)"""
        offset = driver_time_ns - received_ns
        if self._offsets_used and offset - self.clock_offset_ns > CLOCK_JUMP_NS:
            if self._jumps_in_row and abs(offset - self._jump_offset) <= CLOCK_JUMP_NS:
                self._jumps_in_row += 1
            else:
                self._jump_offset, self._jumps_in_row = offset, 1
            if self._jumps_in_row < CLOCK_JUMP_CONFIRMATIONS:
                return False
            self._offsets.fill(np.iinfo(np.int64).min)  # the old estimate was wrong: start over
        self._jumps_in_row = 0
        self._offsets[self._offset_index] = offset
        self._offset_index = (self._offset_index + 1) % OFFSET_WINDOW
        self._offsets_used += 1
        self.clock_offset_ns = int(self._offsets.max())
        self.last_driver_time_ns = driver_time_ns
        return True

    def _record_inference_delay(self, steps: int) -> None:
        """A chunk for step s landed at step s + `steps`; update the estimate (once per chunk)."""
        self._delays[self._delay_index] = max(steps, 0)
        self._delay_index = (self._delay_index + 1) % DELAY_WINDOW
        self._delay_count = min(self._delay_count + 1, DELAY_WINDOW)
        recent = self._delays[: self._delay_count]  # the ring, filled slots only
        self._delay_estimate = int(np.percentile(recent, DELAY_PERCENTILE, method="higher"))

    @property
    def inference_delay(self) -> int:
        """A high percentile (DELAY_PERCENTILE) of the observation-to-chunk delays, in control
        steps, of the last DELAY_WINDOW chunks of this episode: a policy that plans around it
        (real-time chunking) errs on the safe side, without one outlier setting it for long."""
        return self._delay_estimate

    def start_episode(self) -> None:
        """Forget the plan, the state history, the policy's memory, requests not yet taken and
        chunks in flight; the new episode's first observation is asked about at once."""
        self.episode += 1
        self.episode_start = True
        self.pipeline.drop_plan()
        self.history.clear()
        self.memory = {}
        self.requests.take()
        self.chunks.clear()
        self.pending = None
        self.last_request_step = -(10**18)
        self._delays.fill(0)
        self._delay_count = 0
        self._delay_estimate = 0

    def on_chunk_landed(self, chunk: Chunk, step: int) -> bool:
        """A chunk came back at control step `step`: False (dropped) if it belongs to an ended
        episode; else the policy's new memory is kept and the episode has begun."""
        if chunk.episode != self.episode:
            return False
        if chunk.memory is not None:
            self.memory = chunk.memory
        self.episode_start = False
        self._record_inference_delay(step - chunk.start_step)
        return True

    def request(self) -> InferenceRequest | None:
        """Turn the pending observation into a request with this robot's context (and clear
        it); None when nothing is pending."""
        observation, self.pending = self.pending, None
        if observation is None:
            return None
        context = RobotContext(
            step=observation.step,
            episode_start=self.episode_start,
            state_history=observation.state_window,
            previous_plan=self.pipeline.plan(observation.step),
            inference_delay=self.inference_delay,
            memory=MappingProxyType(self.memory),  # read-only to the policy
        )
        return InferenceRequest(
            observation.obs_seq, observation.received_ns, self.episode, observation.images, context
        )
