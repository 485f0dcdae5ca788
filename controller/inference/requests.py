"""What travels between a robot's session and the inference worker, and what the worker needs of
a session: its mailbox of requests (newest wins), its queue of finished chunks, and the
observations refused because of their content."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.inference.mailbox import Mailbox
from policies.base import PolicySpec, RobotContext


@dataclass
class InferenceRequest:
    """One observation for the worker, with its robot's context."""

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
    """One robot as the worker sees it (the daemon's Session is one)."""

    robot: str
    spec: PolicySpec
    closed: bool
    requests: Mailbox[InferenceRequest]
    chunks: collections.deque[Chunk]
    refused: collections.deque[Refusal]
    counters: collections.Counter[str]
