"""Soak: the daemon and a simulated robot at 200 Hz for a long time under background CPU load.

Reports missed ticks, tick lateness p99/max, guard interventions, and lost or duplicated
commands (the daemon numbers each session's actions and holds 1, 2, 3, ...; the driver counts
gaps and repeats). Exits non-zero if any tick was missed or any command lost or duplicated.

    python -m scripts.soak.soak [--seconds 600] [--rate 200] [--load 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event
from typing import Any

from controller.observe.status_server import request_status


def burn(stop: Event) -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 31 + 7) % 1_000_003


def _section(status: dict[str, Any], name: str, key: str, scale: float) -> float | None:
    section = status.get("telemetry", {}).get("sections", {}).get(name)
    return None if section is None or section.get(key) is None else section[key] * scale


def _late_ticks(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The daemon's late-tick counts during the run (after minus before)."""
    late, early = after.get("late_ticks") or {}, before.get("late_ticks") or {}
    by, by_before = late.get("idle_overran_by") or {}, early.get("idle_overran_by") or {}
    out: dict[str, Any] = {}
    for key in ("count", "preempted", "idle_overran"):
        value = late.get(key)
        out["late_ticks" if key == "count" else f"late_ticks_{key}"] = (
            None if value is None else value - early.get(key, 0)
        )
    out["late_ticks_idle_overran_by"] = {
        step: n - by_before.get(step, 0) for step, n in by.items() if n - by_before.get(step, 0)
    }
    return out


def soak(
    seconds: float,
    rate: float,
    load: int,
    policy_args: list[str],
    robot_args: tuple[str, ...] = (),
    on_load: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """`robot_args`: extra arguments of `tempo sim-robot` (--frames-on-socket). `on_load` is
    called once the daemon is up and the load runs, just before the robot starts (a measurement
    to run beside the loop, as scripts/soak/bench_floor.py's cyclictest)."""
    with tempfile.TemporaryDirectory(prefix="tempo-soak-") as tmp:
        sets = [
            f"server.bind=ipc://{tmp}/tempo.sock",
            f"server.status_bind=ipc://{tmp}/status.sock",
            f"control.rate_hz={rate}",
            *policy_args,
        ]
        config_args = sum((["--set", s] for s in sets), [])
        cli = [sys.executable, "-m", "controller.cli"]
        daemon = subprocess.Popen([*cli, "serve", *config_args, "--log-level", "WARNING"])
        status_endpoint = f"ipc://{tmp}/status.sock"
        deadline = time.monotonic() + 600  # a cold compile of a big model
        while request_status(status_endpoint, 0.5) is None:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("soak: the daemon did not start")
        stop_load = mp.Event()
        burners = [mp.Process(target=burn, args=(stop_load,), daemon=True) for _ in range(load)]
        for process in burners:
            process.start()
        if on_load is not None:
            on_load()
        robot = subprocess.Popen(
            [
                *cli,
                "sim-robot",
                *config_args,
                "--seconds",
                str(seconds),
                "--camera-hz",
                "30",
                "--json-lines",
                *robot_args,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        driver: dict[str, Any] = {}

        def read() -> None:
            for line in robot.stdout:  # type: ignore[union-attr]
                driver.update(json.loads(line))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        before = request_status(status_endpoint) or {}
        last_with_robot: dict[str, Any] = {}
        while robot.poll() is None:
            time.sleep(1.0)
            snapshot = request_status(status_endpoint, 1.0)
            if snapshot and snapshot["robots"]:
                last_with_robot = snapshot
        reader.join(5)
        after = request_status(status_endpoint) or last_with_robot
        stop_load.set()
        for process in burners:
            process.join(2)
        daemon.terminate()
        try:
            daemon.wait(30)  # a recorder writes what it has queued first
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    robot_status = last_with_robot["robots"][0] if last_with_robot.get("robots") else {}
    return {
        "seconds": seconds,
        "rate_hz": rate,
        "load_processes": load,
        "ticks": after["ticks"] - before.get("ticks", 0),
        "missed_ticks": after["missed_ticks"] - before.get("missed_ticks", 0),
        # Whole-run figures from the daemon's histograms (the flat *_p99 keys of the status
        # cover only its last 4096 samples).
        "tick_lateness_us_p99": _section(after, "tick_lateness", "p99_s", 1e6),
        "tick_lateness_us_max": _section(after, "tick_lateness", "max_s", 1e6),
        # Ticks over 100 us late; of those, the ones whose thread the OS had switched out, and
        # the ones whose work between ticks ran past the deadline (controller/observe/late_ticks).
        **_late_ticks(before, after),
        "guard_interventions": robot_status.get("guards", {}),
        "daemon_sent_last_seen": robot_status.get("sent"),
        "driver_received": driver.get("received"),
        "lost": driver.get("lost"),
        "duplicated": driver.get("duplicated"),
        "expired_at_driver": driver.get("expired"),
        "daemon_obs_to_action_ms_p50": _section(after, "obs_to_action", "p50_s", 1e3),
        "daemon_obs_to_action_ms_p99": _section(after, "obs_to_action", "p99_s", 1e3),
        "inference_ms_p50": _section(after, "inference", "p50_s", 1e3),
        "inference_ms_p99": _section(after, "inference", "p99_s", 1e3),
        # Collections in the daemon's (control) process, whole run, any thread.
        "gc_pauses": _section(after, "gc_pause", "count", 1),
        "gc_pause_us_max": _section(after, "gc_pause", "max_s", 1e6),
        "latency_ms_p50": driver.get("latency_ms_p50"),
        "latency_ms_p99": driver.get("latency_ms_p99"),
        "reconnects": driver.get("reconnects"),
        "frames_on_socket": driver.get("frames_on_socket"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--load", type=int, default=1, help="background busy processes")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="extra daemon config overrides (e.g. a policy)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = soak(args.seconds, args.rate, args.load, args.overrides)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:24s} {value}")
    healthy = result["missed_ticks"] == 0 and result["lost"] == 0 and result["duplicated"] == 0
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
