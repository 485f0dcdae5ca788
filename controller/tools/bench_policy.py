"""`tempo bench`: a policy through the tier ladder.

    tempo bench                          # on a GPU: ACT at ALOHA shapes; on a CPU: the demo
                                         # ACT, eager, 50 steps (well under a minute)
    tempo bench --act-aloha              # ACT, LeRobot's ALOHA shapes, random weights
    tempo bench CHECKPOINT_DIR --json out.json --plot latency.png
    tempo bench --tiny --device cpu      # the tiny test policy (seconds)
    tempo bench --tdmpc2 ...             # TD-MPC2's planner (controller.tools.bench_tdmpc2)

The targets (BENCHMARKS: ACT at ALOHA shapes on an NVIDIA H200) are compared only for that
policy on that GPU; elsewhere the table says why they are not. Progress is logged while it
times. A compile cache made for the run (no --cache-dir) is removed at the end.

Per ready tier: the full predict_chunk path (host arrays in -> upload -> model -> download ->
caller-owned array) timed on the wall clock, and the model alone timed with CUDA events; the
speed-up over eager_fp32 measured in the same run; the parity error from start-up. Also the time
to ready from a cold compile cache (this process) and from the warm cache (a fresh process), both
from script start (imports, model build, compile, capture, parity).

Writes bench_policy.json and bench_policy.log under $OUT when that is set.
"""

from __future__ import annotations

import time

SCRIPT_STARTED = time.perf_counter()  # before torch's import: restarts pay for it too

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402

from controller.observe.percentiles import summarize  # noqa: E402
from controller.tools.bench_policy_report import plot, print_table, targets_apply, verdicts  # noqa: E402

if TYPE_CHECKING:
    from policies.catalog import BenchmarkPolicy

log = logging.getLogger("bench_policy")

