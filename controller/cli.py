"""The `tempo` command. Logging is configured here and nowhere else.

Every TempoError ends the command with its one-sentence message and exit code 2; a traceback
means a bug in Tempo.

The driver's install (numpy, pyzmq, msgpack) runs `tempo sim-robot --joints ...`, `tempo keys`
and, with the `lerobot` extra, `tempo drive`; every other command needs the `serve` extra. So
this module imports the daemon's side (the config, torch, policies) only inside the commands
that use it, and a command that finds the extra missing ends with one sentence saying what to
install (exit code 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from controller.errors import TempoError, internal_error
from controller.sim.sim_cli import add_sim_parsers
from controller.tools.build_cli import add_build_parser
from controller.tools.checkpoint_cli import add_checkpoint_parsers
from controller.tools.mark_cli import add_mark_parser
from controller.tools.replay_cli import add_export_parser, add_replay_parser
from controller.tools.status_cli import add_status_parser
from controller.tools.swap_cli import add_swap_parser

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


def _load(args: argparse.Namespace) -> TempoConfig:
    from controller.config import load_config, with_policy_path

    return load_config(args.config, with_policy_path(args.overrides, args))


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def cmd_serve(args: argparse.Namespace) -> int:
    config = _load(args)
    setup_logging(args.log_level or config.logging.level)
    from controller.app import serve

    return serve(config)


def cmd_inference_process(args: argparse.Namespace) -> int:
    """The policy's own process, started by `tempo serve` (not meant to be run by hand)."""
    from controller.process_protocol.parent_death import control_pid, die_with_parent, parent_alive

    die_with_parent()  # first: the imports below take seconds, and the parent may die meanwhile
    if not parent_alive(control_pid()):
        return 0  # it died before we asked: nobody to serve
    from controller.config import TempoConfig
    from controller.inference.process_main import config_json, run_inference_process

    config = TempoConfig.model_validate_json(config_json(args.config_json))
    setup_logging(config.logging.level)
    code = run_inference_process(
        config.policy, config.robot, config.runner, config.supervision, args.channel_fd,
        config.execution.batch_sizes,
    )  # fmt: skip
    _exit_now(code)
    return code  # not reached


def cmd_infer_relay(args: argparse.Namespace) -> int:
    """The robot side of a remote inference link, started by `tempo serve` with policy.remote
    set in place of an inference process (not meant to be run by hand). Imports no torch."""
    from controller.bounded_file import MAX_CONFIG_BYTES, read_stream_text
    from controller.config import TempoConfig
    from controller.errors import ConfigError
    from controller.link.remote_relay import RemoteServer, run_relay

    text = read_stream_text(sys.stdin.buffer, MAX_CONFIG_BYTES, ConfigError, "the config on stdin")
    config = TempoConfig.model_validate_json(text)
    setup_logging(config.logging.level)
    if config.policy.remote is None:
        raise ConfigError("tempo infer-relay needs policy.remote in the config it is given")
    remote = config.policy.remote
    server = RemoteServer(remote.address, remote.server_key, remote.client_key, remote.timeout_s)
    return run_relay(server, args.channel_fd)


def cmd_infer_server(args: argparse.Namespace) -> int:
    config = _load(args)
    setup_logging(args.log_level or config.logging.level)
    from controller.daemon.infer_server import run_infer_server

    return run_infer_server(config, args.bind, args.timeout_s)


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
    from controller.tools.config_show import show_config

    print(show_config(_load(args)), end="")
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

    relay = sub.add_parser("infer-relay")  # started by `tempo serve` with policy.remote
    relay.add_argument(
        "--channel-fd", type=int, required=True, help="the daemon's end of the socket pair"
    )
    relay.set_defaults(func=cmd_infer_relay)

    infer_server = sub.add_parser(
        "infer-server", help="run inference processes for daemons on other machines"
    )
    add_config_args(infer_server)
    infer_server.add_argument(
        "--bind", required=True, help="where daemons connect, e.g. tcp://0.0.0.0:5600"
    )
    infer_server.add_argument(
        "--timeout-s", type=float, default=5.0, help="a daemon silent this long is dropped"
    )
    infer_server.set_defaults(func=cmd_infer_server)

    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the effective configuration as YAML")
    add_config_args(show)
    show.set_defaults(func=cmd_config_show)

    add_sim_parsers(sub, add_config_args, setup_logging, _load)
    add_status_parser(sub, add_config_args, _load, DEFAULT_STATUS_BIND)
    add_swap_parser(sub, add_config_args, _load, DEFAULT_STATUS_BIND)
    add_mark_parser(sub, add_config_args, _load, DEFAULT_STATUS_BIND)

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
    sub.add_parser(
        "drive",
        help="drive a LeRobot robot against the daemon, from LeRobot's own --robot.* flags "
        "(see `tempo drive --help`; the lerobot extra)",
        add_help=False,
    )

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
    if argv[:1] == ["drive"]:  # its own parser: LeRobot's flags go to LeRobot's configs
        from controller.drive.drive_cli import main as drive_main

        try:
            return drive_main(argv[1:], setup_logging)
        except TempoError as exc:
            print(f"tempo: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
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
