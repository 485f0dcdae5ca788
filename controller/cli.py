"""The `tempo` command. Logging is configured here and nowhere else.

Every TempoError ends the command with its one-sentence message and exit code 2; a traceback
means a bug in Tempo.

The driver's install (numpy, pyzmq, msgpack) runs `tempo sim-robot --joints ...` and `tempo keys`;
every other command needs the `serve` extra. So this module imports the daemon's side (the config,
torch, policies) only inside the commands that use it, and a command that finds the extra missing
ends with one sentence saying what to install (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import ConfigError, TempoError, internal_error
from controller.tools.build_cli import add_build_parser
from controller.tools.checkpoint_cli import add_checkpoint_parsers
from controller.tools.replay_cli import add_export_parser, add_replay_parser
from controller.tools.swap_cli import add_swap_parser
from policies.registry import families

if TYPE_CHECKING:
    from controller.config import TempoConfig

log = logging.getLogger("tempo")

# The top-level modules of the `serve` extra (pyproject.toml), each with its distribution's name.
SERVE_EXTRA_MODULES = {
    "torch": "torch",
    "einops": "einops",
    "pydantic": "pydantic",
    "yaml": "PyYAML",
    "safetensors": "safetensors",
    "sentencepiece": "sentencepiece",
    "mcap": "mcap",
}
DISTRIBUTION = "tempo-controller"  # pyproject's [project] name
# server.bind's default (ServerConfig), for `tempo sim-robot --joints` without a config.
DEFAULT_BIND = "tcp://127.0.0.1:5555"
# server.status_bind's default, for `tempo status` without a config (a driver's install has none).
DEFAULT_STATUS_BIND = "tcp://127.0.0.1:5556"


def package_version() -> str:
    """The installed distribution's version (pyproject's), as pip knows it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _missing_serve_extra(exc: ModuleNotFoundError) -> str | None:
    """The serve extra's distribution whose absence raised `exc`; None for any other module
    (a missing submodule of an installed package is a broken install, not a missing extra)."""
    return SERVE_EXTRA_MODULES.get(exc.name or "")


def _needs_serve_extra(command: str, distribution: str) -> str:
    """The one sentence for a command that needs the serve extra on an install without it."""
    packages = ", ".join(SERVE_EXTRA_MODULES.values())
    sentence = (
        f"tempo {command} needs the daemon's dependencies ({packages}) and {distribution} is not "
        "installed: pip install 'tempo-controller[serve]'"
    )
    if command == "sim-robot":
        sentence += ", or describe the robot with --joints and --camera instead of a config"
    return sentence


def add_config_args(parser: argparse.ArgumentParser, *, policy_path: bool = False) -> None:
    """--config, --set and --log-level; with policy_path, also --policy.path DIR."""
    parser.add_argument("--config", type=Path, help="YAML file (every field has a default)")
    if policy_path:
        parser.add_argument(
            "--policy.path",
            dest="policy_path",
            type=Path,
            help="serve this checkpoint (Tempo's or a LeRobot ACT directory); short for "
            "--set policy.kind=checkpoint --set policy.path=DIR",
        )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one field, e.g. --set control.rate_hz=200 (repeatable)",
    )
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default: logging.level of the config for serve, WARNING for the tools)",
    )


def _config_args(args: argparse.Namespace) -> list[str]:
    """The same config options, to pass on to a child process."""
    out = ["--config", str(args.config)] if args.config else []
    for override in args.overrides:
        out += ["--set", override]
    return out


def _load(args: argparse.Namespace) -> TempoConfig:
    from controller.config import load_config, with_policy_path

    return load_config(args.config, with_policy_path(args.overrides, args))


def setup_logging(level: str) -> None:
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
    setup_logging(args.log_level or config.logging.level)
    from controller.app import serve

    return serve(config)


def cmd_inference_process(args: argparse.Namespace) -> int:
    """The policy's own process, started by `tempo serve` (not meant to be run by hand)."""
    from controller.link.parent_death import control_pid, die_with_parent, parent_alive

    die_with_parent()  # first: the imports below take seconds, and the parent may die meanwhile
    if not parent_alive(control_pid()):
        return 0  # it died before we asked: nobody to serve
    from controller.config import TempoConfig
    from controller.inference.process_main import config_json, run_inference_process

    config = TempoConfig.model_validate_json(config_json(args.config_json))
    setup_logging(config.logging.level)
    code = run_inference_process(
        config.policy, config.robot, config.runner, config.supervision, args.channel_fd,
        config.inference.batch_sizes,
    )  # fmt: skip
    _exit_now(code)
    return code  # not reached


