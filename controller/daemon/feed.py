"""The daemon's side of the inference feed: the one daemon module that imports from
controller.inference, so the rest of the daemon treats the feed as an opaque collaborator.

    feed, side = feed_for(policy, telemetry)   # a worker thread, or the loop-fed remote one
    queues = InferenceQueues(robot, spec, counters)   # one robot as the feed sees it
    requests = InferenceRequests(feed, query_period)
    requests.submit_if_due(session, step)      # from an observation, and the tick's write

The feed takes requests from a robot's `queues` and hands back chunks and refusals through
them (`RobotQueues`); the session reads those on the loop thread.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller.inference.frame_slots import FrameSlots
from controller.inference.mailbox import Mailbox
from controller.inference.remote_policy import RemotePolicy
from controller.inference.remote_worker import RemoteInference
from controller.inference.requests import Chunk, InferenceRequest, Refusal
from controller.inference.worker import InferenceWorker
from controller.observe.telemetry import Telemetry
from policies.base import Policy, PolicySpec

if TYPE_CHECKING:
    from controller.daemon.session import Session

__all__ = [
    "Chunk",
    "FrameSlots",
    "InferenceFeed",
    "InferenceQueues",
    "InferenceRequest",
    "InferenceRequests",
    "Refusal",
    "feed_for",
]

# What runs the policy: submit(queues, request); chunks and refusals come back in the queues.
InferenceFeed = InferenceWorker | RemoteInference


def feed_for(
    policy: Policy, telemetry: Telemetry | None
) -> tuple[InferenceFeed, RemoteInference | None]:
    """The feed for `policy`, and the side channel the loop services between ticks (None for
    a policy in this process: a worker thread feeds it). A policy in its own process is fed by
    the loop's thread itself (remote_worker says why)."""
    if isinstance(policy, RemotePolicy):
        remote = RemoteInference(policy, telemetry)
        return remote, remote
    return InferenceWorker(policy, telemetry), None


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


class InferenceRequests:
    """Asks the feed about a robot's newest observation, at most every `query_period` steps."""

    def __init__(self, feed: InferenceFeed, query_period: int) -> None:
        self.feed = feed
        self.query_period = query_period

    def submit_if_due(self, session: Session, step: int) -> None:
        """With the robot's context as it is now (its plan from the observation's step on)."""
        request = session.request_if_due(step, self.query_period)
        if request is not None:
            self.feed.submit(session.queues, request)
