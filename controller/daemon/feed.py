"""How the daemon asks its inference feed for a chunk: at most every `query_period` steps, on a
robot's newest observation, with that robot's context as it is then.

    requests = InferenceRequests(feed, query_period)   # feed: the policy's (ServedPolicy.feed)
    requests.submit_if_due(session, step)              # from an observation, and the tick's write

The feed takes requests from a robot's `queues` and hands back chunks and refusals through them
(controller.link.inference_feed); the session reads those on the loop thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.link.inference_feed import InferenceFeed

if TYPE_CHECKING:
    from controller.daemon.session import Session


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
