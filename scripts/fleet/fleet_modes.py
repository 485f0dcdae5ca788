"""The runs of scripts/fleet/bench_fleet.py, each returning the rows it reports (JSON-able dicts).

    fleet_run(config, robots, seconds, tiny, drive)       # robots at their rate, on one policy
    fleet_run(config, robots, seconds, tiny, "eager")     # saturation: robots never wait
    mixed_run(config, {"act": 8, "pi0": 2}, seconds, tiny, drive)
    admission_run(config, n, seconds, tiny, drive, max_load=None)

`drive` is how each robot times its observations (fleet_robots.DRIVES).

`config` is a whole daemon config (load_config); the callers set its sockets and rates.
"""

from __future__ import annotations

import math
import time
from typing import Any

from controller.config import TempoConfig, policy_views
from controller.daemon.admission import Capacity
from controller.daemon.execution import resolve_execution
from controller.feed.batch_window import step_times_of
from scripts.fleet.fleet_robots import (
    RobotProcess,
    all_closed,
    run_robots,
    stop_and_join,
)
from scripts.fleet.fleet_serving import (
    GpuSampler,
    bucket_step_ms,
    serving,
    start_policies,
    stop_policies,
)
from scripts.measure import percentile


def _query_period(view: TempoConfig, policy: Any) -> int:
    """The query period in effect (the config's, else the checkpoint's)."""
    return resolve_execution(view.execution, policy.spec)[0].query_period


def _robots_of(endpoint: str, view: TempoConfig, policy: Any, name: str | None, count: int,
               prefix: str, drive: str) -> list[RobotProcess]:  # fmt: skip
    """`count` robots on `policy`, each asking every query period (of `view`'s control rate)."""
    ticks = _query_period(view, policy)
    period = 0.0 if drive == "eager" else ticks / view.control.rate_hz
    return [RobotProcess(endpoint, f"{prefix}{k}", policy.spec, name, period, ticks, drive)
            for k in range(count)]  # fmt: skip


# The daemon's own telemetry sections on the same path (every policy together), ms.
DAEMON_SPLIT = (  # (row field, section, label as bench_fleet prints it)
    ("daemon_wait", "mailbox_wait", "wait"),  # observation received -> the feed starts on it
    ("daemon_inference", "inference", "infer"),  # one policy call, the process trips with it
    ("daemon_obs_to_action", "obs_to_action", "daemon o->a"),  # received -> first action sent
)


def daemon_split(status: dict[str, Any]) -> dict[str, float | None]:
    """p50/p99 of the daemon's sections in DAEMON_SPLIT: where an observation's time goes
    inside the daemon; the robot's observation-to-action minus the last is its socket trips."""
    sections = (status.get("telemetry") or {}).get("sections") or {}
    out: dict[str, float | None] = {}
    for field, name, _ in DAEMON_SPLIT:
        entry = sections.get(name) or {}
        for stat in ("p50", "p99"):
            value = entry.get(f"{stat}_s")
            out[f"{field}_{stat}_ms"] = None if value is None else value * 1e3
    return out


def _totals(runs: list[dict[str, Any]], latencies: list[float]) -> dict[str, Any]:
    """What a group of robots saw, added up: p50/p99 over all chunks, the worst robot's p99."""
    worst = [r["p99_ms"] for r in runs if r["p99_ms"] is not None]
    return {
        "robots": len(runs),
        "chunks": sum(r["chunks"] for r in runs),
        "obs_to_action_p50_ms": percentile(latencies, 50),
        "obs_to_action_p99_ms": percentile(latencies, 99),
        "worst_robot_p99_ms": max(worst) if worst else None,
        "late_chunks": sum(r["late_chunks"] for r in runs),
        "unserved_periods": sum(r["unserved_periods"] for r in runs),
        "lost": sum(r["lost"] for r in runs),
        "expired": sum(r["expired"] for r in runs),
        "reconnects": sum(r["reconnects"] for r in runs),
    }