def _exit_now(code: int) -> None:
    """End the inference process without the interpreter's teardown: with a model loaded,
    freeing torch's objects one by one took 1.5-2 s (the daemon's shutdown waits for it), and
    nothing is left to save (compile caches are written as they are built; the shared memory
    is closed). Logs are flushed and torch's compile workers, if any, are stopped first."""
    logging.shutdown()
    async_compile = sys.modules.get("torch._inductor.async_compile")
    stop_workers = getattr(async_compile, "shutdown_compile_workers", None)
    if stop_workers is not None:
        stop_workers()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_config_show(args: argparse.Namespace) -> int:
    from controller.config import dump_config

    print(dump_config(_load(args)), end="")
    return 0


def _parse_cameras(specs: Sequence[str]) -> dict[str, tuple[int, int]]:
    """`--camera NAME=HxW` options -> {name: (height, width)}."""
    cameras: dict[str, tuple[int, int]] = {}
    for spec in specs:
        name, _, size = spec.partition("=")
        height, _, width = size.partition("x")
        if not (name and height.isdigit() and width.isdigit() and int(height) and int(width)):
            raise ConfigError(f"--camera {spec!r}: expected NAME=HEIGHTxWIDTH, e.g. front=96x128")
        if name in cameras:
            raise ConfigError(f"--camera {name!r} is given twice")
        cameras[name] = (int(height), int(width))
    return cameras


def _sim_robot_description(
    args: argparse.Namespace,
) -> tuple[list[str], dict[str, tuple[int, int]], int, str]:
    """Joints, cameras, state size and endpoint: from --joints/--camera/--connect where given,
    else from the config and its policy (which needs the serve extra)."""
    if args.joints is None:
        if args.cameras:
            raise ConfigError("--camera describes the robot together with --joints; add --joints")
        config = _load(args)
        joints, cameras, state_size = _robot_description(config)
        return joints, cameras, state_size, args.connect or config.server.bind
    joints = [name.strip() for name in args.joints.split(",")]
    if not all(joints):
        raise ConfigError(f"--joints {args.joints!r}: expected comma-separated joint names")
    given = _load(args) if args.config or args.overrides else None  # a given config is checked
    endpoint = args.connect or (given.server.bind if given else DEFAULT_BIND)
    return joints, _parse_cameras(args.cameras), len(joints), endpoint


