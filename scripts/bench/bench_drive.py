"""`tempo drive` at the control rate for a minute: LeRobot's SO-101 follower and leader arm on a
simulated Feetech bus (tests/lerobot_plugins), a daemon serving a tiny ACT on the CPU, the
leader owning the gripper (Tempo's teleop mask). The baseline, in the same run, is LeRobot's own
`lerobot-teleoperate` loop with the same robot flags (the leader drives every joint, no daemon):
how regularly each loop reaches the robot, from the bus's timestamp of every goal write.

    TEMPO_LEROBOT_PYTHON=/work/venvs/lerobot/bin/python python -m scripts.bench.bench_drive \\
        [--seconds 60] [--rate 50] [--camera 96x128] [--bus-ms 0] [--policy act|reach]
        [--realtime-priority N]

Both loops run in LeRobot's Python (TEMPO_LEROBOT_PYTHON, or --python); the daemon in this
one (the serve extra). A "late" write is one more than 1.5 periods after the one before (a tick
missed); Tempo's own counts (the driver's pacer, the daemon's loop) are shown beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from controller.observe.status_server import request_status
from policies.act.demo import make_demo_checkpoint

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "tests" / "lerobot_plugins"
JOINTS = [
    f"{m}.pos"
    for m in ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
]


def device_flags(height: int, width: int, bus_ms: float, goal_log: Path) -> list[str]:
    """LeRobot's flags for the simulated SO-101 and its leader: the same for both loops."""
    camera = f"{{front: {{type: tempo_sim, width: {width}, height: {height}, fps: 30}}}}"
    return [
        "--robot.discover_packages_path=lerobot_robot_tempo_sim",
        "--robot.type=sim_so101_follower",
        "--robot.port=/dev/null",
        "--robot.id=bench_arm",
        f"--robot.cameras={camera}",
        f"--robot.bus_transfer_ms={bus_ms}",
        f"--robot.goal_log={goal_log}",
        "--teleop.discover_packages_path=lerobot_teleoperator_tempo_sim",
        "--teleop.type=sim_so101_leader",
        "--teleop.port=/dev/null",
        "--teleop.id=bench_leader",
        f"--teleop.bus_transfer_ms={bus_ms}",
    ]


def goal_intervals(path: Path, rate: float) -> dict[str, Any]:
    """How regularly the goals reached the bus: writes, their rate, intervals."""
    times = np.asarray(json.loads(path.read_text())["goal_times"])
    gaps = np.diff(times)
    period = 1.0 / rate
    return {
        "writes": int(times.size),
        "hz": float((times.size - 1) / (times[-1] - times[0])),
        "late": int((gaps > 1.5 * period).sum()),
        "p99_ms": float(np.percentile(gaps, 99) * 1e3),
        "max_ms": float(gaps.max() * 1e3),
    }


def start_daemon(
    tmp: Path, rate: float, height: int, width: int, policy: str, priority: int | None
) -> subprocess.Popen[str]:
    """`tempo serve` for the robot: a tiny ACT (random weights) or the scripted reach policy."""
    if policy == "act":
        # A chunk of 50, one every 10 steps: a CPU step of up to 40 ticks is covered.
        checkpoint = make_demo_checkpoint(
            tmp / "act",
            cameras=(("front", height, width),),
            joint_names=JOINTS,
            state_size=6,
            chunk_size=50,
        )
        served: dict[str, Any] = {"kind": "checkpoint", "path": str(checkpoint)}
        robot: dict[str, Any] = {}
    else:
        served = {"kind": "reach"}
        robot = {"joints": JOINTS, "cameras": [{"name": "front", "height": height, "width": width}]}
    config = tmp / "serve.yaml"
    config.write_text(
        json.dumps(
            {
                "server": {
                    "bind": f"ipc://{tmp}/tempo.sock",
                    "status_bind": f"ipc://{tmp}/status.sock",
                },
                "control": {"rate_hz": rate, "realtime_priority": priority},
                "policy": served,
                **({"robot": robot} if robot else {}),
                # The chunk is played while the next is made (the demo's CPU settings).
                "inference": {"query_period": 10, "ensemble": "newest"},
                "runner": {"step_budget_ms": 1000},
                "teleop": {"blend_s": 0.0},
            }
        )
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "serve.log", "w"),  # noqa: SIM115 - closed with the process
        text=True,
    )
    deadline = time.monotonic() + 180
    while request_status(f"ipc://{tmp}/status.sock", timeout_s=1.0) is None:
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the daemon did not start: see {tmp / 'serve.log'}")
    return daemon


