"""`tempo sim-robot` (a simulated robot driver against a daemon), `tempo eval` (seeded episodes
of a simulated environment through the running daemon, summarised) and `tempo demo` (a daemon
and a simulated robot, with a live status line).

`tempo sim-robot --joints ...` runs on the driver's install (numpy, pyzmq, msgpack): the robot is
then described by its options, and nothing of the serve extra is imported. Without --joints it
is the configured policy's robot, which needs the extra. Only the standard library and
policies.registry at import time (the `tempo` parser is built on a driver's install too).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.errors import ConfigError
from controller.sim.clocks import CLOCKS
from policies.registry import families

if TYPE_CHECKING:
    from controller.config import TempoConfig

# server.bind's default (ServerConfig), for `tempo sim-robot --joints` without a config.
DEFAULT_BIND = "tcp://127.0.0.1:5555"

LoadConfig = Callable[[argparse.Namespace], Any]


def add_sim_parsers(
    sub: Any,
    add_config_args: Callable[..., None],
    setup_logging: Callable[[str], None],
    load_config: LoadConfig,
) -> None:
    """Add `sim-robot` and `demo` to the `tempo` subparsers (the CLI's config options, logging
    and loader)."""
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
    sim.add_argument(
        "--env",
        metavar="NAME",
        help="drive a simulated environment instead of the simulated arm: "
        "pusht, aloha-insertion or aloha-transfer-cube (the sim extra); its observations "
        "are the policy's cameras and state as LeRobot's env configs map them",
    )
    add_episode_args(sim)
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
    sim.add_argument(
        "--textured",
        action="store_true",
        help="frames with a sensor-noise texture, which compress as a camera's do",
    )
    sim.set_defaults(func=lambda args: cmd_sim_robot(args, setup_logging, load_config))

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

    evaluate = sub.add_parser(
        "eval", help="seeded episodes of a simulated environment through the running daemon"
    )
    add_config_args(evaluate)
    evaluate.add_argument(
        "--connect", help=f"daemon endpoint (default: server.bind, {DEFAULT_BIND})"
    )
    evaluate.add_argument(
        "--env",
        required=True,
        metavar="NAME",
        help="pusht, aloha-insertion, aloha-transfer-cube or aloha-transfer-cube-state",
    )
    add_episode_args(evaluate)
    evaluate.add_argument(
        "--policy", help="the daemon's policy to be served by (default: the daemon's default)"
    )
    evaluate.add_argument(
        "--json",
        metavar="PATH",
        help="also write the summary as JSON to PATH ('-': print it instead of the table)",
    )
    evaluate.add_argument(
        "--video",
        metavar="SEED,SEED,...",
        help="write these episodes' rollouts as MP4 (into --video-dir)",
    )
    evaluate.add_argument(
        "--video-dir", type=Path, default=Path("."), help="where --video writes (default: here)"
    )
    evaluate.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help="also draw the episodes (return, success, latency, holds) as an image (plot extra)",
    )
    evaluate.set_defaults(func=lambda args: cmd_eval(args, setup_logging, load_config))


def add_episode_args(parser: Any) -> None:
    """The options of seeded episodes (`sim-robot --env`, `eval`)."""
    parser.add_argument(
        "--clock",
        choices=CLOCKS,
        default="lockstep",
        help="realtime: the environment moves on at its frame rate while the policy infers (the "
        "daemon must tick at that rate); lockstep: it waits for each action, as LeRobot's eval "
        "loop does (default)",
    )
    parser.add_argument("--episodes", type=int, default=1, help="episodes to run (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="the first episode's seed (default 0)")
    parser.add_argument(
        "--max-steps", type=int, help="end each episode after this many steps (default: the env's)"
    )


def episode_seeds(args: argparse.Namespace) -> list[int]:
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, not {args.episodes}")
    return [args.seed + i for i in range(args.episodes)]


def video_seeds(args: argparse.Namespace, seeds: Sequence[int]) -> list[int]:
    """--video's seeds, each one of the episodes'."""
    if args.video is None:
        return []
    chosen = []
    for text in args.video.split(","):
        if not text.strip().lstrip("-").isdigit() or int(text) not in seeds:
            raise ConfigError(
                f"--video {args.video!r}: each value must be the seed of one of the episodes "
                f"({seeds[0]} to {seeds[-1]})"
            )
        chosen.append(int(text))
    return chosen


def env_endpoint(args: argparse.Namespace, load_config: LoadConfig) -> str:
    """--connect, else a given config's server.bind, else the default (no config needed)."""
    given = load_config(args) if args.config or args.overrides else None
    return str(args.connect or (given.server.bind if given else DEFAULT_BIND))


