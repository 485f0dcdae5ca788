"""`tempo replay`'s parser. Only the standard library at import time (the `tempo` parser is
built on a driver's install too); the command imports the replay (and the serve extra) when it
runs (controller.tools.flight_replay)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_replay_parser(
    sub: Any,
    add_config_args: Callable[..., None],
    setup_logging: Callable[[str], None],
    load_config: Callable[[argparse.Namespace], Any],
) -> None:
    """Add `replay` to the `tempo` subparsers (the CLI's config options, logging and loader)."""
    parser = sub.add_parser(
        "replay",
        help="run a flight recording's inference requests through a policy and compare the "
        "chunks with those served",
    )
    add_config_args(parser, policy_path=True)
    parser.add_argument("file", type=Path, help="a flight recording (.mcap) of `record:`")
    parser.add_argument(
        "--tier",
        choices=["eager_fp32", "eager_half", "compiled", "graph"],
        default="eager_fp32",
        help="the highest tier to replay on (default eager_fp32: the reference)",
    )
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write a plot of the differences")
    parser.add_argument("--top", type=int, default=5, help="how many worst steps to list")
    parser.add_argument(
        "--summary", action="store_true", help="only the summary, not a line per step"
    )

    def run(args: argparse.Namespace) -> int:
        from controller.tools.flight_replay import run_replay

        setup_logging(args.log_level or "WARNING")
        return run_replay(args, load_config(args))

    parser.set_defaults(func=run)


def add_export_parser(sub: Any, setup_logging: Callable[[str], None]) -> None:
    """Add `export-lerobot` to the `tempo` subparsers (controller.tools.export_lerobot)."""
    parser = sub.add_parser(
        "export-lerobot",
        help="write flight recordings' episodes as a LeRobotDataset (v3: Parquet, MP4, meta/)",
    )
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE", help="flight recordings")
    parser.add_argument("out", type=Path, metavar="OUT", help="the dataset's new directory")
    parser.add_argument(
        "--fps", type=int, help="the dataset's frame rate (default: the observations' rate)"
    )
    parser.add_argument("--robot", help="export only this robot (default: every robot)")
    parser.add_argument(
        "--env-state",
        type=int,
        default=0,
        metavar="K",
        help="the last K entries of each state are the environment's (an object's pose), "
        "written as observation.environment_state (default 0)",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")

    def run(args: argparse.Namespace) -> int:
        from controller.tools.export_lerobot import run_export

        setup_logging(args.log_level)
        return run_export(args)

    parser.set_defaults(func=run)