PROGRESS_EVERY_S = 2.0
# Without arguments: (iterations, warm-up) on a GPU and on a CPU.
DEFAULT_STEPS = {"cuda": (300, 20), "cpu": (50, 5)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tempo bench", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("checkpoint", nargs="?", type=Path, help="a Tempo or LeRobot ACT dir")
    source.add_argument("--act-aloha", action="store_true", help="ACT, ALOHA shapes, random")
    source.add_argument("--act-demo", action="store_true", help="the demo's small ACT, random")
    source.add_argument("--tiny", action="store_true", help="the tiny conv+MLP test policy")
    parser.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="where the policy runs (auto: cuda when there is one)",
    )
    parser.add_argument(
        "--iters", type=int, help="timed steps per tier (default 300 on a GPU, 50 on a CPU)"
    )
    parser.add_argument(
        "--warmup", type=int, help="untimed steps per tier first (default 20 GPU, 5 CPU)"
    )
    parser.add_argument(
        "--cache-dir", type=Path, help="compile cache (default: a temp dir, removed at the end)"
    )
    parser.add_argument(
        "--top-tier",
        default="auto",
        help="highest tier to try (default auto: graph on a GPU, eager_fp32 on a CPU, where "
        "compiling takes minutes; --top-tier compiled to time it anyway)",
    )
    parser.add_argument(
        "--precision",
        choices=["fp16", "bf16"],
        default="fp16",
        help="half precision of the graph, compiled and eager_half tiers",
    )
    parser.add_argument(
        "--compile-mode",
        choices=["default", "max-autotune-no-cudagraphs"],
        default="default",
        help="torch.compile mode (runner.compile_mode)",
    )
    parser.add_argument(
        "--channels-last",
        choices=["auto", "on", "off"],
        default="auto",
        help="channels_last convolution weights (runner.channels_last)",
    )
    parser.add_argument(
        "--reference-weights",
        choices=["device", "host"],
        default="device",
        help="where the FP32 reference keeps its matmul weights (runner.reference_weights)",
    )
    parser.add_argument("--freezing", action="store_true", help="inductor freezing")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="let cuDNN time algorithms")
    parser.add_argument(
        "--ab-channels-last",
        action="store_true",
        help="also start a second runner with the opposite channels_last and compare (another "
        "cold compile)",
    )
    parser.add_argument("--no-warm-start", action="store_true", help="skip the restart timing")
    parser.add_argument("--json", dest="json_out", help="write results as JSON here ('-': stdout)")
    parser.add_argument("--plot", type=Path, help="PNG of the latency distributions")
    parser.add_argument("--warm-child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def policy_from_flags(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """(TensorPolicy, description) of the policy the flags name, from `policies.catalog`. A
    checkpoint loads on the CPU; the runner moves it."""
    from policies import catalog

    if args.checkpoint is not None:
        from controller.policy_sections import PolicyConfig

        section = PolicyConfig(kind="checkpoint", path=args.checkpoint)
        return catalog.build_tensor_policy(section), catalog.describe_source(section)
    return catalog.build_benchmark_policy(benchmark_name(args))


def benchmark_name(args: argparse.Namespace) -> BenchmarkPolicy:
    """The built-in policy the flags name; none named: ACT at ALOHA shapes on a GPU, the demo's
    small ACT on a CPU (where ALOHA-sized steps take seconds)."""
    if args.tiny:
        return "tiny"
    if args.act_demo:
        return "act-demo"
    if args.act_aloha or device_of(args) == "cuda":
        return "act-aloha"
    return "act-demo"


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fill --iters and --warmup from the device when not given."""
    iters, warmup = DEFAULT_STEPS["cuda" if device_of(args) == "cuda" else "cpu"]
    args.iters = iters if args.iters is None else args.iters
    args.warmup = warmup if args.warmup is None else args.warmup


def runner_config(args: argparse.Namespace, cache_dir: Path, **overrides: Any):  # type: ignore[no-untyped-def]
    from controller.runner_config import RunnerConfig

    settings: dict[str, Any] = {
        "top_tier": args.top_tier,
        "precision": args.precision,
        "compile_mode": args.compile_mode,
        "channels_last": args.channels_last,
        "freezing": args.freezing,
        "reference_weights": args.reference_weights,
        "cudnn_benchmark": args.cudnn_benchmark,
        "cache_dir": cache_dir,
        "step_budget_ms": None,  # measure every tier; never demote for time here
        "serve_slower_tiers": True,  # and time a tier slower than one below it too
    }
    settings.update(overrides)
    return RunnerConfig(**settings)


def device_of(args: argparse.Namespace) -> str:
    """--device resolved as the daemon resolves policy.device: cuda without CUDA is refused."""
    from controller.inference.build import resolve_device

    if getattr(args, "_device", None) is None:
        args._device = resolve_device(args.device, setting="--device")
    return str(args._device)


def bench_runner(args: argparse.Namespace, cache_dir: Path, **overrides: Any):  # type: ignore[no-untyped-def]
    """(runner, description, seconds to start it), the runner built as the daemon builds it."""
    from controller.inference.build import build_runner as start

    device = device_of(args)  # before the (possibly slow) policy build
    policy, description = policy_from_flags(args)
    began = time.perf_counter()
    runner = start(policy, runner_config(args, cache_dir, **overrides), device)
    return runner, description, time.perf_counter() - began


def percentiles_ms(seconds: list[float]) -> dict[str, float]:
    """Median, p99, mean and min in ms, under the keys this benchmark's JSON has always had."""
    summary = summarize(seconds, scale=1e3)
    return {
        "median_ms": summary.p50,
        "p99_ms": summary.p99,
        "mean_ms": summary.mean,
        "min_ms": summary.min,
    }


def measure_tiers(runner, args: argparse.Namespace) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    from controller.inference.examples import random_observation

    observations = [random_observation(runner.spec, 7000 + i) for i in range(8)]
    reports = {t["name"]: t for t in runner.status()["tiers"]}
    results: dict[str, dict[str, Any]] = {}
    for name in runner.ready_tiers:
        runner.use_tier(name)
        log.info("timing %s: %d warm-up steps, then %d timed", name, args.warmup, args.iters)
        for i in range(args.warmup):
            runner.predict_chunk(*observations[i % len(observations)])
        step = []
        said = time.perf_counter()
        for i in range(args.iters):
            began = time.perf_counter()
            runner.predict_chunk(*observations[i % len(observations)])
            step.append(time.perf_counter() - began)
            if began - said >= PROGRESS_EVERY_S:
                said = began
                log.info("timing %s: %d/%d steps", name, i + 1, args.iters)
        log.info("timing %s: the model alone, %d steps", name, args.iters)
        device = runner.time_device(name, args.iters)
        results[name] = {
            "precision": reports[name]["precision"],
            "parity_error": reports[name]["parity_error"],
            "build_s": reports[name]["build_s"],
            "step": percentiles_ms(step),
            "device": percentiles_ms(device),
            "step_samples_ms": [s * 1e3 for s in step],
        }
        log.info("%s: step median %.3f ms", name, results[name]["step"]["median_ms"])
    reference = results.get("eager_fp32")
    for result in results.values():
        for kind in ("step", "device"):
            ratio = reference[kind]["median_ms"] / result[kind]["median_ms"] if reference else None
            result[kind]["speedup_vs_eager_fp32"] = ratio
    return results


def warm_start(args: argparse.Namespace, cache_dir: Path) -> dict[str, Any]:
    """Start the same policy in a fresh process on the now-warm cache; its time to ready."""
    command = [sys.executable, "-m", "controller.tools.bench_policy", "--warm-child", "--cache-dir"]
    command += [str(cache_dir), *forwarded(args)]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    wall = time.perf_counter() - began
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("WARM ")]
    if done.returncode != 0 or not lines:
        log.error("warm start failed (exit %s): %s", done.returncode, done.stderr[-2000:])
        return {"ok": False, "exit": done.returncode, "stderr_tail": done.stderr[-2000:]}
    result = json.loads(lines[-1][5:])
    result.update(ok=True, process_wall_s=wall)
    return result


