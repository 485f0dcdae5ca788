"""An inference feed: what hands each robot's newest observation to the policy, whichever process
the policy lives in (`in_process_feed`: a thread of this process; `remote_feed`: the control loop's
own thread, to an inference process). Here: what every feed offers the daemon (InferenceFeed),
what it needs of a robot's session (RobotQueues: its mailbox of requests, newest wins, its queue
of finished chunks, the observations refused because of their content), and what travels
between them (InferenceRequest, Chunk, Refusal); and what becomes of each request, whoever ran
it (InferenceOutcomes): its chunk handed to the robot's session, its observation refused, or the
failure counted, with the counters `tempo status` shows.

A finished chunk is tagged with the control step of the observation it came from and the
robot's episode, and goes back through the session's `chunks` deque with the policy's new memory
for that robot. A chunk or memory the robot cannot use (wrong shape, not finite) is dropped and
counted; frames a driver wrote in place and rewrote while the policy read them are refused."""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from controller.errors import ErrorCode, InputFault
from controller.feed.mailbox import Mailbox
from controller.observe.telemetry import INFERENCE, MAILBOX_WAIT, Telemetry
from controller.wire.slot_ring import SlotFrames
from policies.base import PolicySpec, Prediction, RobotContext

log = logging.getLogger(__name__)


@dataclass
class InferenceRequest:
    """One observation for the feed, with its robot's context."""

    obs_seq: int
    received_ns: int
    episode: int  # the session's episode number when the observation came
    images: dict[str, np.ndarray]
    context: RobotContext
    # How long after received_ns the robot needs the chunk (its control period x its query
    # period): a request waiting to be batched never waits past it. None: not known.
    budget_ns: int | None = None

    @property
    def step(self) -> int:
        return self.context.step


@dataclass
class Chunk:
    start_step: int
    actions: np.ndarray  # (chunk_size, action_dim) float32
    obs_seq: int
    obs_received_ns: int
    inference_ns: int
    episode: int
    memory: Mapping[str, np.ndarray] | None = None  # the policy's new memory (arrays copied)
    checkpoint: str | None = None  # the policy.path that served it, where the feed knows it


@dataclass(frozen=True)
class Refusal:
    """An observation the policy could not use because of its content (InputFault): the loop
    tells the robot with an `error`."""

    obs_seq: int
    reason: str
    code: str = "unusable_input"  # the error code the robot gets (controller.errors.ErrorCode)


class RobotQueues(Protocol):
    """One robot as a feed sees it (the daemon's Session is one)."""

    robot: str
    spec: PolicySpec
    closed: bool
    requests: Mailbox[InferenceRequest]
    chunks: collections.deque[Chunk]
    refused: collections.deque[Refusal]
    counters: collections.Counter[str]


@dataclass(eq=False)
class InferenceQueues:
    """One robot as the feed sees it (a `RobotQueues`): its mailbox of requests (newest wins),
    the chunks and refusals the feed hands back (deques: append and popleft are atomic), and
    the session's counters, which the feed adds its own to."""

    robot: str
    spec: PolicySpec
    counters: collections.Counter[str]
    closed: bool = False
    requests: Mailbox[InferenceRequest] = field(default_factory=Mailbox)
    chunks: collections.deque[Chunk] = field(default_factory=collections.deque)
    refused: collections.deque[Refusal] = field(default_factory=collections.deque)


class Pollable(Protocol):
    def filenos(self) -> list[int]:
        """The descriptors to poll (a zmq.Poller takes file descriptors)."""
        ...


class SideChannel(Protocol):
    """Work the receiving thread does between robots' messages: another channel to poll (None
    when nothing is awaited on it), held for the duration of the poll, and its servicing."""

    def polled(self) -> contextlib.AbstractContextManager[Pollable | None]: ...

    def service(self, until_ns: int) -> None: ...


class InferenceFeed(Protocol):
    """What the daemon needs of a feed: requests in, chunks back through each robot's queues
    (`outcomes`), and the counters `tempo status` shows."""

    inferences: int
    failures: int
    non_finite: int  # chunks dropped: not finite, or the wrong shape
    input_faults: int  # observations refused: the reference fails on them too
    frames_overwritten: int  # frames in place the driver rewrote while the policy read them

    def submit(self, session: RobotQueues, request: InferenceRequest) -> None:
        """From the control loop's thread, never waiting: the robot's newest observation wins."""
        ...

    def start(self) -> None: ...

    @property
    def alive(self) -> bool:
        """Whether the feed still serves (it must outlive any policy failure)."""
        ...

    def stop(self, timeout: float = 0.5) -> None: ...

    @property
    def side_channel(self) -> SideChannel | None:
        """What the control loop's receiving thread services between messages (a policy in its
        own process: its channel), or None (the feed has its own thread)."""
        ...


# -- what becomes of each request ----------------------------------------------------------------

WARNING_INTERVAL_NS = 1_000_000_000


