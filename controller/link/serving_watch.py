"""Whether the served policy can answer this tick, as the control loop asks it.

    serving = serving_watch(policy)    # once, when the daemon is built
    serving()                          # each tick: False while down, and once per switch

A policy in a supervised process is briefly not serving when its process fails; the loop then
holds every robot and drops its plan, so that nothing the failed process planned is executed.
A hot standby's take-over (or a swap) can switch processes between two ticks, so that the loop
never sees it down: the policy counts its switches (`epoch`), and the first tick after one is
answered False all the same (its robots hold that tick, their plans and ensembling state go,
and the next observation goes to the new process).
"""

from __future__ import annotations

from collections.abc import Callable

from controller.feed.served_policy import ServedPolicy


def serving_watch(policy: ServedPolicy) -> Callable[[], bool]:
    """`policy.serving`, False once more on the first call after each switch of its process
    (`policy.epoch`)."""
    seen = [policy.epoch]

    def serving() -> bool:
        epoch = policy.epoch
        if epoch != seen[0]:
            seen[0] = epoch
            return False
        return policy.serving

    return serving
