"""The tier ladder through a real daemon and client: injected faults demote without a missed tick.

The compiled tier uses torch.compile's `eager` debug backend here (it traces like inductor but
needs no C++ compile), so the CPU suite stays fast; the demotion logic is the same.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from controller.inference.faults import FaultPlan
from controller.inference.runner import Runner
from policies.catalog import build_tensor_policy
from tests.conftest import ipc_config, recording_client, running_daemon

JOINTS = [f"joint_{i}" for i in range(6)]
FROM_10 = range(10, sys.maxsize)


def ladder_daemon(tmp_path, plan: FaultPlan, budget_ms: float | None):
    """A runner on the compiled tier with `plan` injected. The step budget is set only where
    the test is about overruns: elsewhere a loaded machine's slow step must not demote."""
    config = ipc_config(
        tmp_path,
        "control.rate_hz=50",
        "runner.top_tier=compiled",
        "runner.serve_slower_tiers=true",  # this test is of the compiled tier
        "runner.compile_backend=eager",
        f"runner.step_budget_ms={'null' if budget_ms is None else budget_ms}",
    )
    policy = build_tensor_policy(config.policy, config.robot)
    runner = Runner(policy, config.runner, device="cpu", faults={"compiled": plan})
    runner.start()
    assert runner.tier == "compiled"
    return config, runner


def drive(config, until, ticks_after: int = 20) -> tuple[list, int]:
    """A driver streaming observations at ~100 Hz until `until()` holds, then for `ticks_after`
    more of the daemon's commands (failing after 60 s); returns every command as it reached
    the driver (recorded on arrival, whether or not the loop polled in time), and the pacer's
    missed ticks meanwhile are read by the caller."""
    client = recording_client(config.server.bind, "arm0")
    with client:
        deadline = time.monotonic() + 60
        reached_at = None
        while reached_at is None or len(client.records) < reached_at + ticks_after:
            assert time.monotonic() < deadline, f"not reached within 60 s: {client.records[-5:]}"
            client.send_observation(
                {"front": np.zeros((96, 128, 3), np.uint8)}, np.zeros(6, np.float32)
            )
            client.receive(timeout_s=0.01)
            if reached_at is None and until():
                reached_at = len(client.records)
        return list(client.records), client.counters.lost


def assert_every_tick_acted(records: list, missed: int, lost: int) -> None:
    """From the first action on: only actions, finite, one per step. A loaded machine may
    deschedule the daemon, and its pacer then skips ticks (counted, in this same run): those
    are the only gaps allowed."""
    kinds = [r.kind for r in records]
    acting = records[kinds.index("action") :]
    assert all(r.kind == "action" for r in acting), [r for r in acting if r.kind != "action"]
    assert all(r.finite for r in acting)
    steps = [r.step for r in acting]
    gaps = sum(b - a - 1 for a, b in zip(steps, steps[1:], strict=False))
    assert steps == sorted(set(steps)), "a step came twice or out of order"
    assert gaps <= missed, f"{gaps} ticks missing, the pacer skipped {missed}: {steps}"
    assert lost == 0


@pytest.mark.parametrize(
    "plan, cause, budget_ms",
    [
        (FaultPlan(raise_on=FROM_10), "exception", None),
        (FaultPlan(nan_on=FROM_10), "non_finite", None),
        (FaultPlan(slow_on=FROM_10, slow_s=0.03), "overrun", 15.0),
    ],
)
def test_fault_demotes_to_eager_without_a_missed_tick(tmp_path, plan, cause, budget_ms):
    config, runner = ladder_daemon(tmp_path, plan, budget_ms)
    with running_daemon(config, runner) as daemon:
        records, lost = drive(config, until=lambda: runner.tier == "eager_fp32")
        missed = daemon.pacer.missed_ticks
        assert [d["cause"] for d in runner.status()["demotions"]] == [cause]
        assert daemon.status()["policy"]["tier"] == "eager_fp32"
    assert_every_tick_acted(records, missed, lost)


def test_no_fault_keeps_the_top_tier(tmp_path):
    config, runner = ladder_daemon(tmp_path, FaultPlan(), None)
    with running_daemon(config, runner) as daemon:
        records, lost = drive(config, until=lambda: runner.status()["steps"] >= 30)
        missed = daemon.pacer.missed_ticks
    assert runner.tier == "compiled" and runner.demotions == []
    assert_every_tick_acted(records, missed, lost)
