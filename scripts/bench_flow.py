"""Time a flow policy with real-time chunking off and in each mode, on one tier, in one run.

The policy is the ALOHA-shaped flow policy (3 cameras 480x640, 14 joints, H = 50, 10 Euler
steps, random weights; `policies.demo.make_flow_aloha_policy`) unless `--checkpoint` names one.
Every variant gets its own Runner started as the daemon starts it; then rounds of one predict per
variant, the order rotating, each with the robot's context as its session would give it (the
previous chunk from 5 steps before as the plan, delay `--delay`). Reported per variant: the
policy step host to host (upload, model, download; wall clock) and the model alone (CUDA events,
`Runner.time_device`), p50 and p99, and the overhead of each mode over RTC off (ratio of p50s).

    python scripts/bench_flow.py --device cuda [--tier graph] [-n 300] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from controller.inference.runner import Runner
from controller.inference.runner_config import RunnerConfig
from policies.base import Plan, RobotContext
from policies.checkpoints.load import load_checkpoint
from policies.demo import make_flow_aloha_policy
from policies.flow.config import RTCConfig
from policies.flow.rtc import serve_with_rtc
from policies.inputs import example_frames
from policies.tensor_policy import TensorPolicy

MODES = ("off", "exact", "stop_grad", "inpaint")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tier", default="graph", help="runner.top_tier (every variant)")
    parser.add_argument("--checkpoint", type=Path, help="a flow checkpoint instead of flow-aloha")
    parser.add_argument("-n", "--iterations", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--delay", type=int, default=2)
    parser.add_argument("--beta", type=float, default=5.0)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if "off" not in args.modes:
        args.modes.insert(0, "off")
    base = load_checkpoint(args.checkpoint) if args.checkpoint else make_flow_aloha_policy()
    config = RunnerConfig(top_tier=args.tier, step_budget_ms=None)
    runners: dict[str, Runner] = {}
    for mode in args.modes:
        own = TensorPolicy(base.spec, copy.deepcopy(base.module), base.codec)  # a runner each
        served = serve_with_rtc(own, RTCConfig(mode=mode, beta=args.beta))
        started = time.perf_counter()
        runner = Runner(served, config, device=args.device)
        runner.start()
        print(
            f"{mode}: serving from {runner.tier}, started in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
        runners[mode] = runner
    spec = base.spec
    frames = [example_frames(spec, seed) for seed in range(4)]
    history = np.zeros((1, spec.state_size), np.float32)
    chunks = {mode: None for mode in runners}
    steps = {mode: [] for mode in runners}
    step = 0
    for i in range(args.warmup + args.iterations):
        step += 5
        order = list(runners)[i % len(runners) :] + list(runners)[: i % len(runners)]
        for mode in order:
            previous = chunks[mode]
            plan = None if previous is None else Plan(step, previous[5:])
            context = RobotContext(step, previous is None, history, plan, args.delay)
            began = time.perf_counter()
            chunks[mode] = runners[mode].predict(frames[i % 4], context).actions
            if i >= args.warmup:
                steps[mode].append(time.perf_counter() - began)
    rows = []
    for mode, runner in runners.items():
        model = np.asarray(runner.time_device(runner.tier or "graph", args.iterations))
        wall = np.asarray(steps[mode])
        rows.append(
            {
                "mode": mode,
                "tier": runner.tier,
                "step_p50_ms": float(np.median(wall) * 1e3),
                "step_p99_ms": float(np.percentile(wall, 99) * 1e3),
                "model_p50_ms": float(np.median(model) * 1e3),
                "model_p99_ms": float(np.percentile(model, 99) * 1e3),
            }
        )
    off = rows[0]
    print(
        f"{'mode':<11}{'tier':<12}{'step p50':>10}{'step p99':>10}{'model p50':>11}"
        f"{'model p99':>11}{'overhead (step p50)':>21}{'(model p50)':>13}"
    )
    for row in rows:
        row["overhead_step"] = row["step_p50_ms"] / off["step_p50_ms"] - 1
        row["overhead_model"] = row["model_p50_ms"] / off["model_p50_ms"] - 1
        print(
            f"{row['mode']:<11}{row['tier']:<12}{row['step_p50_ms']:>8.3f}ms"
            f"{row['step_p99_ms']:>8.3f}ms{row['model_p50_ms']:>9.3f}ms{row['model_p99_ms']:>9.3f}ms"
            f"{row['overhead_step'] * 100:>20.1f}%{row['overhead_model'] * 100:>12.1f}%"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"device": runners["off"].status()["device"], "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
