"""The compact table `tempo status` prints, rendered from the daemon's status dict.

Pure formatting: no I/O, no torch, tolerant of missing keys (an older daemon, a CPU runner, a
daemon with telemetry off), so `tempo status` never fails on what it is shown.

    uptime 2h03m20s   control 100.00 / 100 Hz   ticks 740,012   missed 0
    policy graph (fp16) on cuda:0 (NVIDIA H200); also ready: compiled, eager_half, eager_fp32
      tier history: no demotions
    actions 739,800   holds 12   inferences 740,001 (0 failed)   protocol errors 0
    guard interventions 3 (velocity_limited 3)
    section                measured         count        p50        p99        max
    receive                wall           740,001    38.6 us    61.0 us   402.1 us
    ...
    robot           last obs   guards interventions
    arm-left         3.11 ms   ok     3 (velocity_limited 3)

Sections come from status["telemetry"]["sections"] (controller.observe.telemetry), in the order
of the observation's path; rows with no samples are left out.
"""

from __future__ import annotations

import math
import time
from typing import Any

from controller.observe.section_names import BUILTIN_SECTIONS
from controller.observe.status_policies import policy_load_lines

GUARD_COUNTERS_NOT_INTERVENTIONS = ("held_ticks",)  # holds for lack of a chunk are not vetoes


def fmt_duration(seconds: float | None) -> str:
    """0.0000412 -> '41.2 us', 0.0012 -> '1.20 ms', 2.5 -> '2.50 s'; None/NaN -> '-'."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if abs(seconds) < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{seconds:.1f}s"


def _num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value if value is not None else "-")


def sections_of(status: dict[str, Any]) -> dict[str, Any]:
    """The per-section summaries: status["telemetry"]["sections"] (or a top-level
    status["sections"]), else built from the daemon's older flat fields."""
    telemetry = status.get("telemetry") or {}
    sections = telemetry.get("sections") or status.get("sections")
    if sections:
        return dict(sections)
    legacy: dict[str, Any] = {}
    for name, prefix, scale in (
        ("tick_lateness", "tick_lateness_us", 1e-6),
        ("inference", "inference_ms", 1e-3),
        ("obs_to_action", "obs_to_action_ms", 1e-3),
    ):
        p50, p99 = status.get(f"{prefix}_p50"), status.get(f"{prefix}_p99")
        if p50 is None and p99 is None:
            continue
        peak = status.get(f"{prefix}_max")

        def scaled(v: Any, s: float = scale) -> float | None:
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else v * s

        legacy[name] = {
            "name": name,
            "measured": "wall",
            "count": None,
            "p50_s": scaled(p50),
            "p99_s": scaled(p99),
            "max_s": scaled(peak),
        }
    return legacy


def _section_order(keys: list[str], sections: dict[str, Any]) -> list[str]:
    order = {name: i for i, name in enumerate(BUILTIN_SECTIONS)}
    return sorted(keys, key=lambda k: (order.get(sections[k].get("name", k), len(order)), k))


def render_sections(sections: dict[str, Any]) -> list[str]:
    if not sections:
        return ["sections: none recorded (telemetry off?)"]
    width = max(18, *(len(k) + 1 for k in sections))
    header = f"{'section':<{width}}{'measured':<12}{'count':>10}{'p50':>11}{'p99':>11}{'max':>11}"
    lines = [header]
    for key in _section_order(list(sections), sections):
        s = sections[key]
        count = s.get("count")
        if count == 0:
            continue
        lines.append(
            f"{key:<{width}}{str(s.get('measured', '')):<12}{_num(count):>10}"
            f"{fmt_duration(s.get('p50_s')):>11}{fmt_duration(s.get('p99_s')):>11}"
            f"{fmt_duration(s.get('max_s')):>11}"
        )
    if len(lines) == 1:
        lines.append("(no samples yet)")
    return lines


def interventions(guards: dict[str, int]) -> tuple[int, dict[str, int]]:
    """Total guard interventions and the non-zero ones by kind."""
    nonzero = {k: v for k, v in guards.items() if v and k not in GUARD_COUNTERS_NOT_INTERVENTIONS}
    return sum(nonzero.values()), nonzero