class InferenceOutcomes:
    def __init__(self, telemetry: Telemetry | None = None) -> None:
        telemetry = telemetry or Telemetry(enabled=False)
        self._timed = telemetry.enabled
        self._t_mailbox = telemetry.section(MAILBOX_WAIT)
        self._t_inference = telemetry.section(INFERENCE)
        self.inferences = 0
        self.failures = 0
        self.non_finite = 0
        self.input_faults = 0  # observations refused because the reference fails on them too
        self.frames_overwritten = 0  # written in place, then rewritten by the driver mid-read
        self._last_warning_ns = -WARNING_INTERVAL_NS
        self._suppressed = 0

    def began(self, request: InferenceRequest) -> int:
        """The request starts now: returns the time, for `finished`."""
        started = time.monotonic_ns()
        if self._timed:  # received_ns is the dispatcher's time.monotonic_ns() too
            self._t_mailbox.record_ns(started - request.received_ns)
        return started

    def failed(self, session: RobotQueues, request: InferenceRequest, exc: Exception) -> None:
        """The policy raised on this request: the robot's observation at fault (InputFault: tell
        it), or anything else (keep serving from the chunks it has)."""
        if isinstance(exc, InputFault):
            self.input_faults += 1
            session.counters["input_faults"] += 1
            session.refused.append(Refusal(request.obs_seq, str(exc)))
            self._warn(f"robot {session.robot}: observation {request.obs_seq} refused: {exc}")
            return
        self.failures += 1
        session.counters["inference_failures"] += 1
        self._warn(f"inference failed for robot {session.robot}: {exc}")

    def finished(
        self,
        session: RobotQueues,
        request: InferenceRequest,
        prediction: Prediction,
        started_ns: int,
        checkpoint: str | None = None,
    ) -> None:
        """The policy answered: hand the chunk to the session, or say why not; `checkpoint`:
        the policy.path of the process that answered (a swap's old or new one)."""
        elapsed = time.monotonic_ns() - started_ns
        if self._timed:
            self._t_inference.record_ns(elapsed)
        self.inferences += 1
        images = request.images
        if isinstance(images, SlotFrames) and not images.unchanged():
            # Frames in place: the policy has read (uploaded) them by now; if the driver wrote
            # the slot meanwhile, what was served is a torn mix: never executed.
            self.frames_overwritten += 1
            session.counters["frames_overwritten"] += 1
            session.refused.append(
                Refusal(
                    request.obs_seq,
                    f"observation {request.obs_seq} was refused: the driver wrote its frame slot "
                    f"{images.index} while the policy read it; write a slot only before sending "
                    "it (the client's ring does this), or use more slots",
                    ErrorCode.FRAME_SLOT.value,
                )
            )
            return
        shape = (session.spec.chunk_size, session.spec.action_dim)
        # A policy written in code may return anything: only a Prediction of usable parts is.
        usable = isinstance(prediction, Prediction)
        actions = self._usable_chunk(prediction.actions, shape) if usable else None
        memory = self._usable_memory(prediction.memory) if usable else False
        if actions is None or isinstance(memory, bool):  # False: not usable
            self.non_finite += 1
            session.counters["chunks_rejected"] += 1
            self._warn(
                f"policy returned an unusable chunk or memory for robot {session.robot} (a "
                "finite chunk of the spec's shape, memory a mapping of names to arrays); dropped"
            )
            return
        session.chunks.append(
            Chunk(
                start_step=request.step,
                actions=actions,
                obs_seq=request.obs_seq,
                obs_received_ns=request.received_ns,
                inference_ns=elapsed,
                episode=request.episode,
                memory=memory,
                checkpoint=checkpoint,
            )
        )

    def _warn(self, message: str) -> None:
        """At most one warning a second: a failing policy fails on every observation."""
        now = time.monotonic_ns()
        if now - self._last_warning_ns < WARNING_INTERVAL_NS:
            self._suppressed += 1
            return
        if self._suppressed:
            message += f" ({self._suppressed} similar messages suppressed)"
        log.warning("%s", message)
        self._last_warning_ns, self._suppressed = now, 0

    @staticmethod
    def _usable_memory(raw: object) -> dict[str, np.ndarray] | None | bool:
        """The policy's new memory for the robot as a dict of its own array copies (the policy
        may reuse its buffers), None to keep the old one, False when it is not a mapping of
        names to arrays."""
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            return False
        memory = {}
        for name, value in raw.items():
            if not isinstance(name, str) or not isinstance(value, np.ndarray):
                return False
            memory[name] = value.copy()
        return memory

    @staticmethod
    def _usable_chunk(raw: object, shape: tuple[int, int]) -> np.ndarray | None:
        """The chunk as float32 of the expected shape with every value finite, else None.
        Cast before the finite check: float64 beyond float32's range becomes Inf."""
        if not isinstance(raw, np.ndarray) or raw.dtype.kind not in "fiu" or raw.shape != shape:
            return None
        with np.errstate(over="ignore", invalid="ignore"):
            actions = raw.astype(np.float32)
        return actions if np.isfinite(actions).all() else None