def cmd_sim_robot(args: argparse.Namespace) -> int:
    setup_logging(args.log_level or "WARNING")
    joints, cameras, state_size, endpoint = _sim_robot_description(args)
    from controller.sim.sim_robot import main_sim_robot

    return main_sim_robot(
        endpoint,
        joints,
        cameras,
        state_size,
        args.seconds,
        args.camera_hz,
        args.json_lines,
        frames_in_place=False if args.frames_on_socket else None,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from controller.config import load_config
    from controller.sim.demo import demo_policy_args, run_demo

    policy_args = demo_policy_args(args.policy, args.config, args.overrides, args.json)
    load_config(args.config, [*policy_args[1::2], *args.overrides])  # refuse a bad config now
    config_args = [*policy_args, *_config_args(args)]
    return run_demo(args.seconds, config_args, args.json, args.log_level or "WARNING")


def cmd_status(args: argparse.Namespace) -> int:
    from controller.observe.status_server import request_status

    # A config is read only when given: without one no pydantic is needed (a driver's install).
    configured = _load(args).server.status_bind if args.config or args.overrides else None
    endpoint = args.connect or configured or DEFAULT_STATUS_BIND
    status = request_status(endpoint, timeout_s=args.timeout)
    if status is None:
        print(
            f"tempo status: no daemon answered on {endpoint} within {args.timeout} s",
            file=sys.stderr,
        )
        return 1
    if args.json:
        from controller.observe.status import json_safe

        print(json.dumps(json_safe(status), indent=2))
        return 0
    from controller.observe.status_view import render_status

    print(render_status(status))
    return 0


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from controller.wire.keys import cmd_keys_generate as generate

    print(generate(args.directory, args.name, args.role))
    return 0


def _add_profile_parser(sub: argparse._SubParsersAction) -> None:
    """`tempo profile`'s options are the tool's own, and the tool imports the config."""
    try:
        from controller.tools.profile_cli import add_profile_parser
    except ModuleNotFoundError as exc:
        if _missing_serve_extra(exc) is None:
            raise
        # Listed all the same; main() answers `tempo profile` before parsing its options.
        sub.add_parser("profile", help="where a policy step's time goes (serve extra)")
        return
    add_profile_parser(sub, add_config_args, setup_logging)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tempo", description="Real-time robot policy controller.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"tempo {package_version()}",
        help="print the installed version and exit",
    )
    # metavar: the choices are listed by their help lines, so a parser without help is hidden.
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the daemon")
    add_config_args(serve, policy_path=True)
    serve.set_defaults(func=cmd_serve)

    # Started by `tempo serve` for its inference process; hidden from the help.
    child = sub.add_parser("inference-process")
    child.add_argument(
        "--config-json", type=Path, default=None, help="the config as JSON (default: stdin)"
    )
    child.add_argument(
        "--channel-fd", type=int, required=True, help="the daemon's end of the socket pair"
    )
    child.set_defaults(func=cmd_inference_process)

    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the effective configuration as YAML")
    add_config_args(show)
    show.set_defaults(func=cmd_config_show)

    sim = sub.add_parser("sim-robot", help="run a simulated robot driver against a daemon")
    add_config_args(sim)
    sim.add_argument("--connect", help=f"daemon endpoint (default: server.bind, {DEFAULT_BIND})")
    sim.add_argument(
        "--joints",
        metavar="NAME,NAME,...",
        help="the robot's joints; with --camera, describes the robot without reading the config "
        "and its policy, so no serve extra is needed (default: the configured policy's robot)",
    )
    sim.add_argument(
        "--camera",
        dest="cameras",
        action="append",
        default=[],
        metavar="NAME=HxW",
        help="a camera of the robot given by --joints, e.g. front=96x128 (repeatable)",
    )
    sim.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    sim.add_argument(
        "--camera-hz", type=float, default=30.0, help="new camera frames per second (default 30)"
    )
    sim.add_argument("--json-lines", action="store_true", help="stream JSON stats lines")
    sim.add_argument(
        "--frames-on-socket",
        action="store_true",
        help="send frames on the socket even to a same-host (ipc://) daemon, instead of "
        "writing them into its shared frame ring",
    )
    sim.set_defaults(func=cmd_sim_robot)

    demo = sub.add_parser("demo", help="daemon + simulated robot, with a live status line")
    add_config_args(demo)
    demo.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    demo.add_argument("--json", action="store_true", help="print one JSON summary at the end")
    demos = {family.name: family.demo for family in families() if family.demo is not None}
    demo.add_argument(
        "--policy",
        choices=list(demos),
        default="act",
        help="; ".join(f"{name}: {d.help}" for name, d in demos.items()),
    )
    demo.set_defaults(func=cmd_demo)

    status = sub.add_parser("status", help="ask a running daemon how it is doing")
    add_config_args(status)
    status.add_argument("--connect", help="status endpoint (default: server.status_bind)")
    status.add_argument("--json", action="store_true", help="print the whole status as JSON")
    status.add_argument(
        "--timeout", type=float, default=2.0, help="seconds to wait for an answer (default 2)"
    )
    status.set_defaults(func=cmd_status)
    add_swap_parser(sub, add_config_args, _load, DEFAULT_STATUS_BIND)

    add_checkpoint_parsers(sub, setup_logging)

    add_replay_parser(sub, add_config_args, setup_logging, _load)
    add_build_parser(sub, add_config_args, setup_logging, _load)
    add_export_parser(sub, setup_logging)

    sub.add_parser(
        "bench",
        help="time every inference tier of a policy (see `tempo bench --help`)",
        add_help=False,
    )
    _add_profile_parser(sub)

    keys = sub.add_parser("keys", help="CurveZMQ keys for binding beyond localhost")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser("generate", help="write NAME.key and NAME.key_secret")
    generate.add_argument(
        "--dir", type=Path, required=True, dest="directory", help="where to write the key pair"
    )
    generate.add_argument(
        "--name", required=True, help="file name of the pair (daemon, or the driver's name)"
    )
    generate.add_argument(
        "--role",
        choices=["daemon", "driver"],
        help="whose key pair this is, for the instructions printed (default: daemon if --name "
        "is daemon, else driver)",
    )
    generate.set_defaults(func=cmd_keys_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader went away (`tempo status | head`): not an error of ours. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # what a shell reports for SIGPIPE
    except ModuleNotFoundError as exc:
        distribution = _missing_serve_extra(exc)
        if distribution is None:
            print(f"tempo: {internal_error(exc)}", file=sys.stderr)
            return 70
        print(_needs_serve_extra(argv[0] if argv else "", distribution), file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a bug of ours: one sentence, never a traceback
        print(f"tempo: {internal_error(exc)}", file=sys.stderr)
        return 70  # EX_SOFTWARE


def _run(argv: list[str]) -> int:
    if argv[:2] == ["bench", "--tdmpc2"]:  # TD-MPC2's planner against the official-style one
        from controller.tools.bench_tdmpc2 import main as bench_tdmpc2

        return bench_tdmpc2(argv[2:])
    if argv[:1] == ["bench"]:  # its own parser: every argument after `bench` is the bench's
        from controller.tools.bench_policy import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["profile"]:  # its parser is the tool's: import it before parsing
        import controller.tools.profile_cli  # noqa: F401
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
