"""Inference in its own process against inference in the daemon's: tick lateness under load,
the observation-to-chunk time, and how long a restart after SIGKILL takes.

The modes run back to back in this one run, on the same machine and policy, with the same
background load (busy processes), through scripts/soak/soak.py (a daemon and a simulated robot at
200 Hz, frames at 30 Hz): inference in the daemon's process, in its own process with the
robot's frames written in place (its shared frame ring; the default on ipc://), and in its own
process with the frames on the socket (copied into the inference slot by the control process).
Then, in the separate mode only, the inference process is killed with SIGKILL and the time
until it serves again (warm compile cache) is measured.

    python -m scripts.soak.bench_isolation --seconds 60 --load 2 \\
        --set policy.kind=checkpoint --set policy.path=CKPT --set runner.cache_dir=DIR
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from controller.observe.status_server import request_status
from scripts.soak.soak import soak

ROWS = [
    ("missed ticks", "missed_ticks", "{:.0f}"),
    ("tick lateness p99 (us)", "tick_lateness_us_p99", "{:.0f}"),
    ("tick lateness max (us)", "tick_lateness_us_max", "{:.0f}"),
    ("ticks > 100 us late", "late_ticks", "{:.0f}"),
    ("  of which preempted", "late_ticks_preempted", "{:.0f}"),
    ("  of which idle overran", "late_ticks_idle_overran", "{:.0f}"),
    ("  overran by (longest step)", "late_ticks_idle_overran_by", "{}"),
    ("inference p50 (ms)", "inference_ms_p50", "{:.3f}"),
    ("inference p99 (ms)", "inference_ms_p99", "{:.3f}"),
    ("obs -> action p50 (ms)", "daemon_obs_to_action_ms_p50", "{:.2f}"),
    ("obs -> action p99 (ms)", "daemon_obs_to_action_ms_p99", "{:.2f}"),
    ("gc pauses (daemon)", "gc_pauses", "{:.0f}"),
    ("gc pause max (us)", "gc_pause_us_max", "{:.0f}"),
    ("lost / duplicated", None, ""),
]


def _cell(result: dict[str, Any], key: str | None, fmt: str) -> str:
    if key is None:
        return f"{result.get('lost')} / {result.get('duplicated')}"
    value = result.get(key)
    if isinstance(value, dict):  # counts by name, short: "wait:3 handle:1"
        return " ".join(f"{name}:{count}" for name, count in value.items()) or "-"
    return "n/a" if value is None else fmt.format(value)


def restart_time(overrides: list[str], timeout_s: float = 600.0) -> dict[str, float]:
    """Seconds from SIGKILL of the inference process to serving again."""
    with tempfile.TemporaryDirectory(prefix="tempo-restart-") as tmp:
        status_endpoint = f"ipc://{tmp}/status.sock"
        sets = [f"server.bind=ipc://{tmp}/tempo.sock", f"server.status_bind={status_endpoint}"]
        args = sum((["--set", s] for s in [*sets, *overrides]), [])
        cli = [sys.executable, "-m", "controller.cli", "serve", "--log-level", "WARNING"]
        daemon = subprocess.Popen([*cli, *args])
        try:
            started = time.monotonic()
            while (status := request_status(status_endpoint, 0.5)) is None:
                if daemon.poll() is not None or time.monotonic() - started > timeout_s:
                    raise SystemExit("bench_isolation: the daemon did not start")
            cold_s = time.monotonic() - started
            # A failure in steady state: the standby process has finished its imports.
            while status.get("policy", {}).get("process", {}).get("standby_ready") is False:
                if time.monotonic() - started > timeout_s:
                    raise SystemExit("bench_isolation: the standby process never became ready")
                time.sleep(0.1)
                status = request_status(status_endpoint, 0.5) or status
            pid = status["policy"]["process"]["pid"]
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            while True:
                status = request_status(status_endpoint, 0.5) or {}
                process = status.get("policy", {}).get("process", {})
                if process.get("serving") and process.get("pid") != pid:
                    break
                if time.monotonic() - killed > timeout_s:
                    raise SystemExit("bench_isolation: no restart within the timeout")
                time.sleep(0.05)
            return {"first_start_s": cold_s, "restart_s": time.monotonic() - killed}
        finally:
            daemon.terminate()
            daemon.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--load", type=int, default=2, help="background busy processes")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--no-restart", action="store_true", help="skip the restart timing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    modes = (
        ("one process", "false", ()),
        ("two processes", "true", ()),  # the simulated robot writes its frames in place
        ("two, socket", "true", ("--frames-on-socket",)),
    )
    for mode, separate, robot_args in modes:
        sets = [*args.overrides, f"supervision.inference_process={separate}"]
        results[mode] = soak(args.seconds, args.rate, args.load, sets, robot_args)
    restart = None if args.no_restart else restart_time(args.overrides)
    if args.json:
        print(json.dumps({"modes": results, "restart": restart}))
        return 0
    print(
        f"{args.seconds:.0f} s at {args.rate:.0f} Hz, {args.load} busy background processes, "
        "frames at 30 Hz"
    )
    print("(frames from the same-host robot: in place, except 'two, socket': on the socket)")
    print(f"{'':26s}" + "".join(f"{mode:>16s}" for mode in results))
    for label, key, fmt in ROWS:
        cells = [_cell(results[mode], key, fmt) for mode in results]
        print(f"{label:26s}" + "".join(f"{cell:>16s}" for cell in cells))
    if restart is not None:
        print(
            f"first start {restart['first_start_s']:.1f} s; after SIGKILL of the inference "
            f"process, serving again in {restart['restart_s']:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
