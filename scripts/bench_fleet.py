"""N simulated robots against one daemon, batching on against off in the same run.

For each robot count, the daemon is started twice on the same policy and machine: once with
`inference.batch_sizes: [1]` (the robots served one after another) and once with the batch
sizes given. Each robot is a thread with its own TempoClient sending an observation every
control period (random frames, a moving state). Reported per run: every robot's
observation-to-action time (from sending an observation to the first action of a chunk computed
from it) p50 and p99 over all robots and the worst robot's p99, missed ticks, actions lost,
policy steps per second (robot steps: chunks), and the steps per batch size.

    python scripts/bench_fleet.py --tiny --robots 1 2 4 --seconds 5            # a CPU check
    python scripts/bench_fleet.py --robots 1 2 4 8 16 --rate 50 --batch-sizes 1 2 4 8 16 \\
        --set policy.kind=checkpoint --set policy.path=CKPT --set runner.cache_dir=DIR

Without --tiny the policy runs in its own inference process, as `tempo serve` runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.config import TempoConfig, load_config  # noqa: E402
from controller.wire.client import TempoClient  # noqa: E402


def robot(endpoint: str, name: str, spec: Any, rate: float, seconds: float, out: dict) -> None:
    """One simulated robot: an observation every period, the obs-to-action times recorded."""
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    cameras = {c.name: (c.height, c.width) for c in spec.cameras}
    frames = {n: rng.integers(0, 256, (*hw, 3), np.uint8) for n, hw in cameras.items()}
    sent: dict[int, int] = {}
    latencies: list[float] = []
    seen: set[int] = set()
    period = 1.0 / rate
    with TempoClient(endpoint, name, list(spec.joint_names), cameras, spec.state_size,
                     handshake_timeout_s=60) as client:  # fmt: skip
        start = time.monotonic()
        tick = 0
        while time.monotonic() - start < seconds:
            state = np.full(spec.state_size, 0.1 * np.sin(tick / 50), np.float32)
            seq = client.send_observation(frames, state)
            if seq is not None:
                sent[seq] = time.monotonic_ns()
            tick += 1
            next_at = start + tick * period
            while (left := next_at - time.monotonic()) > 0:
                command = client.receive(timeout_s=min(left, 0.002))
                if command.kind == "action" and command.obs_seq in sent:
                    if command.obs_seq not in seen:
                        seen.add(command.obs_seq)
                        latencies.append((time.monotonic_ns() - sent[command.obs_seq]) / 1e6)
        out[name] = {"latencies_ms": latencies, "lost": client.counters.lost}


def run(config: TempoConfig, robots: int, seconds: float, tiny: bool) -> dict[str, Any]:
    from controller.app import inference_process
    from controller.daemon.service import Daemon
    from controller.inference.build import build_policy

    if tiny:
        from controller.runner_config import RunnerConfig
        from policies.tiny.policy import build_tiny_policy

        runner = RunnerConfig(top_tier="eager_fp32", cache_dir=None, parity_observations=2)
        inference = config.inference
        policy: Any = build_policy(config.policy, config.robot, runner, None,
                                   build_tiny_policy(), inference.batch_sizes,
                                   inference.batch_window_us)  # fmt: skip
    else:
        policy = inference_process(config)
        policy.start()
    daemon = Daemon(config, policy)
    daemon.start()
    results: dict[str, Any] = {}
    try:
        threads = [
            threading.Thread(
                target=robot,
                args=(
                    daemon.endpoint,
                    f"r{k}",
                    policy.spec,
                    config.control.rate_hz,
                    seconds,
                    results,
                ),  # fmt: skip
            )
            for k in range(robots)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        status = daemon.status()
    finally:
        daemon.stop()
        if not tiny:
            policy.stop()
    everything = [x for r in results.values() for x in r["latencies_ms"]]
    worst = max((np.percentile(r["latencies_ms"], 99) for r in results.values()
                 if r["latencies_ms"]), default=float("nan"))  # fmt: skip
    return {
        "robots": robots,
        "batch_sizes": list(config.inference.batch_sizes),
        "obs_to_action_p50_ms": float(np.percentile(everything, 50)) if everything else None,
        "obs_to_action_p99_ms": float(np.percentile(everything, 99)) if everything else None,
        "worst_robot_p99_ms": float(worst),
        "missed_ticks": status.get("missed_ticks"),
        "lost": sum(r["lost"] for r in results.values()),
        "robot_steps_per_s": status.get("inferences", 0) / seconds,
        "steps_by_bucket": status.get("policy", {}).get("steps_by_bucket"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--window-us", type=int, default=0)
    parser.add_argument("--rate", type=float, default=50.0, help="control rate, Hz")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tiny", action="store_true", help="the tiny policy, in this process")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for robots in args.robots:
            for sizes in ([1], args.batch_sizes):
                config = load_config(args.config, [
                    *args.sets,
                    f"server.bind=ipc://{tmp}/tempo.sock",
                    f"server.status_bind=ipc://{tmp}/status.sock",
                    f"control.rate_hz={args.rate}",
                    f"server.max_robots={max(robots, 8)}",
                    f"inference.batch_sizes={json.dumps(sizes)}",
                    f"inference.batch_window_us={args.window_us}",
                ])  # fmt: skip
                row = run(config, robots, args.seconds, args.tiny)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
