"""The policy as the daemon serves it, wherever its model runs: one protocol, no probes.

    policy: ServedPolicy = build_policy(*sections)    # a Runner or PriorFallback, in this process
    policy: ServedPolicy = RemotePolicy(command)      # in its own supervised process
    policy: ServedPolicy = served_here(plain_policy)  # any Policy (tests, embedding)
    feed = policy.feed(telemetry)                     # how the daemon hands it observations

Three implementations: the runner (and PriorFallback over two runners) in this process, fed by a
thread of this process; RemotePolicy, fed by the control loop's own thread between ticks; and
`served_here`, which serves any plain Policy (a pure function of observation and context) the
runner's way, on a thread. Callers ask only what this protocol declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from controller.errors import PolicyError
from controller.feed.in_process_feed import InProcessFeed
from controller.feed.inference_feed import InferenceFeed
from controller.observe.telemetry import Telemetry
from policies.base import Policy, PolicySpec, Prediction, RobotContext


class ServedPolicy(Policy, Protocol):
    """What the daemon asks of the policy it serves (`spec` and `predict` are Policy's)."""

    @property
    def serving(self) -> bool:
        """False while it cannot answer (an inference process restarting): robots are held."""
        ...

    def status(self) -> dict[str, Any]:
        """What `tempo status` shows of it (tiers, device, process), JSON-ready."""
        ...

    def attach_telemetry(self, telemetry: Telemetry) -> None:
        """Record its step phases (upload, model, download) where the daemon records the rest."""
        ...

    def feed(self, telemetry: Telemetry) -> InferenceFeed:
        """A new feed that hands it each robot's newest observation (not started)."""
        ...

    @property
    def epoch(self) -> int:
        """How many times another process took over serving (a hot standby, a swap): the loop
        holds its robots for one tick after each change (serving_watch)."""
        ...

    def swap(self, path: str, *, now: bool, name: str) -> dict[str, Any]:
        """Start serving the checkpoint at `path` instead (`tempo swap`; `name`: the policy's,
        for its status); its state, or PolicyError (one sentence) when refused."""
        ...

    def cancel_swap(self) -> dict[str, Any]:
        """End the swap under way (`tempo swap --cancel`); its state once ended, or
        PolicyError (one sentence) when there is none."""
        ...


class ServedInProcess:
    """What a policy served in the daemon's own process says to a switch or a swap: it never
    switches processes, and cannot be swapped (that needs a process to build the new one in)."""

    epoch = 0

    def swap(self, path: str, *, now: bool, name: str) -> dict[str, Any]:
        raise PolicyError(
            "a swap needs the policy in its own process (supervision.inference_process: true)"
        )

    def cancel_swap(self) -> dict[str, Any]:
        raise PolicyError(
            "no swap is under way: a swap needs the policy in its own process "
            "(supervision.inference_process: true)"
        )


class served_here(ServedInProcess):  # noqa: N801 - reads as what it makes: served_here(policy)
    """Any plain Policy served in this process on a feed thread, with nothing more to say."""

    serving = True

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    @property
    def spec(self) -> PolicySpec:
        return self._policy.spec

    def predict(self, images: Mapping[str, np.ndarray], context: RobotContext) -> Prediction:
        return self._policy.predict(images, context)

    def status(self) -> dict[str, Any]:
        return {}

    def attach_telemetry(self, telemetry: Telemetry) -> None:
        """A plain policy has no phases of its own to time."""

    def feed(self, telemetry: Telemetry) -> InferenceFeed:
        return InProcessFeed(self, telemetry)