def run(
    python: str,
    seconds: float,
    rate: float,
    camera: tuple[int, int],
    bus_ms: float,
    policy: str,
    priority: int | None,
) -> int:
    height, width = camera
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(PLUGINS)])}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env["HF_LEROBOT_HOME"] = str(tmp / "lerobot")
        daemon = start_daemon(tmp, rate, height, width, policy, priority)
        try:
            baseline_log, drive_log = tmp / "baseline.json", tmp / "drive.json"
            subprocess.run(
                [python, "-m", "lerobot.scripts.lerobot_teleoperate"]
                + device_flags(height, width, bus_ms, baseline_log)
                + [f"--fps={round(rate)}", f"--teleop_time_s={seconds}"],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,  # it prints a line per iteration
                stderr=subprocess.DEVNULL,
                check=True,
                timeout=seconds + 300,
            )
            status = f"ipc://{tmp}/status.sock"
            before = request_status(status) or {}
            drive = subprocess.run(
                [python, "-m", "controller.cli", "drive", "--connect", f"ipc://{tmp}/tempo.sock"]
                + device_flags(height, width, bus_ms, drive_log)
                + ["--teleop-joints=gripper.pos", f"--seconds={seconds}", "--json"]
                + ([f"--realtime-priority={priority}"] if priority else []),
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=seconds + 300,
            )
            after = request_status(status) or {}
        finally:
            daemon.terminate()
            daemon.wait(30)
        if drive.returncode != 0:
            print(drive.stderr, file=sys.stderr)
            return 1
        summary = json.loads(drive.stdout)
        daemon_missed = after.get("missed_ticks", 0) - before.get("missed_ticks", 0)
        lerobot, tempo = goal_intervals(baseline_log, rate), goal_intervals(drive_log, rate)
    print(
        f"{seconds:g} s at {rate:g} Hz, policy {policy}, camera {height}x{width}, bus transfer "
        f"{bus_ms:g} ms, SCHED_FIFO {priority or 'off'} (driver and daemon), load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print("| loop | goal writes | Hz | late (> 1.5 periods) | interval p99 | max |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, r in (("lerobot-teleoperate (baseline)", lerobot), ("tempo drive", tempo)):
        print(
            f"| {label} | {r['writes']} | {r['hz']:.2f} | {r['late']} | {r['p99_ms']:.2f} ms | "
            f"{r['max_ms']:.2f} ms |"
        )
    print(
        f"tempo drive: {summary['ticks']} ticks, {summary['missed_ticks']} missed (driver), "
        f"{daemon_missed} missed (daemon); {summary['actions_applied']} actions, "
        f"{summary['holds']} holds {summary['hold_reasons']}; teleop {summary['teleop_joints']} "
        f"(masks sent {summary['teleop_masks_sent']}); work p99 {summary['work_ms_p99']} ms, max "
        f"{summary['work_ms_max']} ms; observation to action p50 "
        f"{summary['obs_to_action_ms_p50']} ms, p99 {summary['obs_to_action_ms_p99']} ms"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=50.0, help="control rate, Hz")
    parser.add_argument("--camera", default="96x128", help="HEIGHTxWIDTH of the one camera")
    parser.add_argument("--bus-ms", type=float, default=0.0, help="simulated bus transfer time")
    parser.add_argument("--policy", choices=["act", "reach"], default="act")
    parser.add_argument(
        "--realtime-priority", type=int, help="SCHED_FIFO for tempo drive's and the daemon's loop"
    )
    parser.add_argument("--python", default=os.environ.get("TEMPO_LEROBOT_PYTHON"))
    args = parser.parse_args()
    if not args.python:
        parser.error("give LeRobot's Python: --python PATH or TEMPO_LEROBOT_PYTHON")
    height, _, width = args.camera.partition("x")
    return run(
        args.python,
        args.seconds,
        args.rate,
        (int(height), int(width)),
        args.bus_ms,
        args.policy,
        args.realtime_priority,
    )


if __name__ == "__main__":
    sys.exit(main())
