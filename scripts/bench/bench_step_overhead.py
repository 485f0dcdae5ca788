"""The runner's per-step host overhead: Runner.predict against the model alone, in one run.

    python -m scripts.bench.bench_step_overhead                        # CPU, eager_fp32
    python -m scripts.bench.bench_step_overhead --device cuda          # graph tier, TD-MPC2 5M
    python -m scripts.bench.bench_step_overhead --device cuda --tiers graph,compiled \\
        --policies tdmpc2

For each policy (TD-MPC2 fast mode, `mode: prior`, humanoid shapes, its whole horizon rolled out
(tdmpc2) or `prior_steps: 1` (tdmpc2-1); the tiny visuomotor policy; the demo ACT) and each tier
asked for, rounds alternate, one call each, between:

- model alone: the tier's `run()` on the static inputs already staged (a graph replay on CUDA),
  then a synchronize: the floor any serving path pays;
- predict: `Runner.predict(images, context)`, the serving path, with the robot's memory carried
  from step to step as a session does;
- the phases of predict's step path, called one by one as predict calls them: upload (codec
  encode, staging, H2D enqueue), run (enqueue the tier), download (D2H, wait, host arrays),
  check (the finite test); on CUDA upload and run return before the GPU is done, and download
  includes the wait for it.

Overhead = predict - model alone (medians). On CUDA the model's CUDA-event time (`time_device`)
is printed too. On a CPU, TD-MPC2's smallest official size (1M) makes the model a few hundred
microseconds, so the overhead column is the one to read there; `--policies null` adds a policy
whose model is one tiny matmul, where nearly everything is overhead.

Writes bench_step_overhead.json under $OUT when that is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from controller.inference.build import build_runner
from controller.inference.parity import all_finite
from controller.inference.runner import Runner
from controller.observe.percentiles import summarize
from controller.runner_config import RunnerConfig
from policies.base import PolicySpec, RobotContext
from policies.demo import make_demo_policy
from policies.inputs import example_frames
from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.serving import random_tdmpc2_policy
from policies.tensor_policy import TensorPolicy
from policies.tiny import build_tiny_policy, tiny_spec


class NullModule(nn.Module):
    """state (1, 1, n) -> chunk (1, chunk, joints): one small matmul, a model that costs
    next to nothing."""

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__()
        self.chunk, self.joints = spec.chunk_size, len(spec.joint_names)
        self.proj = nn.Linear(spec.state_size, self.chunk * self.joints)

    def forward(self, frames: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.proj(state[:, -1]).view(-1, self.chunk, self.joints)


def build_policy(name: str, args: argparse.Namespace) -> TensorPolicy:
    if name in ("tdmpc2", "tdmpc2-1"):  # fast mode; -1: prior_steps 1 (one prior mean)
        size = args.model_size or (5 if args.device == "cuda" else 1)
        changes: dict[str, Any] = {"obs_dim": 67, "action_dim": 21, "model_size": size}
        changes["mode"] = "prior"
        changes["prior_steps"] = 1 if name == "tdmpc2-1" else None  # None: the whole horizon
        return random_tdmpc2_policy(TDMPC2Config.model_validate(changes))
    if name == "tiny":
        return build_tiny_policy(tiny_spec(cameras=1, height=48, width=64))
    if name == "act":
        return make_demo_policy()
    if name == "null":
        spec = tiny_spec(cameras=0, state_size=14, joints=14, chunk_size=20)
        return TensorPolicy(spec=spec, module=NullModule(spec).eval())
    raise SystemExit(f"unknown policy {name!r}; choose from tdmpc2, tdmpc2-1, tiny, act, null")


def contexts(runner: Runner, count: int = 8) -> list[RobotContext]:
    """Contexts the codec makes for examples: every codec's own inputs, shaped right."""
    codec = getattr(runner, "codec", None) or runner._codec  # older builds, for bisecting
    return [codec.example(seed) for seed in range(1, count + 1)]