def _policy_lines(policy: dict[str, Any], status: dict[str, Any]) -> list[str]:
    if not policy:
        return []
    tier = policy.get("tier") or "-"
    tiers = {t.get("name"): t for t in policy.get("tiers") or []}
    precision = (tiers.get(tier) or {}).get("precision")
    ready = [t["name"] for t in policy.get("tiers") or [] if t.get("state") == "ready"]
    fallbacks = [name for name in ready if name != tier]
    line = f"policy {tier}" + (f" ({precision})" if precision else "")
    if policy.get("device"):
        line += f" on {policy['device']}"
    line += f"; also ready: {', '.join(fallbacks) if fallbacks else 'none'}"
    p50, p99 = status.get("inference_ms_p50"), status.get("inference_ms_p99")
    if p50 is not None and p99 is not None:
        line += f"; step p50 {p50:.2f} ms p99 {p99:.2f} ms"
    lines = [line]
    changes = [(d, "demoted") for d in policy.get("demotions") or []]
    changes += [(d, "re-promoted") for d in policy.get("promotions") or []]
    changes.sort(key=lambda item: item[0].get("time") or 0)
    if not changes:
        lines.append("  tier history: no demotions")
    for change, verb in changes[-5:]:
        when = change.get("time")
        stamp = time.strftime("%H:%M:%S", time.localtime(when)) if when else "?"
        lines.append(
            f"  {verb} {stamp} {change.get('from_tier')} -> {change.get('to_tier')} "
            f"({change.get('cause')}): {change.get('detail', '')}"
        )
    if len(changes) > 5:
        lines.append(f"  ... {len(changes) - 5} earlier tier changes (see --json)")
    skipped = [t for t in policy.get("tiers") or [] if t.get("state") == "skipped"]
    for t in skipped:
        lines.append(f"  skipped at start: {t.get('name')}: {t.get('reason')}")
    return lines + _link_lines(policy.get("link")) + _process_lines(policy.get("process"))


def _link_lines(link: dict[str, Any] | None) -> list[str]:
    """The remote inference link (policy.remote): its server, round trip and clock offset."""
    if not isinstance(link, dict):
        return []
    line = f"  remote inference at {link.get('address')}"
    rtt, offset = link.get("rtt_ms"), link.get("clock_offset_ms")
    if isinstance(rtt, int | float) and isinstance(offset, int | float):
        line += f": round trip p50 {rtt:.2f} ms, server clock {offset:+.3f} ms from ours"
    return [line]


def _process_lines(process: dict[str, Any] | None) -> list[str]:
    """The inference process (when the policy runs in one): pid, state, restarts and causes."""
    if not process:
        return []
    state = "serving" if process.get("serving") else "restarting: robots held"
    restarts = process.get("restarts") or []
    lines = [f"  inference process {process.get('pid')}: {state}; {len(restarts)} restarts"]
    for restart in restarts[-3:]:
        when = restart.get("time")
        stamp = time.strftime("%H:%M:%S", time.localtime(when)) if when else "?"
        lines.append(f"    {stamp} {restart.get('cause')}: {restart.get('detail')}")
    if failing := process.get("restart_failure"):  # restarts failing: why, how often, next try
        retry = time.strftime("%H:%M:%S", time.localtime(failing.get("next_try") or 0))
        lines.append(
            f"    restart failed {failing.get('count')} times in a row: "
            f"{failing.get('detail')} (next try {retry})"
        )
    return lines + _standby_lines(process)


def _standby_lines(process: dict[str, Any]) -> list[str]:
    """The standby (supervision.standby) and what a hot one costs; the last swap."""
    lines = []
    mode = process.get("standby")
    if mode in ("spare", "hot"):
        ready = "ready" if process.get("standby_ready") else "starting"
        line = f"  {mode} standby {process.get('standby_pid')}: {ready}"
        memory = process.get("standby_memory") or {}
        if (gpu := memory.get("gpu_reserved_bytes")) is not None:
            line += f"; GPU memory {gpu / 2**20:.0f} MiB"
        if (host := memory.get("host_resident_bytes")) is not None:
            line += f"; host memory {host / 2**20:.0f} MiB"
        if failure := process.get("standby_failure"):
            line += f" (the last one failed: {failure})"
        lines.append(line)
    if swap := process.get("swap"):
        lines.append(f"  swap to {swap.get('path')}: {swap.get('phase')}: {swap.get('detail')}")
    return lines


