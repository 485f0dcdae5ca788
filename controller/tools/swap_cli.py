"""`tempo swap [--policy NAME] --path CHECKPOINT [--now]`: serve another checkpoint without a
restart of the daemon; `tempo swap [--policy NAME] --cancel`: end the swap under way.

The daemon is asked on its local status socket (server.status_bind; the `swap` command of
status_server, handled by link.policy_swap): it builds the checkpoint in a new inference
process, runs its start-up checks, checks that the robots bound now can be served by it, and
switches. This command then follows the swap in the daemon's status until it is done, is
switching at episode starts, or has ended otherwise (failed, cancelled, replaced by a later
swap, timed out), and prints one line saying which. A swap switching at episode starts is
replaced by a later `tempo swap` (with --now or without); `--cancel` ends it, or one being
built, and the old policy serves every robot.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

POLL_S = 0.5
# `tempo swap --cancel` watches this long for the swap to end (its new process is killed 2 s
# after it is asked to stop).
CANCEL_WAIT_S = 5.0


def add_swap_parser(
    sub: Any,
    add_config_args: Callable[..., None],
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> None:
    """Add `swap` to the `tempo` subparsers (the CLI's config options and loader, and the
    status endpoint asked without a config)."""
    parser = sub.add_parser("swap", help="serve another checkpoint without restarting")
    add_config_args(parser)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--path", type=Path, help="the new checkpoint directory")
    what.add_argument(
        "--cancel",
        action="store_true",
        help="end the swap under way (the old policy serves every robot)",
    )
    parser.add_argument(
        "--policy", help="which served policy to swap (needed when the daemon serves several)"
    )
    parser.add_argument(
        "--now",
        action="store_true",
        help="switch every robot at once (their plans and ensembling start afresh)",
    )
    parser.add_argument("--connect", help="status endpoint (default: server.status_bind)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds to wait for the new policy to be built and switched (default 1800)",
    )
    parser.set_defaults(func=lambda args: cmd_swap(args, load_config, default_endpoint))


def cmd_swap(
    args: argparse.Namespace,
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> int:
    from controller.observe.status_server import request_status
    from controller.tools.status_cli import command_reply, status_endpoint, status_token

    endpoint = status_endpoint(args, load_config, default_endpoint)
    token = status_token(args, load_config, endpoint)
    if args.cancel:
        return _cancel(endpoint, args, token)
    request = {
        "kind": "swap",
        "path": str(args.path.resolve()),  # the daemon may run elsewhere on this host
        "now": args.now,
        "policy": args.policy,
    }
    started = command_reply(endpoint, request, token)
    if isinstance(started, int):
        return started
    swap_id, name = started.get("id"), started.get("policy")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        time.sleep(POLL_S)
        swap = _swap_status(request_status(endpoint, timeout_s=5.0, token=token) or {}, name)
        later = swap.get("id")
        if isinstance(later, int) and isinstance(swap_id, int) and later > swap_id:
            print(f"tempo swap: replaced: a later swap (to {swap.get('path')}) replaced this one",
                  file=sys.stderr)  # fmt: skip
            return 2
        if later != swap_id or swap.get("phase") == "building":
            continue
        if swap.get("phase") in ("done", "switching"):  # switching: robots move at episode start
            print(f"tempo swap: {swap.get('phase')}: {swap.get('detail')}")
            return 0
        print(f"tempo swap: {swap.get('phase')}: {swap.get('detail')}", file=sys.stderr)
        return 2
    print(f"tempo swap: not finished within {args.timeout:.0f} s; see `tempo status`",
          file=sys.stderr)  # fmt: skip
    return 1


def _cancel(endpoint: str, args: argparse.Namespace, token: bytes | None) -> int:
    """`tempo swap --cancel`: one line saying the swap was cancelled, or why not."""
    from controller.tools.status_cli import command_reply

    if args.now:
        print("tempo swap: --now switches to a new checkpoint; --cancel takes no --now",
              file=sys.stderr)  # fmt: skip
        return 2
    from controller.observe.status_server import request_status

    request = {"kind": "swap", "cancel": True, "policy": args.policy}
    swap = command_reply(endpoint, request, token)
    if isinstance(swap, int):
        return swap
    # The daemon answers at once (its status thread answers everyone); the swap ends as its
    # new process does (killed 2 s after it is asked to stop): watched here, in status.
    deadline = time.monotonic() + CANCEL_WAIT_S
    swap_id, name = swap.get("id"), swap.get("policy")
    while swap.get("phase") in ("building", "switching") and time.monotonic() < deadline:
        time.sleep(POLL_S)
        now = _swap_status(request_status(endpoint, timeout_s=5.0, token=token) or {}, name)
        if now.get("id") == swap_id:
            swap = now
    if swap.get("phase") == "cancelled":
        print(f"tempo swap: cancelled: {swap.get('detail')}")
        return 0
    if swap.get("phase") in ("building", "switching"):  # asked; its new process still ending
        print(f"tempo swap: cancelling: the swap to {swap.get('path')} is still ending; "
              "`tempo status` shows when it has", file=sys.stderr)  # fmt: skip
        return 1
    # It ended otherwise just before (done, failed): said as it stands.
    print(f"tempo swap: not cancelled: the swap to {swap.get('path')} is {swap.get('phase')}: "
          f"{swap.get('detail')}", file=sys.stderr)  # fmt: skip
    return 2


def _swap_status(status: dict[str, Any], name: str | None) -> dict[str, Any]:
    """The swap that policy `name`'s process reports in a daemon status (several policies:
    under `policies`; one: `policy`)."""
    policies = status.get("policies") or {}
    policy = (policies.get(name) or {}).get("policy") if name in policies else status.get("policy")
    return ((policy or {}).get("process") or {}).get("swap") or {}