def fleet_run(config: TempoConfig, robots: int, seconds: float, tiny: bool,
              drive: str) -> dict[str, Any]:  # fmt: skip
    """`robots` robots on the config's one policy, driven as `drive`."""
    policies = start_policies(config, tiny)
    try:
        with serving(config, policies) as daemon, GpuSampler() as gpu:
            view = policy_views(config)[0][1]
            fleet = _robots_of(daemon.endpoint, view, policies[0], None, robots, "r", drive)
            status = run_robots(fleet, seconds, status=daemon.status)
    finally:
        stop_policies(policies, tiny)
    runs = [robot.run.summary() for robot in fleet]
    latencies = [x for robot in fleet for x in robot.run.latencies_ms]
    return {
        "mode": "saturate" if drive == "eager" else "fleet",
        "drive": drive,
        "batch_sizes": list(config.execution.batch_sizes),
        "rate_hz": config.control.rate_hz,
        **_totals(runs, latencies),
        "robot_steps_per_s": sum(r["chunks"] for r in runs) / seconds,
        "policy_steps_per_s": status.get("inferences", 0) / seconds,
        "missed_ticks": status.get("missed_ticks"),
        **daemon_split(status),
        "steps_by_bucket": status.get("policy", {}).get("steps_by_bucket"),
        "step_ms_by_bucket": bucket_step_ms(status.get("policy", {})),
        "gpu_util": gpu.summary(),
        "per_robot": runs,
    }


def mixed_run(config: TempoConfig, robots: dict[str, int], seconds: float, tiny: bool,
              drive: str) -> list[dict[str, Any]]:  # fmt: skip
    """One daemon serving the config's policies, `robots[name]` robots on each, every robot
    at its policy's query rate, driven as `drive`. A row per policy, then one for the daemon."""
    views = dict(policy_views(config))
    unknown = sorted(set(robots) - set(views))
    if unknown:
        raise SystemExit(f"--mixed-robots names {unknown}, which the config's policies "
                         f"({sorted(views)}) do not include")  # fmt: skip
    policies = start_policies(config, tiny)
    served = dict(zip(views, policies, strict=True))
    fleets: dict[str, list[RobotProcess]] = {}
    try:
        with serving(config, policies) as daemon, GpuSampler() as gpu:
            for name, count in robots.items():
                fleets[name] = _robots_of(daemon.endpoint, views[name], served[name], name,
                                          count, f"{name}-", drive)  # fmt: skip
            everyone = [robot for fleet in fleets.values() for robot in fleet]
            status = run_robots(everyone, seconds, status=daemon.status)
    finally:
        stop_policies(policies, tiny)
    rows = []
    for name, fleet in fleets.items():
        runs = [robot.run.summary() for robot in fleet]
        lane = status.get("policies", {}).get(name, {})
        totals = _totals(runs, [x for robot in fleet for x in robot.run.latencies_ms])
        rows.append({
            "mode": "mixed",
            "drive": drive,
            "policy": name,
            "rate_hz": runs[0]["rate_hz"] if runs else None,
            "deadline_ms": runs[0]["deadline_ms"] if runs else None,
            "deadline_ticks": runs[0]["deadline_ticks"] if runs else None,
            **totals,
            "all_on_time": totals["late_chunks"] == 0 and totals["unserved_periods"] == 0
            and all(r["chunks"] > 0 for r in runs),
            "late_actions_dropped": lane.get("late_actions_dropped"),
            "load": lane.get("load"),
            # Observations further apart than this get holds between chunks (the watchdog).
            "watchdog_hold_ms": views[name].guards.hold_after_ms,
            "steps_by_bucket": lane.get("policy", {}).get("steps_by_bucket"),
            "step_ms_by_bucket": bucket_step_ms(lane.get("policy", {})),
            "per_robot": runs,
        })  # fmt: skip
    daemon_row = {"mode": "mixed", "policy": "(daemon)", "control_hz": config.control.rate_hz}
    rows.append({**daemon_row, "missed_ticks": status.get("missed_ticks"),
                 **daemon_split(status), "gpu_util": gpu.summary()})  # fmt: skip
    return rows


