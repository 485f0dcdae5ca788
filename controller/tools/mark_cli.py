"""`tempo mark [--robot NAME] [REASON]`: keep this moment in the flight recording of one robot
(or of every robot), as a driver's `mark` does; in ring mode each robot's last seconds are
written out as an incident file.

The daemon is asked on its local status socket (server.status_bind; the `mark` command,
controller.daemon.operator_marks). It answers which robots kept the mark, and why any did not
(nothing recorded, or that robot marked less than a second ago).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def add_mark_parser(
    sub: Any,
    add_config_args: Callable[..., None],
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> None:
    """Add `mark` to the `tempo` subparsers (the CLI's config options and loader, and the
    status endpoint asked without a config)."""
    parser = sub.add_parser("mark", help="keep this moment in the flight recording")
    add_config_args(parser)
    parser.add_argument("reason", nargs="?", help="what happened (default: operator mark)")
    parser.add_argument("--robot", help="the robot whose moment it is (default: every robot)")
    parser.add_argument("--connect", help="status endpoint (default: server.status_bind)")
    parser.set_defaults(func=lambda args: cmd_mark(args, load_config, default_endpoint))


def cmd_mark(
    args: argparse.Namespace,
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> int:
    from controller.observe.log_safety import shown
    from controller.tools.status_cli import command_reply, status_endpoint, status_token

    endpoint = status_endpoint(args, load_config, default_endpoint)
    token = status_token(args, load_config, endpoint)
    request = {"kind": "mark", "robot": args.robot, "reason": args.reason}
    mark = command_reply(endpoint, request, token)
    if isinstance(mark, int):
        return mark
    kept, refused = mark.get("kept") or [], mark.get("refused") or {}
    if kept:
        print(f"tempo mark: kept for {shown(', '.join(map(str, kept)), 300)}")
    for robot, why in refused.items():
        print(f"tempo mark: not kept for {shown(str(robot), 64)}: {shown(str(why), 300)}",
              file=sys.stderr)  # fmt: skip
    return 0 if kept else 2
