"""Fault injection: make one tier of the runner fail in a chosen way, so the ladder can be tested.

    runner = Runner(policy, config, faults={"graph": FaultPlan(raise_on={0}),
                                            "compiled": FaultPlan(start_error=0.5)})

Call indices count the tier's `run()` calls after start-up (0 = the first step it serves; the
re-run of a failed step and a re-promotion's parity check count too). Start-up faults are separate
fields, because start-up runs a tier a varying number of times (warm-up, parity). For "from call n
on" pass `range(n, sys.maxsize)`.

Nothing here is used unless a `faults` mapping is passed to the Runner.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

from controller.inference.tiers import Outputs, Tier


class InjectedFault(RuntimeError):
    """Raised by a tier on purpose, by a FaultPlan."""


@dataclass(frozen=True)
class FaultPlan:
    """What goes wrong in one tier, and when."""

    raise_on: Collection[int] = ()
    """Serving calls that raise InjectedFault."""
    nan_on: Collection[int] = ()
    """Serving calls whose output is all NaN."""
    slow_on: Collection[int] = ()
    """Serving calls that sleep `slow_s` on the host before returning (deadline overruns)."""
    slow_s: float = 0.05
    sleep: Callable[[float], None] = time.sleep
    """How a slow call waits: a test with a fake clock passes the clock's advance."""
    fail_build: bool = False
    """Building the tier raises (stands for a compile or capture failure)."""
    start_error: float = 0.0
    """Start-up outputs are scaled by (1 + start_error): a relative parity error of that size."""
    start_nan: bool = False
    """Start-up outputs are all NaN (fails the finite check)."""


class FaultyTier(Tier):
    """A tier that behaves like `inner` except where `plan` says otherwise."""

    def __init__(self, inner: Tier, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.name = inner.name
        self.precision = inner.precision
        self.module = inner.module
        self.calls = 0
        self._serving = False

    def build(self) -> None:
        if self.plan.fail_build:
            raise InjectedFault(f"injected build failure of tier {self.name}")
        self.inner.build()

    def begin_serving(self) -> None:
        self._serving = True
        self.inner.begin_serving()

    def run(self) -> Outputs:
        plan = self.plan
        if not self._serving:
            out = self.inner.run()
            if plan.start_nan:
                return tuple(torch.full_like(o, float("nan")) for o in out)
            return tuple(o * (1.0 + plan.start_error) for o in out) if plan.start_error else out
        index = self.calls
        self.calls += 1
        if index in plan.raise_on:
            raise InjectedFault(f"injected exception in tier {self.name} at call {index}")
        out = self.inner.run()
        if index in plan.nan_on:
            return tuple(torch.full_like(o, float("nan")) for o in out)
        if index in plan.slow_on:
            plan.sleep(plan.slow_s)
        return out
