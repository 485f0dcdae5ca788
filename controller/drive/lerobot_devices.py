"""A LeRobot `Robot` and optional `Teleoperator`, built from LeRobot's own flags by LeRobot's own
machinery, as `lerobot-teleoperate` and `lerobot-record` build theirs:

    --robot.type=so101_follower --robot.port=/dev/ttyACM0 --robot.id=my_arm
    --robot.cameras="{front: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30}}"
    --teleop.type=so101_leader --teleop.port=/dev/ttyACM1 --teleop.id=my_leader

The flags are parsed by draccus into LeRobot's `RobotConfig` / `TeleoperatorConfig` choice
registries. Every type a registry can hold is registered first: LeRobot's own robots,
teleoperators and cameras (each subpackage imported), the packages named by
`--robot.discover_packages_path=...` (LeRobot's `load_plugin`), and the installed third-party
plugins, distributions named `lerobot_robot_*`, `lerobot_teleoperator_*`, `lerobot_camera_*`
(LeRobot's `register_third_party_plugins`). The devices are then made by LeRobot's factories,
which find a plugin's class beside its config.

This module imports LeRobot (the `lerobot` extra, Python 3.12 or newer); the CLI imports it
only for `tempo drive`. LeRobot's robot modules import torch themselves; nothing here does.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import pkgutil
from dataclasses import dataclass
from typing import Any

import draccus
import lerobot.cameras
import lerobot.robots
import lerobot.teleoperators
from draccus.utils import DecodingError
from lerobot.configs.parser import (
    PLUGIN_DISCOVERY_SUFFIX,
    filter_arg,
    load_plugin,
    parse_plugin_args,
)
from lerobot.robots import RobotConfig, make_robot_from_config
from lerobot.teleoperators import TeleoperatorConfig, make_teleoperator_from_config
from lerobot.utils.import_utils import register_third_party_plugins

from controller.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class DriveDevices:
    """What `tempo drive` reads of LeRobot's flags: a robot, and a leader arm if given."""

    robot: RobotConfig
    teleop: TeleoperatorConfig | None = None


def register_device_types(args: list[str]) -> tuple[list[str], list[str]]:
    """Register every robot, teleoperator and camera type LeRobot can find: its own, the
    packages `--*.discover_packages_path` names, the installed plugins. Returns `args`
    without the discovery flags, and the LeRobot subpackages that failed to import (named
    in a refusal of an unknown type: their types are missing)."""
    failed = []
    for package in (lerobot.cameras, lerobot.robots, lerobot.teleoperators):
        for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            if not module.ispkg:
                continue
            try:
                importlib.import_module(module.name)
            except Exception as exc:  # noqa: BLE001 - one robot's missing SDK hides only its type
                log.info("LeRobot's %s did not import: %s", module.name, exc)
                failed.append(module.name)
    for flag, path in parse_plugin_args(PLUGIN_DISCOVERY_SUFFIX, args).items():
        try:
            load_plugin(path)
        except Exception as exc:  # noqa: BLE001 - LeRobot's PluginLoadError or the plugin's own
            raise ConfigError(
                f"--{flag}={path}: LeRobot could not load the plugin ({_first_line(exc)})"
            ) from None
        args = filter_arg(flag, args)
    register_third_party_plugins()
    return args, failed


def parse_devices(args: list[str]) -> DriveDevices:
    """LeRobot's `--robot.*` and `--teleop.*` flags as its configs; ConfigError, in one
    sentence, for flags LeRobot refuses."""
    args, failed = register_device_types(args)
    if not any(a.startswith("--robot.type") for a in args):
        raise ConfigError(
            "tempo drive needs the robot's LeRobot flags, e.g. --robot.type=so101_follower "
            "--robot.port=/dev/ttyACM0 --robot.id=my_arm; known robot types: "
            + ", ".join(sorted(RobotConfig.get_known_choices()))
        )
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            devices = draccus.parse(config_class=DriveDevices, args=args)
    except SystemExit:
        said = [line for line in refusal.getvalue().splitlines() if "error: " in line]
        reason = said[-1].split("error: ", 1)[1] if said else "refused"
        hint = f" (these LeRobot modules did not import: {', '.join(failed)})" if failed else ""
        raise ConfigError(f"LeRobot's flags: {reason}{hint}") from None
    except DecodingError as exc:
        raise ConfigError(f"LeRobot's flags: {_one_line(exc)}") from None
    except (ValueError, TypeError) as exc:  # a config's own __post_init__ check
        raise ConfigError(f"LeRobot's flags: {_one_line(exc)}") from None
    return devices


def build_robot(config: RobotConfig) -> Any:
    """The robot of `config`, not connected (LeRobot's factory; plugins found beside their
    config)."""
    try:
        return make_robot_from_config(config)
    except Exception as exc:  # noqa: BLE001 - the robot's own constructor: one sentence
        raise ConfigError(f"robot {config.type} could not be made: {_one_line(exc)}") from None


def build_teleoperator(config: TeleoperatorConfig) -> Any:
    """The teleoperator of `config`, not connected."""
    try:
        return make_teleoperator_from_config(config)
    except Exception as exc:  # noqa: BLE001 - the teleoperator's own constructor
        raise ConfigError(
            f"teleoperator {config.type} could not be made: {_one_line(exc)}"
        ) from None


def connect_device(device: Any, what: str) -> None:
    """`device.connect()` (calibrating when LeRobot's device asks, as its scripts do), a failure
    in one sentence naming `what` (e.g. "robot so101_follower")."""
    try:
        device.connect()
    except Exception as exc:  # noqa: BLE001 - a serial port, a camera: the device's own error
        raise ConfigError(
            f"{what} did not connect: {type(exc).__name__}: {_one_line(exc)}"
        ) from None


def disconnect_device(device: Any, what: str) -> None:
    """`device.disconnect()` if it is connected, best effort (the run has ended)."""
    try:
        if device.is_connected:
            device.disconnect()
    except Exception as exc:  # noqa: BLE001 - leaving anyway; said in the log
        log.warning("%s did not disconnect cleanly: %s", what, _one_line(exc))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _one_line(exc: BaseException) -> str:
    """An exception's text as one line (draccus's decoding errors span several)."""
    return (
        "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        or type(exc).__name__
    )
