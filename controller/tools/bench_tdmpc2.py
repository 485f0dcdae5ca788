"""`tempo bench --tdmpc2`: TD-MPC2 per action, the official code's eager planner beside Tempo's
tiers and fast mode.

    tempo bench --tdmpc2 --device cuda                  # 5M and 48M, humanoid
    tempo bench --tdmpc2 --device cuda --tasks humanoid,dog --sizes 5,48,317
    tempo bench --tdmpc2 --device cpu --sizes 1,5 --iters 5 --compute ""

For each task shape (humanoid: 67 observations, 21 actions; dog: 223 and 38) and model size, in
one process, on random weights:

- reference: an eager FP32 planner written the way the official `TDMPC2.act` / `_plan` runs
  (nicklashansen/tdmpc2 at e9f5932): the observation moved to the device, a Python loop per MPPI
  iteration drawing its noise with `torch.randn`, every Q head evaluated then two picked with
  `randperm`, the policy prior's log-probabilities computed as the official `pi` does, bins
  rebuilt with `linspace` in each two-hot decode, the mean kept in a buffer, the action
  returned with `.cpu()`. It is timed as a user calls it, host to host.
- Tempo: every tier that passes start-up (graph, compiled, eager_half, eager_fp32 on CUDA;
  eager_fp32, and compiled with --cpu-compiled, on a CPU), timed through `Runner.predict` with the
  robot's memory carried from step to step (host state in, host chunk and mean out), and the
  model alone with CUDA events; parity is the start-up check against eager FP32 on the codec's
  fixed-noise examples, once per variant:
  - plan fp32 (`compute: fp32`): every tier plans in FP32; parity is the largest relative error
    ("rel"), which must be within --parity-rtol;
  - plan tf32 / plan bf16 (--compute): the reduced tiers (graph, compiled, eager_half) plan with
    TF32 matmuls or pre-cast BF16 weights, eager_fp32 stays FP32; parity is the value regret
    ("regret", policies.tdmpc2.parity: the fraction of planning's gain over random plans the
    tier's plan gives up under the FP32 model), which must be within `parity_regret` (0.15);
  - kernels: CUDA kernels per plan of the compiled tier (the graph tier replays the same ones),
    counted with torch.profiler.
- fast mode (`mode: prior`), served from its top tier: "fast" as configured by default
  (`prior_steps: 1`, encode and one prior mean: the official fast mode's work), "fast-whole"
  with the prior rolled out over the whole horizon (`prior_steps: null`).

The runner's --precision (autocast dtype) does not change the planner, which turns autocast off
and plans in its own `compute`. --tf32 allows TF32 matmuls process-wide, the reference and every
fp32 tier included (for comparison only).

Prints one table per shape with the reference measured in the same run, and writes
bench_tdmpc2.json under $OUT when set.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from controller.errors import TempoError
from controller.inference.build import build_runner, resolve_device
from controller.observe.percentiles import summarize
from controller.runner_config import RunnerConfig
from policies.base import RobotContext
from policies.tdmpc2.config import TDMPC2Config
from policies.tdmpc2.official_style_planner import OfficialStylePlanner
from policies.tdmpc2.planner import TDMPC2Policy
from policies.tdmpc2.serving import MEAN, random_tdmpc2_policy, tdmpc2_policy

log = logging.getLogger("bench_tdmpc2")

TASKS = {"humanoid": (67, 21), "dog": (223, 38)}
TARGETS_MS = {5: 1.0, 48: 2.5}  # planning p50 on an H100/H200 (issue 15)
FAST_TARGET_MS = 0.15


# ---- Timing ------------------------------------------------------------------------------------


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50 and p99 in ms, under the keys this benchmark's JSON has always had."""
    summary = summarize(seconds, scale=1e3)
    return {"p50_ms": summary.p50, "p99_ms": summary.p99}


