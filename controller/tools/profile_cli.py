"""The `tempo profile` subcommand: argument parsing and output, over controller.tools.profiling and
controller.tools.compare (cli.py adds it with `add_profile_parser`).

    tempo profile [CONFIG] [--set ...] [-n 200] [--replay FILE.npz] [--torch-profiler DIR]
                  [--report DIR] [--json]
    tempo profile compare A.yaml B.yaml [--set ... (both)]
    tempo profile compare A.yaml --set runner.top_tier=eager_fp32     (B = A + the overrides)
    tempo profile compare --set execution.query_period=10             (A = defaults, B = + set)
    tempo profile compare FLOW.yaml --rtc      (RTC off against each RTC mode, a verdict each)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.config import load_config, with_policy_path
from controller.errors import ConfigError

log = logging.getLogger("tempo")


def _at_least_two(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError("at least 2")
    return value


def add_profile_parser(
    sub: Any,
    add_config_args: Callable[..., None],
    setup_logging: Callable[[str], None],
) -> argparse.ArgumentParser:
    """Add `profile` to the `tempo` subparsers; add_config_args and setup_logging are the
    CLI's own (cli.add_config_args, cli.setup_logging), so logging is set up one way."""
    profile = sub.add_parser(
        "profile",
        help="where a policy step's time goes (no robot needed); `profile compare A B`",
        description="Run the policy as `tempo serve` would and break one step down; or, as "
        "`tempo profile compare A.yaml [B.yaml]`, run two configurations interleaved and say "
        "which is faster (B = A plus the --set overrides when only A is given).",
    )
    add_config_args(profile, policy_path=True)
    profile.add_argument(
        "targets",
        nargs="*",
        metavar="CONFIG | compare A [B]",
        help="a config file (like --config), or `compare` and one or two config files",
    )
    profile.add_argument(
        "-n",
        "--iterations",
        type=_at_least_two,
        default=200,
        help="measured steps (profile) or interleaved rounds (compare); default 200",
    )
    profile.add_argument("--warmup", type=int, default=20, help="unmeasured steps/rounds first")
    profile.add_argument(
        "--replay",
        type=Path,
        metavar="FILE.npz",
        help="observations from a file: one uint8 (T, H, W, 3) array per camera and 'state' "
        "(T, state_size); default: random ones from the policy's spec",
    )
    profile.add_argument(
        "--torch-profiler",
        type=Path,
        metavar="DIR",
        help="also record a torch.profiler trace (Perfetto / TensorBoard) into DIR",
    )
    profile.add_argument(
        "--report", type=Path, metavar="DIR", help="write JSON and PNG plots into DIR"
    )
    profile.add_argument("--json", action="store_true", help="print the result as JSON")
    profile.add_argument(
        "--confidence", type=float, default=0.95, help="compare: confidence of the interval"
    )
    profile.add_argument(
        "--min-effect",
        type=float,
        default=0.02,
        help="compare: smallest ratio change called a difference (default 0.02 = 2%%)",
    )
    profile.add_argument(
        "--rtc",
        nargs="*",
        choices=["exact", "stop_grad", "inpaint", "trained"],
        metavar="MODE",
        help="compare: a flow, pi0 or pi0.5 policy's config with real-time chunking off against "
        "each RTC mode (default exact stop_grad inpaint, and trained for a pi0.5 trained for "
        "it), with a verdict line per mode",
    )
    profile.set_defaults(func=cmd_profile, setup_logging=setup_logging)
    return profile


def _name(path: Path | None, overrides: list[str], fallback: str) -> str:
    name = path.stem if path is not None else fallback
    if overrides:
        name += " + " + ", ".join(overrides)
    return name if len(name) <= 60 else name[:57] + "..."


def cmd_profile(args: argparse.Namespace) -> int:
    args.setup_logging(args.log_level or "WARNING")

    def progress(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    targets: list[str] = list(args.targets)
    policy = with_policy_path([], args)  # --policy.path: both sides of a comparison
    overrides: list[str] = list(args.overrides)
    if targets and targets[0] == "compare":
        files = [Path(t) for t in targets[1:]]
        if args.config is not None:
            files.insert(0, args.config)
        if len(files) > 2:
            raise ConfigError("tempo profile compare takes at most two config files (A and B)")
        if args.torch_profiler is not None:
            raise ConfigError("--torch-profiler works with `tempo profile CONFIG`, not compare")
        from controller.tools.compare import render_compare, run_compare

        if args.rtc is not None:
            return _compare_rtc(args, files, overrides, progress)
        if len(files) == 2:
            config_a = load_config(files[0], policy + overrides)
            config_b = load_config(files[1], policy + overrides)
            names = (_name(files[0], [], "A"), _name(files[1], [], "B"))
        else:
            if not overrides:
                raise ConfigError(
                    "tempo profile compare needs two config files, or one (or none) and "
                    "--set overrides that make B"
                )
            base = files[0] if files else None
            config_a = load_config(base, policy)
            config_b = load_config(base, policy + overrides)
            names = (_name(base, [], "defaults"), _name(base, overrides, "defaults"))
        comparison = run_compare(
            config_a,
            config_b,
            args.iterations,
            names=names,
            replay=args.replay,
            warmup=args.warmup,
            confidence=args.confidence,
            min_effect=args.min_effect,
            report_dir=args.report,
            progress=progress,
        )
        print(render_compare(comparison))
        if args.json:
            print(json.dumps(comparison.as_dict(samples=False), indent=1, default=str))
        if comparison.report is not None:
            print(comparison.report)
        return 0

    if len(targets) > 1 or (targets and args.config is not None):
        raise ConfigError("tempo profile takes one config file (positional or --config)")
    config_path = Path(targets[0]) if targets else args.config
    config = load_config(config_path, policy + overrides)
    from controller.tools.profiling import render_profile, run_profile

    result = run_profile(
        config,
        args.iterations,
        replay=args.replay,
        torch_profiler_dir=args.torch_profiler,
        report_dir=args.report,
        warmup=args.warmup,
        progress=progress,
    )
    print(render_profile(result))
    if args.json:
        print(json.dumps(result.as_dict(samples=False), indent=1, default=str))
    if result.report is not None:
        print(result.report)
    return 0


def _compare_rtc(
    args: argparse.Namespace, files: list[Path], overrides: list[str], progress: Any
) -> int:
    if len(files) > 1:
        raise ConfigError(
            "tempo profile compare --rtc takes one config file (a flow, pi0 or pi0.5 policy)"
        )
    from controller.tools.rtc_compare import render_rtc_compare, run_rtc_compare

    config = load_config(files[0] if files else None, overrides)
    result = run_rtc_compare(
        config,
        args.iterations,
        modes=tuple(args.rtc) or None,
        replay=args.replay,
        warmup=args.warmup,
        confidence=args.confidence,
        min_effect=args.min_effect,
        progress=progress,
    )
    print(render_rtc_compare(result))
    if args.json:
        print(json.dumps(result.as_dict(), indent=1, default=str))
    return 0
