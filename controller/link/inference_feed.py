"""An inference feed: what hands each robot's newest observation to the policy, whichever process
the policy lives in (`thread_feed`: a thread of this process; `remote_feed`: the control loop's
own thread, to an inference process). Here: what every feed offers the daemon (InferenceFeed),
what it needs of a robot's session (RobotQueues: its mailbox of requests, newest wins, its queue
of finished chunks, the observations refused because of their content), and what travels
between them (InferenceRequest, Chunk, Refusal)."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from controller.link.mailbox import Mailbox
from policies.base import PolicySpec, RobotContext


@dataclass
class InferenceRequest:
    """One observation for the feed, with its robot's context."""

    obs_seq: int
    received_ns: int
    episode: int  # the session's episode number when the observation came
    images: dict[str, np.ndarray]
    context: RobotContext

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
    def fileno(self) -> int: ...


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
