"""The `tempo` command. Logging is configured here and nowhere else.

Every TempoError ends the command with its one-sentence message and exit code 2; a traceback
means a bug in Tempo.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from controller.config import TempoConfig, dump_config, load_config
from controller.errors import TempoError

log = logging.getLogger("tempo")


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML file (every field has a default)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one field, e.g. --set control.rate_hz=200 (repeatable)",
    )
    parser.add_argument("--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _config_args(args: argparse.Namespace) -> list[str]:
    """The same config options, to pass on to a child process."""
    out = ["--config", str(args.config)] if args.config else []
    for override in args.overrides:
        out += ["--set", override]
    return out


def _load(args: argparse.Namespace) -> TempoConfig:
    overrides = list(args.overrides)
    policy_path = getattr(args, "policy_path", None)
    if policy_path is not None:
        overrides = ["policy.kind=checkpoint", f"policy.path={policy_path}", *overrides]
    return load_config(args.config, overrides)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def _robot_description(config: TempoConfig) -> tuple[list[str], dict[str, tuple[int, int]], int]:
    """Joints, cameras and state size of the robot the configured policy expects."""
    from policies.catalog import build_tensor_policy

    spec = build_tensor_policy(config.policy, config.robot).spec
    cameras = {c.name: (c.height, c.width) for c in spec.cameras}
    return list(spec.joint_names), cameras, spec.state_size


def cmd_serve(args: argparse.Namespace) -> int:
    config = _load(args)
    _setup_logging(args.log_level or config.logging.level)
    from controller.app import serve

    return serve(config)


def cmd_config_show(args: argparse.Namespace) -> int:
    print(dump_config(_load(args)), end="")
    return 0


def cmd_sim_robot(args: argparse.Namespace) -> int:
    config = _load(args)
    _setup_logging(args.log_level or "WARNING")
    from controller.sim.sim_robot import main_sim_robot

    joints, cameras, state_size = _robot_description(config)
    endpoint = args.connect or config.server.bind
    return main_sim_robot(
        endpoint, joints, cameras, state_size, args.seconds, args.camera_hz, args.json_lines
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from controller.sim.demo import demo_policy_args, run_demo

    policy_args = demo_policy_args(args.policy)  # first, so the user's --set wins
    load_config(args.config, [*policy_args[1::2], *args.overrides])  # refuse a bad config now
    config_args = [*policy_args, *_config_args(args)]
    return run_demo(args.seconds, config_args, args.json, args.log_level or "WARNING")


def cmd_checkpoint_inspect(args: argparse.Namespace) -> int:
    from policies.checkpoints.load import describe_checkpoint

    print(describe_checkpoint(args.directory))
    return 0


def cmd_checkpoint_import(args: argparse.Namespace) -> int:
    from policies.checkpoints.lerobot import import_lerobot

    joint_names = args.joint_names.split(",") if args.joint_names else None
    written = import_lerobot(
        args.source,
        args.destination,
        joint_names=joint_names,
        allow_unknown_options=args.allow_unknown_options,
    )
    print(
        f"wrote a Tempo checkpoint to {written}; serve it with "
        f"`tempo serve --set policy.kind=checkpoint --set policy.path={written}`"
    )
    return 0


def _json_safe(value: object) -> object:
    """NaN (an empty window, before the first sample) is not JSON: it becomes null."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def cmd_status(args: argparse.Namespace) -> int:
    from controller.observe.status_server import request_status

    config = _load(args)
    endpoint = args.connect or config.server.status_bind
    status = request_status(endpoint, timeout_s=args.timeout)
    if status is None:
        print(
            f"tempo status: no daemon answered on {endpoint} within {args.timeout} s",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(_json_safe(status), indent=2))
        return 0
    from controller.observe.status_view import render_status

    print(render_status(status))
    return 0


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from controller.wire.keys import cmd_keys_generate as generate

    print(generate(args.directory, args.name))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tempo", description="Real-time robot policy controller.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the daemon")
    _add_config_args(serve)
    serve.add_argument(
        "--policy.path",
        dest="policy_path",
        type=Path,
        help="serve this checkpoint (Tempo's or a LeRobot ACT directory); short for "
        "--set policy.kind=checkpoint --set policy.path=DIR",
    )
    serve.set_defaults(func=cmd_serve)

    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the effective configuration as YAML")
    _add_config_args(show)
    show.set_defaults(func=cmd_config_show)

    sim = sub.add_parser("sim-robot", help="run a simulated robot driver against a daemon")
    _add_config_args(sim)
    sim.add_argument("--connect", help="daemon endpoint (default: server.bind)")
    sim.add_argument("--seconds", type=float, default=10.0)
    sim.add_argument("--camera-hz", type=float, default=30.0)
    sim.add_argument("--json-lines", action="store_true", help="stream JSON stats lines")
    sim.set_defaults(func=cmd_sim_robot)

    demo = sub.add_parser("demo", help="daemon + simulated robot, with a live status line")
    _add_config_args(demo)
    demo.add_argument("--seconds", type=float, default=10.0)
    demo.add_argument("--json", action="store_true", help="print one JSON summary at the end")
    demo.add_argument(
        "--policy",
        choices=["act", "reach"],
        default="act",
        help="act: a small ACT with random weights, made on first run (default); "
        "reach: the built-in scripted policy",
    )
    demo.set_defaults(func=cmd_demo)

    status = sub.add_parser("status", help="ask a running daemon how it is doing")
    _add_config_args(status)
    status.add_argument("--connect", help="status endpoint (default: server.status_bind)")
    status.add_argument("--json", action="store_true")
    status.add_argument("--timeout", type=float, default=2.0)
    status.set_defaults(func=cmd_status)

    checkpoint = sub.add_parser("checkpoint", help="inspect and import policy checkpoints")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    inspect = checkpoint_sub.add_parser("inspect", help="print a checkpoint's spec and size")
    inspect.add_argument("directory", type=Path)
    inspect.set_defaults(func=cmd_checkpoint_inspect)
    convert = checkpoint_sub.add_parser(
        "import-lerobot", help="convert a LeRobot ACT directory to Tempo's format"
    )
    convert.add_argument("source", type=Path)
    convert.add_argument("destination", type=Path)
    convert.add_argument(
        "--joint-names",
        help="comma-separated joint names (LeRobot configs carry none; default joint_0, ...)",
    )
    convert.add_argument(
        "--allow-unknown-options",
        action="store_true",
        help="accept LeRobot config options Tempo does not know (they are listed)",
    )
    convert.set_defaults(func=cmd_checkpoint_import)

    sub.add_parser(
        "bench",
        help="time every inference tier of a policy (see `tempo bench --help`)",
        add_help=False,
    )
    from controller.tools.profile_cli import add_profile_parser

    add_profile_parser(sub, _add_config_args, _setup_logging)

    keys = sub.add_parser("keys", help="CurveZMQ keys for binding beyond localhost")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser("generate", help="write NAME.key and NAME.key_secret")
    generate.add_argument("--dir", type=Path, required=True, dest="directory")
    generate.add_argument("--name", required=True)
    generate.set_defaults(func=cmd_keys_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # its own parser: every argument after `bench` is the bench's
        from controller.tools.bench_policy import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except TempoError as exc:
        print(f"tempo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