def measure(runner: Runner, tier: str, args: argparse.Namespace) -> dict[str, Any]:
    runner.use_tier(tier)
    path, spec = runner.step_path, runner.spec
    images = example_frames(spec, 0)
    examples = contexts(runner)
    cuda = path.device.type == "cuda"
    memory: dict[str, np.ndarray] = {}

    def context(i: int) -> RobotContext:
        base = examples[i % len(examples)]
        return RobotContext(
            step=i, episode_start=i == 0, state_history=base.state_history, memory=memory
        )

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(path.device)

    def model_alone(i: int) -> None:
        with torch.no_grad(), path.on_stream():
            runner.serving_tier.run()
            sync()

    def predict(i: int) -> None:
        nonlocal memory
        prediction = runner.predict(images, context(i))
        memory = dict(prediction.memory or {})

    samples: dict[str, list[int]] = {
        k: [] for k in ("model alone", "predict", "upload", "run", "download", "check")
    }

    def phases(i: int) -> None:
        clock = time.perf_counter_ns
        ctx = context(i)
        t0 = clock()
        path.upload(images, ctx)
        t1 = clock()
        with torch.no_grad(), path.on_stream():
            out = runner.serving_tier.run()
            t2 = clock()
            consumed = getattr(path.staging, "mark_consumed", None)  # builds before issue 16
            if consumed is not None:
                consumed()
            outputs = path.download.fetch(out)
        t3 = clock()
        if not all_finite(outputs):
            raise RuntimeError("non-finite output")
        t4 = clock()
        for key, value in zip(
            ("upload", "run", "download", "check"),
            (t1 - t0, t2 - t1, t3 - t2, t4 - t3),
            strict=True,
        ):
            samples[key].append(value)

    timed: list[tuple[str, Callable[[int], None]]] = [
        ("model alone", model_alone),
        ("predict", predict),
    ]
    for i in range(args.warmup):
        for _, fn in timed:
            fn(i)
        phases(i)
    for i in range(args.iters):
        for key, fn in timed:
            began = time.perf_counter_ns()
            fn(i)
            samples[key].append(time.perf_counter_ns() - began)
        phases(i)
    summaries = {key: summarize(ns, scale=1e-3) for key, ns in samples.items()}
    row: dict[str, Any] = {key: {"p50_us": s.p50, "p99_us": s.p99} for key, s in summaries.items()}
    row["overhead_p50_us"] = row["predict"]["p50_us"] - row["model alone"]["p50_us"]
    if cuda:
        gpu = summarize(runner.time_device(tier, args.iters), scale=1e6)
        row["model gpu"] = {"p50_us": gpu.p50, "p99_us": gpu.p99}
    return row


def print_table(name: str, tier: str, row: dict[str, Any]) -> None:
    print(f"\n{name} / {tier}")
    print(f"  {'':<14} {'p50 us':>9} {'p99 us':>9}")
    for key in ("model gpu", "model alone", "predict", "upload", "run", "download", "check"):
        if key in row:
            print(f"  {key:<14} {row[key]['p50_us']:9.1f} {row[key]['p99_us']:9.1f}")
    print(f"  {'overhead':<14} {row['overhead_p50_us']:9.1f}   (predict - model alone, p50)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--policies", default="tdmpc2,tdmpc2-1,tiny,null")
    parser.add_argument("--tiers", default="", help="default: graph on CUDA, eager_fp32 on CPU")
    parser.add_argument("--model-size", type=int, default=None, help="TD-MPC2 size (5 / 1)")
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tiers = [t for t in args.tiers.split(",") if t] or (
        ["graph"] if args.device == "cuda" else ["eager_fp32"]
    )
    top = "graph" if "graph" in tiers else ("compiled" if "compiled" in tiers else "eager_fp32")
    config = RunnerConfig(top_tier=top, cache_dir=None)  # type: ignore[arg-type]
    results: dict[str, Any] = {"device": args.device, "torch": torch.__version__, "rows": {}}
    print(f"torch {torch.__version__}, device {args.device}, {args.iters} rounds")
    for name in args.policies.split(","):
        runner = build_runner(build_policy(name, args), config, args.device)
        results["device_name"] = runner.status()["device"]
        for tier in tiers:
            if tier not in runner.ready_tiers:
                print(f"\n{name} / {tier}: not ready ({runner.ready_tiers})")
                continue
            row = measure(runner, tier, args)
            results["rows"][f"{name}/{tier}"] = row
            print_table(name, tier, row)
    out = os.environ.get("OUT")
    if out:
        Path(out, "bench_step_overhead.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
