"""Does real-time chunking pay on this GPU: a flow policy with RTC off and in each mode, on one
tier, in one run, with a verdict line per mode. The measurement is `tempo profile compare
CONFIG --rtc` (controller.tools.rtc_compare: interleaved rounds, ratio of medians, paired
bootstrap); this script only supplies the policy and gets every runner started in time.

The policy is the ALOHA-shaped flow policy (3 cameras 480x640, 14 joints, H = 50, 10 Euler
steps, random weights; `policies.demo.make_flow_aloha_policy`), written once as a checkpoint
under --workdir, unless --checkpoint names one.

Start-up. Each mode is a different graph, so each compiles cold on a fresh machine (exact's
holds a VJP per denoising step; the RTC modes compile one step as a region, see
policy.rtc.regional_compile). One after the other, unrolled, that overran a 10-minute call on
an H100. So the runners are first started in parallel, one process
per mode (`--warm MODE`), which fills the persistent compile cache (runner.cache_dir: inductor's
caches and the per-model mega-cache); the compare then starts each runner from that cache
(dynamo tracing only). Each process prints its start-up time; the table prints the warm one.
`--no-prewarm` skips the parallel start (then the table's start column is the cold compile).

    python -m scripts.bench.bench_flow [--tier graph] [-n 200] [--modes exact stop_grad inpaint]
        [--set runner.compile_mode=max-autotune-no-cudagraphs] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from controller.config import load_config
from controller.tools.profiling import profiled_runner
from controller.tools.rtc_compare import (
    RTC_MODES,
    render_rtc_compare,
    rtc_variant,
    run_rtc_compare,
)
from policies.checkpoints.tempo_format import save_checkpoint
from policies.demo import make_flow_aloha_policy


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def aloha_checkpoint(workdir: Path) -> Path:
    """The flow-aloha checkpoint under `workdir`, written on first use (seeded weights)."""
    path = workdir / "flow-aloha"
    if not (path / "config.json").exists():
        say(f"writing the flow-aloha checkpoint to {path}")
        save_checkpoint(path, make_flow_aloha_policy())
    return path


def settings(args: argparse.Namespace, checkpoint: Path) -> list[str]:
    return [
        "policy.kind=checkpoint",
        f"policy.path={checkpoint}",
        "execution.ensemble=newest",
        f"execution.query_period={args.horizon}",
        f"runner.top_tier={args.tier}",
        "runner.step_budget_ms=null",
        *args.set,
    ]


def warm(mode: str, overrides: list[str]) -> int:
    """Start the runner of one mode (compiling into the persistent cache), then exit."""
    config = rtc_variant(load_config(None, overrides), mode)
    began = time.perf_counter()
    runner, _ = profiled_runner(config, None, lambda m: None)
    print(
        f"prewarm rtc {mode}: serving from {runner.tier}, started in "
        f"{time.perf_counter() - began:.0f} s (cold cache or not)",
        flush=True,
    )
    return 0


def prewarm(modes: list[str], args: argparse.Namespace) -> None:
    """One `--warm MODE` process per mode, all at once; waits for every one."""
    passthrough = ["--tier", args.tier, "--horizon", str(args.horizon)]
    passthrough += ["--workdir", str(args.workdir)]
    if args.checkpoint:
        passthrough += ["--checkpoint", str(args.checkpoint)]
    for item in args.set:
        passthrough += ["--set", item]
    began = time.perf_counter()
    processes = {
        mode: subprocess.Popen([sys.executable, "-m", __spec__.name, "--warm", mode, *passthrough])
        for mode in modes
    }
    failed = [mode for mode, process in processes.items() if process.wait() != 0]
    say(f"prewarm: {len(modes)} runners started in parallel in {time.perf_counter() - began:.0f} s")
    if failed:
        raise SystemExit(f"prewarm failed for {', '.join(failed)}: see the messages above")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", default="graph", help="runner.top_tier (every variant)")
    parser.add_argument("--checkpoint", type=Path, help="a flow checkpoint instead of flow-aloha")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("~/.cache/tempo/bench").expanduser(),
        help="where the flow-aloha checkpoint is written",
    )
    parser.add_argument("-n", "--iterations", type=int, default=200, help="rounds")
    parser.add_argument("--warmup", type=int, default=10, help="untimed rounds")
    parser.add_argument("--horizon", type=int, default=5, help="execution horizon s")
    parser.add_argument("--modes", nargs="+", default=list(RTC_MODES), choices=RTC_MODES)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    parser.add_argument("--no-prewarm", action="store_true")
    parser.add_argument("--warm", choices=("off", *RTC_MODES), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    checkpoint = args.checkpoint or aloha_checkpoint(args.workdir)
    overrides = settings(args, checkpoint)
    if args.warm:
        return warm(args.warm, overrides)
    if not args.no_prewarm:
        prewarm(["off", *args.modes], args)
    config = load_config(None, overrides)
    result = run_rtc_compare(
        config, args.iterations, modes=tuple(args.modes), warmup=args.warmup, progress=say
    )
    print(render_rtc_compare(result))
    if args.json:
        args.json.write_text(json.dumps(result.as_dict(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