def admission_limit(config: TempoConfig, policy: Any, robots: int) -> dict[str, Any]:
    """The policy's load (controller.daemon.admission) with `robots` and one more, from the
    step times its runner measured, and a max_load between the two (the geometric mean of the
    first and of the second capped at 1: a max_load above 1 would admit robots past capacity)."""
    view = policy_views(config)[0][1]
    query_hz = config.control.rate_hz / _query_period(view, policy)
    sizes = policy.status().get("batch_sizes") or view.execution.batch_sizes
    capacity = Capacity("default", query_hz, sizes, None, lambda: step_times_of(policy.status()))
    now, more = capacity.load(robots), capacity.load(robots + 1)
    between = None
    if now is not None and more is not None and now < min(more, 1.0):
        between = math.sqrt(now * min(more, 1.0))
    return {"load_n": now, "load_n_plus_1": more, "max_load": between}


def admission_run(config: TempoConfig, robots: int, seconds: float, tiny: bool, drive: str,
                  max_load: float | None = None) -> dict[str, Any]:  # fmt: skip
    """With execution.max_load set, robots connect one by one up to `robots` + 1; the admitted
    ones keep being served for `seconds` after the last hello. `max_load` None: between the
    load of `robots` and of one more (admission_limit)."""
    policies = start_policies(config, tiny)
    try:
        limit = admission_limit(config, policies[0], robots)
        chosen = max_load if max_load is not None else limit["max_load"]
        if chosen is None or not 0 < chosen <= 1:
            raise SystemExit(
                f"no max_load in (0, 1] separates {robots} robots from {robots + 1} at "
                f"{config.control.rate_hz:g} Hz (loads {limit['load_n']} and "
                f"{limit['load_n_plus_1']}); lower --rate or --admission, or pass --max-load"
            )
        inference = config.execution.model_copy(update={"max_load": chosen})
        config = config.model_copy(update={"execution": inference})
        with serving(config, policies) as daemon:
            fleet = _robots_of(daemon.endpoint, config, policies[0], None, robots + 1, "r", drive)
            driven, refused_at = [], None
            with all_closed(fleet):
                for robot in fleet:
                    if not robot.connect():
                        refused_at = time.monotonic() if refused_at is None else refused_at
                        continue
                    robot.start()
                    driven.append(robot)
                time.sleep(seconds)
                status = daemon.status()  # while the admitted robots are still served
                stop_and_join(driven)
    finally:
        stop_policies(policies, tiny)
    refused = [{"robot": robot.run.name, "hello": k + 1, "sentence": robot.run.refused}
               for k, robot in enumerate(fleet) if robot.run.refused is not None]  # fmt: skip
    admitted = [robot.run for robot in fleet if robot.run.refused is None]
    summaries = [run.summary() for run in admitted]
    after = refused_at if refused_at is not None else math.inf
    return {
        "mode": "admission",
        "rate_hz": config.control.rate_hz,
        "batch_sizes": list(config.execution.batch_sizes),
        **limit,
        "max_load": chosen,
        "admitted": len(admitted),
        "refused": refused,
        "admitted_chunks_after_refusal": {
            run.name: sum(t > after for t in run.arrivals_s) for run in admitted
        },
        "admitted_actions": sum(run.actions for run in admitted),
        "admitted_lost": sum(run.lost for run in admitted),
        "admitted_expired": sum(run.expired for run in admitted),
        "admitted_worst_p99_ms": max((r["p99_ms"] for r in summaries if r["p99_ms"]), default=None),
        "admitted_reconnects": sum(run.reconnects for run in admitted),
        "missed_ticks": status.get("missed_ticks"),
        **daemon_split(status),
        "status_load": status.get("policies", {}).get("default", {}).get("load"),
        "per_robot": summaries,
    }