def _robot_lines(robots: list[dict[str, Any]]) -> list[str]:
    if not robots:
        return ["robots: none connected"]
    width = max(14, *(len(str(r.get("robot", ""))) + 2 for r in robots))
    lines = [f"{'robot':<{width}}{'last obs':>10}   {'guards':<7}interventions"]
    for robot in robots:
        age = robot.get("last_observation_age_ms")
        age_text = "never" if age is None else fmt_duration(age / 1e3)
        total, nonzero = interventions(robot.get("guards") or {})
        detail = ", ".join(f"{k} {v}" for k, v in sorted(nonzero.items()))
        lines.append(
            f"{str(robot.get('robot', '?')):<{width}}{age_text:>10}   "
            f"{str(robot.get('guard_state', '-')):<7}{total}" + (f" ({detail})" if detail else "")
        )
        if robot.get("task"):  # a policy that reads a prompt: the robot's task
            lines.append(f"{'':<{width}}task: {robot['task']}")
    return lines


def recording_line(recording: dict[str, Any]) -> str:
    """The flight recorder: records written, dropped (by kind), files, incidents, files
    deleted, error."""
    dropped = {k: v for k, v in (recording.get("dropped") or {}).items() if v}
    drops = ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()))
    line = (
        f"recording {recording.get('mode')} to {recording.get('dir')}: "
        f"{_num(recording.get('written'))} records written, "
        f"{sum(dropped.values())} dropped"
        + (f" ({drops})" if drops else "")
        + f", {_num(recording.get('files'))} files, {_num(recording.get('incidents'))} incidents"
    )
    if recording.get("files_deleted"):  # record.max_total_mb at work
        line += (
            f"; {_num(recording['files_deleted'])} oldest files deleted "
            f"({(recording.get('bytes_deleted') or 0) / 2**20:.0f} MiB) to stay within max_total_mb"
        )
    if recording.get("torn_frames"):
        line += (
            f"; {_num(recording['torn_frames'])} observations' frames left out (the driver "
            "wrote over its slot before they were copied)"
        )
    if recording.get("not_json"):
        line += (
            f"; {_num(recording['not_json'])} records left out (a value JSON cannot hold, "
            "such as a NaN in a policy's memory)"
        )
    if recording.get("incidents_deleted"):  # record.max_incidents_mb at work
        line += (
            f"; {_num(recording['incidents_deleted'])} oldest incident files deleted to stay "
            "within max_incidents_mb"
        )
    if recording.get("paused"):
        line += f"; paused, writes fail ({recording['paused']}): retried"
    if recording.get("incidents_not_written"):
        line += f"; {_num(recording['incidents_not_written'])} marks not written while paused"
    if recording.get("error"):
        line += f"; stopped writing: {recording['error']}"
    return line


def render_status(status: dict[str, Any]) -> str:
    """The `tempo status` table (text, no trailing newline) from `Daemon.status()`."""
    if "error" in status and len(status) == 1:
        return f"the daemon answered with an error: {status['error']}"
    achieved, target = status.get("achieved_hz"), status.get("control_hz")
    rate = (
        f"{achieved:.2f} / {target:g} Hz"
        if isinstance(achieved, (int, float)) and isinstance(target, (int, float))
        else "-"
    )
    lines = [
        f"uptime {fmt_uptime(status.get('uptime_s'))}   control {rate}   "
        f"ticks {_num(status.get('ticks'))}   missed {_num(status.get('missed_ticks'))}",
    ]
    lines += _policy_lines(status.get("policy") or {}, status)
    if status.get("execution"):  # which chunk execution is in effect, and where it came from
        lines.append(f"execution: {status['execution']}")
    lines += policy_load_lines(status.get("policies"))  # robots, rate, load of each policy
    robots = status.get("robots") or []
    totals = status.get("guard_interventions")  # kept across disconnects (newer daemons)
    if isinstance(totals, dict):
        total, kinds = interventions(totals)
    else:
        merged: dict[str, int] = {}
        for robot in robots:
            for kind, count in (robot.get("guards") or {}).items():
                merged[kind] = merged.get(kind, 0) + count
        total, kinds = interventions(merged)
    detail = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    lines.append(
        f"actions {_num(status.get('actions_sent'))}   holds {_num(status.get('holds_sent'))}   "
        f"inferences {_num(status.get('inferences'))} "
        f"({_num(status.get('inference_failures'))} failed)   "
        f"protocol errors {sum((status.get('protocol_errors') or {}).values())}"
    )
    lines.append(f"guard interventions {total}" + (f" ({detail})" if detail else ""))
    recording = status.get("recording")
    if isinstance(recording, dict):
        lines.append(recording_line(recording))
    telemetry = status.get("telemetry") or {}
    if telemetry and not telemetry.get("enabled", True):
        lines.append("sections: telemetry is off (telemetry.enabled: false)")
    else:
        lines += render_sections(sections_of(status))
    lines += _robot_lines(robots)
    return "\n".join(lines)
