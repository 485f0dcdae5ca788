"""`tempo status [--json]`: ask a running daemon how it is doing, on its local status socket
(server.status_bind), and print its answer as a table or as JSON.

A config is read only when one is given: without one no pydantic is needed, so this runs on a
driver's install too. Only the standard library at import time.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def add_status_parser(
    sub: Any,
    add_config_args: Callable[..., None],
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> None:
    """Add `status` to the `tempo` subparsers (the CLI's config options and loader, and the
    status endpoint asked without a config)."""
    status = sub.add_parser("status", help="ask a running daemon how it is doing")
    add_config_args(status)
    status.add_argument("--connect", help="status endpoint (default: server.status_bind)")
    status.add_argument("--json", action="store_true", help="print the whole status as JSON")
    status.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for an answer (default 2)"
    )
    status.set_defaults(func=lambda args: cmd_status(args, load_config, default_endpoint))


def status_endpoint(
    args: argparse.Namespace,
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> str:
    """Where a running daemon's status socket is: --connect, else the config's
    server.status_bind when a config or overrides were given, else the default."""
    configured = load_config(args).server.status_bind if args.config or args.overrides else None
    return args.connect or configured or default_endpoint


def status_token(
    args: argparse.Namespace, load_config: Callable[[argparse.Namespace], Any], endpoint: str
) -> bytes | None:
    """The status token a tcp:// status socket wants with each command (the file at the
    config's server.status_token when a config or overrides were given, else the default
    path), if this user can read it; None on ipc:// (the peer's uid is checked there)."""
    from controller.observe.status_token import read_token, token_path

    if not endpoint.startswith("tcp://"):
        return None
    configured = load_config(args).server.status_token if args.config or args.overrides else None
    return read_token(token_path(configured))


def command_reply(
    endpoint: str, request: dict[str, Any], token: bytes | None = None
) -> dict[str, Any] | int:
    """The daemon's answer to a command (`tempo swap`, `tempo mark`; the map under the
    command's kind), or the exit code once said why not: no daemon answered (1), it refused
    (2), or it answered with its status, so it has no such command (2)."""
    from controller.observe.status_server import request_command

    kind = request["kind"]
    reply = request_command(endpoint, request, timeout_s=5.0, token=token)
    if reply is None:
        print(f"tempo {kind}: no daemon answered on {endpoint} within 5 s", file=sys.stderr)
        return 1
    if "error" in reply:
        print(f"tempo {kind}: refused: {reply['error']}", file=sys.stderr)
        return 2
    answer = reply.get(kind)
    if not isinstance(answer, dict):  # a status: this daemon has no such command
        print(f"tempo {kind}: the daemon on {endpoint} takes no {kind} command (an older "
              "Tempo?)", file=sys.stderr)  # fmt: skip
        return 2
    return answer


def cmd_status(
    args: argparse.Namespace,
    load_config: Callable[[argparse.Namespace], Any],
    default_endpoint: str,
) -> int:
    from controller.observe.status_server import request_status

    endpoint = status_endpoint(args, load_config, default_endpoint)
    token = status_token(args, load_config, endpoint)
    status = request_status(endpoint, timeout_s=args.timeout, token=token)
    if status is None:
        print(
            f"tempo status: no daemon answered on {endpoint} within {args.timeout} s",
            file=sys.stderr,
        )
        return 1
    if set(status) == {"error"}:  # refused (server.status_readers: owner)
        print(f"tempo status: refused: {status['error']}", file=sys.stderr)
        return 2
    if args.json:
        from controller.observe.status import json_safe

        print(json.dumps(json_safe(status), indent=2))
        return 0
    from controller.observe.status_view import render_status

    print(render_status(status))
    return 0