def _robot_description(config: TempoConfig) -> tuple[list[str], dict[str, tuple[int, int]], int]:
    """Joints, cameras and state size of the robot the configured policy expects."""
    from policies.catalog import build_tensor_policy

    spec = build_tensor_policy(config.policy, config.robot).spec
    cameras = {c.name: (c.height, c.width) for c in spec.cameras}
    return list(spec.joint_names), cameras, spec.state_size


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


def sim_robot_description(
    args: argparse.Namespace, load_config: LoadConfig
) -> tuple[list[str], dict[str, tuple[int, int]], int, str]:
    """Joints, cameras, state size and endpoint: from --joints/--camera/--connect where given,
    else from the config and its policy (which needs the serve extra)."""
    if args.joints is None:
        if args.cameras:
            raise ConfigError("--camera describes the robot together with --joints; add --joints")
        config = load_config(args)
        joints, cameras, state_size = _robot_description(config)
        return joints, cameras, state_size, args.connect or config.server.bind
    joints = [name.strip() for name in args.joints.split(",")]
    if not all(joints):
        raise ConfigError(f"--joints {args.joints!r}: expected comma-separated joint names")
    # A given config is checked.
    given = load_config(args) if args.config or args.overrides else None
    endpoint = args.connect or (given.server.bind if given else DEFAULT_BIND)
    return joints, _parse_cameras(args.cameras), len(joints), endpoint


def cmd_sim_robot(
    args: argparse.Namespace, setup_logging: Callable[[str], None], load_config: LoadConfig
) -> int:
    setup_logging(args.log_level or "WARNING")
    if args.env is not None:
        if args.joints is not None or args.cameras:
            raise ConfigError("--env is the robot; leave out --joints and --camera")
        from controller.sim.env_robot import main_env_robot

        return main_env_robot(
            env_endpoint(args, load_config),
            args.env,
            args.clock,
            episode_seeds(args),
            args.max_steps,
            args.json_lines,
        )
    joints, cameras, state_size, endpoint = sim_robot_description(args, load_config)
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
        textured=args.textured,
    )


def _config_args(args: argparse.Namespace) -> list[str]:
    """The config options given, to pass on to a child process."""
    out = ["--config", str(args.config)] if args.config else []
    for override in args.overrides:
        out += ["--set", override]
    return out


def cmd_eval(
    args: argparse.Namespace, setup_logging: Callable[[str], None], load_config: LoadConfig
) -> int:
    setup_logging(args.log_level or "WARNING")
    from controller.sim.env_robot import main_eval

    seeds = episode_seeds(args)
    return main_eval(
        env_endpoint(args, load_config),
        args.env,
        args.clock,
        seeds,
        args.max_steps,
        args.json,
        policy=args.policy,
        video_dir=args.video_dir,
        video_seeds=video_seeds(args, seeds),
        plot=args.plot,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from controller.config import load_config
    from controller.sim.demo import demo_policy_args, run_demo

    policy_args = demo_policy_args(args.policy, args.config, args.overrides, args.json)
    load_config(args.config, [*policy_args[1::2], *args.overrides])  # refuse a bad config now
    config_args = [*policy_args, *_config_args(args)]
    return run_demo(args.seconds, config_args, args.json, args.log_level or "WARNING")
