"""`tempo drive`: a LeRobot robot against a running daemon, from LeRobot's own flags.

    tempo drive --connect tcp://127.0.0.1:5555 \\
        --robot.type=so101_follower --robot.port=/dev/ttyACM0 --robot.id=my_arm \\
        --robot.cameras="{front: {type: opencv, index_or_path: 0, width: 640, height: 480,
                          fps: 30}}"
    # a leader arm owning the gripper (without --teleop-joints: every joint it has)
        --teleop.type=so101_leader --teleop.port=/dev/ttyACM1 --teleop.id=my_leader \\
        --teleop-joints gripper.pos

Tempo's own options are parsed here; every `--robot.*` and `--teleop.*` flag goes to LeRobot's
draccus configs unchanged (controller.drive.lerobot_devices, which needs the `lerobot` extra;
without it the command ends with one sentence naming the extra). The run: the devices' features
mapped, the handshake checked before anything connects to hardware, the robot (and leader arm)
connected, the loop (controller.drive.drive_loop) at the daemon's rate until --seconds or
Ctrl-C, then the devices disconnected and a summary printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from controller.daemon.helper_threads import set_realtime
from controller.drive.drive_client import connect_drive_client
from controller.drive.drive_loop import run_drive
from controller.drive.feature_map import FeatureMap
from controller.errors import ConfigError, SecurityError

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"  # server.bind's default
LEROBOT_PREFIXES = ("--robot.", "--teleop.")
# The sentence when LeRobot is not installed (pyproject.toml's `lerobot` extra).
NEEDS_LEROBOT = (
    "tempo drive needs LeRobot, which is not installed here: pip install "
    "'tempo-controller[lerobot]' (LeRobot wants Python 3.12 or newer), with your robot's own "
    "LeRobot extra, e.g. 'lerobot[feetech]' for an SO-101"
)
LEROBOT_MODULES = ("lerobot", "draccus")


def build_drive_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tempo drive",
        allow_abbrev=False,
        description="Drive a LeRobot robot (and optionally a leader arm) against a running "
        "daemon. The robot is given by LeRobot's own flags, as lerobot-record and "
        "lerobot-teleoperate take them: --robot.type=... --robot.port=... --robot.id=... "
        "[--robot.cameras=...] [--teleop.type=... --teleop.port=... --teleop.id=...]; "
        "plugins too (--robot.discover_packages_path=..., or an installed lerobot_robot_* "
        "package).",
    )
    parser.add_argument("--connect", default=DEFAULT_ENDPOINT, help="the daemon's endpoint")
    parser.add_argument(
        "--name", help="the robot's name at the daemon (default: --robot.id, else its type)"
    )
    parser.add_argument(
        "--teleop-joints",
        metavar="FEATURE,...",
        help="the joints the leader arm owns, by feature name (e.g. gripper.pos); default: "
        "every action feature of the leader arm",
    )
    parser.add_argument(
        "--seconds", type=float, help="stop after this long from the first action (default: Ctrl-C)"
    )
    parser.add_argument("--task", help="the robot's task, for a policy that reads a prompt")
    parser.add_argument("--policy", help="the daemon's policy to be served by (default: its own)")
    parser.add_argument("--client-secret-key", type=Path, help="CurveZMQ: this driver's secret key")
    parser.add_argument("--server-public-key", type=Path, help="CurveZMQ: the daemon's public key")
    parser.add_argument(
        "--realtime-priority",
        type=int,
        metavar="1-99",
        help="run the loop under SCHED_FIFO at this priority (Linux; CAP_SYS_NICE or root), as "
        "the daemon's control.realtime_priority runs its own; refused in one sentence if it "
        "cannot (default: off)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--json-lines", action="store_true", help="stream a JSON line a second")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default WARNING)",
    )
    return parser


def split_lerobot_flags(rest: Sequence[str]) -> list[str]:
    """The arguments Tempo's parser left: LeRobot's `--robot.*` / `--teleop.*` flags, each
    with its value (`--robot.port=X` or `--robot.port X`). ConfigError for anything else."""
    flags: list[str] = []
    expect_value = False
    for arg in rest:
        if arg.startswith(LEROBOT_PREFIXES):
            flags.append(arg)
            expect_value = "=" not in arg
        elif expect_value and not arg.startswith("--"):
            flags.append(arg)
            expect_value = False
        else:
            raise ConfigError(
                f"{arg!r} is neither an option of tempo drive (tempo drive --help) nor a "
                "LeRobot --robot.* or --teleop.* flag"
            )
    return flags


def teleop_joint_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ConfigError(f"--teleop-joints {text!r}: expected comma-separated feature names")
    return names


def main(argv: Sequence[str], setup_logging: Callable[[str], None]) -> int:
    args, rest = build_drive_parser().parse_known_args(list(argv))
    flags = split_lerobot_flags(rest)
    teleop_joints = teleop_joint_list(args.teleop_joints)
    if args.realtime_priority is not None and not 1 <= args.realtime_priority <= 99:
        raise ConfigError(f"--realtime-priority must be 1 to 99, not {args.realtime_priority}")
    setup_logging(args.log_level)
    try:
        from controller.drive import lerobot_devices as devices_module
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in LEROBOT_MODULES:
            raise
        print(NEEDS_LEROBOT, file=sys.stderr)
        return 2
    devices = devices_module.parse_devices(flags)
    robot = devices_module.build_robot(devices.robot)
    leader = devices_module.build_teleoperator(devices.teleop) if devices.teleop else None
    features = FeatureMap.from_features(
        devices.robot.type,
        robot.observation_features,
        robot.action_features,
        teleop=devices.teleop.type if devices.teleop else None,
        teleop_features=leader.action_features if leader is not None else None,
        teleop_joints=teleop_joints,
    )
    connect = {
        "task": args.task,
        "policy": args.policy,
        "client_secret_key": args.client_secret_key,
        "server_public_key": args.server_public_key,
    }
    name = args.name or devices.robot.id or devices.robot.type
    # The handshake first: a robot the policy does not fit is refused before any hardware moves.
    connect_drive_client(args.connect, features, name, **connect).close()
    to_connect = [(robot, f"robot {devices.robot.type}")]
    if leader is not None and devices.teleop is not None:
        to_connect.append((leader, f"teleoperator {devices.teleop.type}"))
    connected: list[tuple[Any, str]] = []
    try:
        for device, what in to_connect:
            devices_module.connect_device(device, what)
            connected.append((device, what))
        client = connect_drive_client(args.connect, features, name, **connect)
        try:
            if args.realtime_priority is not None:
                loop_realtime(args.realtime_priority)
            print(features.describe(), file=sys.stderr)
            summary = run_drive(
                client,
                robot,
                features,
                args.seconds,
                leader=leader,
                report=sys.stdout if args.json_lines else None,
            )
        finally:
            client.close()
    finally:
        for device, what in reversed(connected):
            devices_module.disconnect_device(device, what)
    print(json.dumps(summary) if args.json or args.json_lines else _summary_text(summary))
    return 0


def loop_realtime(priority: int) -> None:
    """This thread (the loop's; LeRobot's camera threads keep theirs) under SCHED_FIFO."""
    try:
        set_realtime(0, priority)
    except (OSError, AttributeError) as exc:
        raise SecurityError(
            f"--realtime-priority {priority} needs SCHED_FIFO, which was refused ({exc}); run "
            "with CAP_SYS_NICE, or leave the option out"
        ) from None


def _summary_text(summary: dict[str, Any]) -> str:
    return (
        f"{summary['ticks']} ticks at {summary['control_hz']:g} Hz in {summary['elapsed_s']:.1f} "
        f"s, {summary['missed_ticks']} missed; {summary['actions_applied']} actions applied, "
        f"{summary['holds']} holds {summary['hold_reasons']}; a tick's work p99 "
        f"{summary['work_ms_p99']} ms; observation to action p50 "
        f"{summary['obs_to_action_ms_p50']} ms, p99 {summary['obs_to_action_ms_p99']} ms"
    )