def forwarded(args: argparse.Namespace) -> list[str]:
    out = ["--device", device_of(args), "--top-tier", args.top_tier, "--precision", args.precision]
    out += ["--compile-mode", args.compile_mode, "--channels-last", args.channels_last]
    out += ["--reference-weights", args.reference_weights]
    out += ["--freezing"] if args.freezing else []
    out += ["--cudnn-benchmark"] if args.cudnn_benchmark else []
    if args.checkpoint is not None:
        out.append(str(args.checkpoint))
    else:
        out.append("--" + benchmark_name(args))
    return out


def warm_child(args: argparse.Namespace) -> int:
    runner, _, start_s = bench_runner(args, args.cache_dir)
    status = runner.status()
    ready_s = time.perf_counter() - SCRIPT_STARTED
    result = {"ready_s": ready_s, "start_s": start_s, "tier": runner.tier}
    result["start_phases"] = status["start_phases"]
    result["compile_cache"] = status["compile_cache"]
    print("WARM " + json.dumps(result), flush=True)
    return 0


def _gpu_memory_gb() -> dict[str, float] | None:
    """The GPU memory this process held at most (every tier built) and holds now, GB."""
    import torch

    if not torch.cuda.is_available():
        return None
    return {
        "peak_allocated": torch.cuda.max_memory_allocated() / 1e9,
        "allocated": torch.cuda.memory_allocated() / 1e9,
        "reserved": torch.cuda.memory_reserved() / 1e9,
    }


def _gpu_name(device: object) -> str | None:
    import torch

    if "cuda" not in str(device) or not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name())


def main(argv: list[str] | None = None) -> int:
    """Every TempoError (a refused --device, a bad checkpoint, no tier passing) ends the bench
    with its one sentence and exit code 2, as other `tempo` commands do."""
    from controller.errors import TempoError

    args = parse_args(argv)
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if out_dir is not None and not args.warm_child:
        out_dir.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(out_dir / "bench_policy.log"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", handlers=handlers
    )
    try:
        return bench(args, out_dir)
    except TempoError as exc:
        print(f"tempo bench: {exc}", file=sys.stderr)
        return 2


def bench(args: argparse.Namespace, out_dir: Path | None) -> int:
    if args.warm_child:
        return warm_child(args)
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("--plot needs matplotlib: pip install matplotlib", file=sys.stderr)
            return 2
    resolve_defaults(args)
    if args.cache_dir is not None:
        return run_bench(args, out_dir, args.cache_dir)
    with tempfile.TemporaryDirectory(prefix="tempo-bench-cache-") as cache_dir:
        return run_bench(args, out_dir, Path(cache_dir))


def run_bench(args: argparse.Namespace, out_dir: Path | None, cache_dir: Path) -> int:
    log.info("building and checking the tiers (a compile can take minutes) ...")
    runner, description, start_s = bench_runner(args, cache_dir)
    cold = {"ready_s": time.perf_counter() - SCRIPT_STARTED, "start_s": start_s}
    status = runner.status()
    cold["start_phases"] = status["start_phases"]
    module = runner.module
    report: dict[str, Any] = {
        "policy": description,
        "parameters_m": sum(p.numel() for p in module.parameters()) / 1e6,
        "device": status["device"],
        "channels_last": status["channels_last"],
        "settings": runner_config(args, cache_dir).model_dump(mode="json"),
        "gpu": _gpu_name(status["device"]),
        "serving_tier": runner.tier,
        "cold_start": {**cold, "compile_cache": status["compile_cache"]},
        "startup_tiers": status["tiers"],
    }
    report["tiers"] = measure_tiers(runner, args)
    report["gpu_memory_gb"] = _gpu_memory_gb()
    compiled = bool({"graph", "compiled"} & set(runner.ready_tiers))
    if args.ab_channels_last:
        flip = "off" if status["channels_last"] else "on"
        with tempfile.TemporaryDirectory(prefix="tempo-bench-ab-") as ab_cache:
            other, _, _ = bench_runner(args, Path(ab_cache), channels_last=flip)
            tiers = measure_tiers(other, args)
        report["ab_channels_last"] = {"channels_last": flip, "tiers": tiers}
        del other
    del runner, module
    if not args.no_warm_start and compiled:  # a restart only differs with a compile cache
        log.info("timing a restart on the warm compile cache (a fresh process) ...")
        report["warm_start"] = warm_start(args, cache_dir)
    act_aloha = args.checkpoint is None and benchmark_name(args) == "act-aloha"
    skipped = targets_apply(report, act_aloha)
    report["targets"] = verdicts(report) if skipped is None else {}
    if skipped is not None:
        report["targets_skipped"] = skipped
    print_table(report)
    text = json.dumps(report, indent=1, default=str)
    if args.json_out == "-":
        print(text)
    elif args.json_out:
        Path(args.json_out).write_text(text)
    if out_dir is not None:
        (out_dir / "bench_policy.json").write_text(text)
    if args.plot is not None:
        plot(report, args.plot)
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