def time_reference(planner: OfficialStylePlanner, obs_dim: int, args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(0)
    observations = [
        torch.from_numpy(rng.standard_normal(obs_dim).astype(np.float32)) for _ in range(8)
    ]
    for i in range(args.warmup):
        planner.act(observations[i % 8], t0=i == 0)
    samples = []
    for i in range(args.iters):
        began = time.perf_counter()
        planner.act(observations[i % 8], t0=False)
        samples.append(time.perf_counter() - began)
    return percentiles(samples)


def time_runner(runner: Any, obs_dim: int, args: argparse.Namespace) -> dict[str, dict]:
    """Every ready tier through Runner.predict, the robot's memory carried between steps."""
    rng = np.random.default_rng(1)
    states = [rng.standard_normal((1, obs_dim)).astype(np.float32) for _ in range(8)]
    reports = {t["name"]: t for t in runner.status()["tiers"]}
    results = {}
    for name in runner.ready_tiers:
        runner.use_tier(name)
        memory: dict[str, np.ndarray] = {}
        samples = []
        iters = args.iters if name in ("graph", "compiled") else args.eager_iters
        for i in range(args.warmup + iters):
            context = RobotContext(
                step=i, episode_start=i == 0, state_history=states[i % 8], memory=memory
            )
            began = time.perf_counter()
            prediction = runner.predict({}, context)
            if i >= args.warmup:
                samples.append(time.perf_counter() - began)
            memory = dict(prediction.memory or {})
        if MEAN not in memory:
            raise RuntimeError(f"tier {name} returned no plan mean")
        result = {"step": percentiles(samples), "parity_error": reports[name]["parity_error"]}
        result["precision"] = reports[name]["precision"]
        if runner.status()["device"].startswith("cuda"):
            result["model_gpu"] = percentiles(runner.time_device(name, iters))
        results[name] = result
        log.info("%s: p50 %.3f ms", name, result["step"]["p50_ms"])
    return results


def runner_config(args: argparse.Namespace, cuda: bool, parity_rtol: float) -> RunnerConfig:
    top = args.top_tier or (
        "graph" if cuda else ("compiled" if args.cpu_compiled else "eager_fp32")
    )
    return RunnerConfig(
        top_tier=top,  # type: ignore[arg-type]
        precision=args.precision,
        compile_mode=args.compile_mode,
        cache_dir=Path(tempfile.mkdtemp(prefix="tempo-bench-tdmpc2-")),
        step_budget_ms=None,
        serve_slower_tiers=True,  # time every tier, a slower one too
        parity_rtol=parity_rtol,
    )


def variants(args: argparse.Namespace) -> list[tuple[str, dict[str, Any], float]]:
    """(label, config changes, parity_rtol) of each Tempo variant timed."""
    out: list[tuple[str, dict[str, Any], float]] = [("plan", {}, args.parity_rtol)]
    for compute in filter(None, args.compute.split(",")):
        out.append((f"plan-{compute}", {"compute": compute}, args.parity_rtol))
    # The default: the official fast mode's work, encode and one prior mean (chunk held).
    out.append(("fast", {"mode": "prior"}, args.parity_rtol))
    out.append(("fast-whole", {"mode": "prior", "prior_steps": None}, args.parity_rtol))
    return out


def kernels_per_plan(runner: Any, plans: int = 5) -> float | None:
    """CUDA kernels one step of the compiled tier launches (the graph tier replays the same)."""
    if "compiled" not in runner.ready_tiers:
        return None
    from torch.profiler import ProfilerActivity, profile

    runner.time_device("compiled", 3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        runner.time_device("compiled", plans)
    kernels = [
        e
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not e.name.startswith(("Memcpy", "Memset"))
    ]
    return len(kernels) / plans


def bench_one(task: str, size: int, device: str, args: argparse.Namespace) -> dict[str, Any]:
    obs_dim, action_dim = TASKS[task]
    config = TDMPC2Config.model_validate(
        {"obs_dim": obs_dim, "action_dim": action_dim, "model_size": size, "horizon": args.horizon}
    )
    policy = random_tdmpc2_policy(config)
    module = cast(TDMPC2Policy, policy.module)
    cuda = device == "cuda"
    row: dict[str, Any] = {
        "task": task, "obs_dim": obs_dim, "action_dim": action_dim, "model_size": size,
        "parameters_m": sum(p.numel() for p in module.parameters()) / 1e6,
        "iterations": config.planning_iterations, "horizon": config.horizon,
    }  # fmt: skip
    torch_device = torch.device(device)
    model = module.model.to(torch_device).eval()
    row["reference"] = time_reference(
        OfficialStylePlanner(model, config, torch_device), obs_dim, args
    )
    log.info("%s %sM reference: p50 %.3f ms", task, size, row["reference"]["p50_ms"])
    row["variants"] = {}
    for label, changes, rtol in variants(args):
        variant = TDMPC2Policy(config.model_copy(update=changes), model=model).eval()
        began = time.perf_counter()
        runner = build_runner(
            tdmpc2_policy(variant, policy.spec), runner_config(args, cuda, rtol), device
        )
        row["variants"][label] = {
            "start_s": time.perf_counter() - began,
            "serving_tier": runner.tier,
            "compute": variant.config.compute,
            "parity": "rel" if variant.config.compute == "fp32" else "regret",
            "tiers": time_runner(runner, obs_dim, args),
        }
        if cuda:
            try:
                row["variants"][label]["kernels"] = kernels_per_plan(runner)
            except Exception as exc:  # a count is a nicety: never lose the timings for it
                log.warning("kernel count failed: %s", exc)
        del runner
    return row


def _line(
    row: dict[str, Any],
    label: str,
    timing: dict,
    gpu: float | None,
    parity: str = "",
    kernels: float | None = None,
) -> str:
    cells = [
        f"{row['task']:9s}",
        f"{row['model_size']:>4d}M",
        f"{label:30s}",
        f"{timing['p50_ms']:9.3f}",
        f"{timing['p99_ms']:9.3f}",
        f"{gpu:8.3f}" if gpu is not None else " " * 8,
        f"{row['reference']['p50_ms'] / timing['p50_ms']:7.1f}",
        f"{parity:>15s}",
        f"{kernels:8.0f}" if kernels is not None else " " * 8,
    ]
    return " ".join(cells)


def print_table(rows: list[dict[str, Any]], device: str) -> None:
    print(f"\nTD-MPC2 per action on {device} (reference: official-style eager FP32, same run)")
    names = ["task", "size", "variant", "p50 ms", "p99 ms", "GPU p50", "x ref", "parity", "kernels"]
    widths = [9, 5, 30, 9, 9, 8, 7, 15, 8]
    header = " ".join(
        f"{n:{w}s}" if i < 3 else f"{n:>{w}s}"
        for i, (n, w) in enumerate(zip(names, widths, strict=True))
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(_line(row, "reference (official-style)", row["reference"], None))
        for group, variant in row["variants"].items():
            for name, r in variant["tiers"].items():
                gpu = r.get("model_gpu", {}).get("p50_ms")
                compute = "fp32" if name == "eager_fp32" else variant["compute"]
                label = f"{group} {name} ({compute})"
                error = r["parity_error"]
                parity = f"{error:.1e} {variant['parity']}" if error is not None else ""
                kernels = variant.get("kernels") if name in ("graph", "compiled") else None
                print(_line(row, label, r["step"], gpu, parity, kernels))
    for row in rows:
        starts = ", ".join(f"{g} {v['start_s']:.0f} s" for g, v in row["variants"].items())
        print(f"start-up {row['task']} {row['model_size']}M (compile, capture, parity): {starts}")
    if device.startswith("cuda"):
        print(
            "\nTargets (H100/H200): plan 5M p50 <= 1.0 ms, p99 <= 1.2 ms and >= 20x the "
            "reference; 48M p50 <= 2.5 ms; fast mode p50 <= 0.15 ms."
        )


def main(argv: list[str] | None = None) -> int:
    """A TempoError (a refused --device, a bad checkpoint) ends the bench with its one
    sentence and exit code 2, as `tempo bench` does (controller.tools.bench_policy.main)."""
    try:
        return _bench(argv)
    except TempoError as exc:
        print(f"tempo bench: {exc}", file=sys.stderr)
        return 2


def _bench(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="tempo bench --tdmpc2", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="where the policy runs (auto: cuda when there is one)",
    )
    parser.add_argument("--sizes", help="model sizes, comma-separated (cuda: 5,48; cpu: 1,5)")
    parser.add_argument("--tasks", default="humanoid", help="humanoid, dog (comma-separated)")
    parser.add_argument("--horizon", type=int, default=3, help="planning horizon (default 3)")
    parser.add_argument("--iters", type=int, help="timed actions per variant (cuda 300, cpu 5)")
    parser.add_argument("--warmup", type=int, help="untimed actions first (cuda 20, cpu 2)")
    parser.add_argument(
        "--eager-iters", type=int, help="timed actions of the eager tiers (cuda 50, cpu --iters)"
    )
    parser.add_argument("--top-tier", help="highest tier (default: graph on cuda)")
    parser.add_argument(
        "--precision",
        choices=["fp16", "bf16"],
        default="fp16",
        help="half precision of the graph, compiled and eager_half tiers",
    )
    parser.add_argument(
        "--parity-rtol",
        type=float,
        default=1e-2,
        help="accepted relative error of a tier against eager FP32 (default 0.01)",
    )
    parser.add_argument(
        "--cpu-compiled", action="store_true", help="also the compiled tier on a CPU"
    )
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument(
        "--compute",
        default="tf32,bf16",
        help="reduced-precision planners to time beside fp32 (comma-separated: tf32, bf16; "
        "empty for none)",
    )
    parser.add_argument(
        "--compile-mode",
        choices=["default", "max-autotune-no-cudagraphs"],
        default="default",
        help="torch.compile mode (runner.compile_mode)",
    )
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="allow TF32 matmuls process-wide (the reference and every FP32 tier alike)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    device = resolve_device(args.device, setting="--device")
    cuda = device == "cuda"
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    args.iters = args.iters or (300 if cuda else 5)
    args.warmup = args.warmup or (20 if cuda else 2)
    args.eager_iters = args.eager_iters or (min(50, args.iters) if cuda else args.iters)
    sizes = [int(s) for s in (args.sizes or ("5,48" if cuda else "1,5")).split(",")]
    rows = []
    for task in args.tasks.split(","):
        for size in sizes:
            rows.append(bench_one(task, size, device, args))
    name = torch.cuda.get_device_name() if cuda else f"cpu ({torch.get_num_threads()} threads)"
    name += ", TF32 matmuls on" if args.tf32 else ""
    print_table(rows, f"{device} {name}" if cuda else name)
    if os.environ.get("OUT"):
        out = Path(os.environ["OUT"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_tdmpc2.json").write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
