"""How a LeRobot robot's features become Tempo's joints, state and cameras, as LeRobot's own
datasets name them, so that a policy trained on a dataset recorded with the robot is served with
the names it was trained with:

    robot.action_features        {"shoulder_pan.pos": float, ...}    -> the joints, in order
                                 (a dataset's `action` names; the daemon's actions come back in
                                 this order and go to `robot.send_action` as {name: value})
    robot.observation_features   every float, in order                 -> the state vector
                                 (the dataset's `observation.state` names)
                                 every (height, width, 3) image        -> a camera of that name
                                 (`observation.images.<name>`; a policy's camera `<name>`)
    teleop.action_features       the leader arm's {"gripper.pos": float, ...}: the joints of the
                                 same names are the operator's (Tempo's teleop mask), their
                                 values the teleop array of each observation

Anything else (a depth image, a feature that is neither a float nor an image, a leader-arm
feature the robot does not have) is refused in one sentence naming the feature: nothing is
dropped silently. Whether these names are the served policy's is the daemon's hello check to
say (controller.drive.drive_connect words its refusal).

Only numpy and the standard library: the mapping is tested without LeRobot, on objects with
the same attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from controller.errors import ConfigError, ObservationError


def _is_float_feature(kind: Any) -> bool:
    return kind is float


def _is_image_feature(kind: Any) -> bool:
    return isinstance(kind, tuple)


class FeatureMap:
    """One robot's features as Tempo's joints, state and cameras, and the conversions each tick
    makes: an observation dict into frames and a state vector, an action vector into the dict
    `send_action` takes, a leader arm's action into the teleop array."""

    def __init__(
        self,
        robot: str,
        joints: Sequence[str],
        state: Sequence[str],
        cameras: Mapping[str, tuple[int, int]],
        teleop_joints: Sequence[str] = (),
    ) -> None:
        """`robot`: what sentences call the robot (its LeRobot type); `teleop_joints`: the
        joints the operator owns (a subset of `joints`)."""
        self.robot = robot
        self.joints = tuple(joints)
        self.state = tuple(state)
        self.cameras = dict(cameras)
        self.teleop_joints = tuple(teleop_joints)
        index = {name: i for i, name in enumerate(self.joints)}
        unknown = [j for j in self.teleop_joints if j not in index]
        if unknown:
            raise ConfigError(
                f"{unknown[0]!r} is not an action feature of robot {robot}, so the operator "
                f"cannot own it; its action features: {', '.join(self.joints)}"
            )
        self._owned = [(index[name], name) for name in self.teleop_joints]

    @classmethod
    def from_features(
        cls,
        robot: str,
        observation_features: Mapping[str, Any],
        action_features: Mapping[str, Any],
        teleop: str | None = None,
        teleop_features: Mapping[str, Any] | None = None,
        teleop_joints: Sequence[str] | None = None,
    ) -> FeatureMap:
        """The mapping of a robot's `observation_features` and `action_features` (LeRobot's
        `Robot` properties), and of a leader arm's (`teleop`, its type, and its
        `action_features`) when there is one: the operator owns `teleop_joints`, by default
        every feature of the leader arm. ConfigError, naming the feature, for one that cannot
        be mapped."""
        joints = []
        for name, kind in action_features.items():
            if not _is_float_feature(kind):
                raise ConfigError(
                    f"robot {robot}'s action feature {name!r} is {_kind_name(kind)}, not a "
                    "float; Tempo's joints are float action features"
                )
            joints.append(name)
        if not joints:
            raise ConfigError(f"robot {robot} declares no action features: nothing to command")
        state, cameras = [], {}
        for name, kind in observation_features.items():
            if _is_float_feature(kind):
                state.append(name)
            elif _is_image_feature(kind) and len(kind) == 3 and kind[2] == 3:
                height, width = int(kind[0]), int(kind[1])
                if height <= 0 or width <= 0:
                    raise ConfigError(
                        f"robot {robot}'s camera {name!r} declares frames of {height}x{width}; "
                        "set its width and height in --robot.cameras"
                    )
                cameras[name] = (height, width)
            elif _is_image_feature(kind):
                raise ConfigError(
                    f"robot {robot}'s observation feature {name!r} is an image of shape "
                    f"{list(kind)}; Tempo's cameras send (height, width, 3) RGB frames (a depth "
                    "map is not one)"
                )
            else:
                raise ConfigError(
                    f"robot {robot}'s observation feature {name!r} is {_kind_name(kind)}, "
                    "neither a float (the state) nor a (height, width, 3) image (a camera)"
                )
        owned: list[str] = []
        if teleop_features is not None:
            owned = _owned_joints(robot, joints, teleop or "teleop", teleop_features, teleop_joints)
        elif teleop_joints:
            raise ConfigError("--teleop-joints names joints for a leader arm; add --teleop.type")
        return cls(robot, joints, state, cameras, owned)

    def observation(self, obs: Mapping[str, Any]) -> tuple[dict[str, Any], np.ndarray]:
        """The frames (as the robot gave them; the client checks each) and the state vector
        of one `get_observation()` result. ObservationError naming a feature it lacks."""
        try:
            state = np.array([obs[name] for name in self.state], dtype=np.float32)
            images = {name: obs[name] for name in self.cameras}
        except KeyError as exc:
            raise ObservationError(
                f"robot {self.robot}'s observation has no {exc.args[0]!r}, which its "
                "observation_features declare"
            ) from None
        except (TypeError, ValueError):
            bad = next((n for n in self.state if not _is_number(obs[n])), self.state[0])
            raise ObservationError(
                f"robot {self.robot}'s observation {bad!r} is {type(obs[bad]).__name__}, not a "
                "number"
            ) from None
        return images, state

    def action(self, values: np.ndarray) -> dict[str, float]:
        """The daemon's action (one value per joint, in joint order) as `send_action`'s dict."""
        return dict(zip(self.joints, values.tolist(), strict=True))

    def teleop_values(self, teleop_action: Mapping[str, Any]) -> np.ndarray:
        """The teleop array (one value per joint; the operator's joints from the leader arm's
        action, 0 for the policy's, which the daemon does not read). ObservationError naming
        an owned joint the leader arm's action lacks."""
        values = np.zeros(len(self.joints), dtype=np.float32)
        for i, name in self._owned:
            try:
                values[i] = teleop_action[name]
            except KeyError:
                raise ObservationError(
                    f"the leader arm's action has no {name!r}, a joint the operator owns"
                ) from None
            except (TypeError, ValueError):
                raise ObservationError(
                    f"the leader arm's {name!r} is {type(teleop_action[name]).__name__}, not a "
                    "number"
                ) from None
        return values

    def describe(self) -> str:
        """One line: what the robot sends and takes, in Tempo's names."""
        cameras = ", ".join(f"{n} {h}x{w}" for n, (h, w) in self.cameras.items()) or "none"
        line = (
            f"robot {self.robot}: joints {', '.join(self.joints)}; state "
            f"{', '.join(self.state) or 'none'}; cameras {cameras}"
        )
        if self.teleop_joints:
            line += f"; the operator owns {', '.join(self.teleop_joints)}"
        return line


def _owned_joints(
    robot: str,
    joints: Sequence[str],
    teleop: str,
    teleop_features: Mapping[str, Any],
    teleop_joints: Sequence[str] | None,
) -> list[str]:
    """The joints the operator owns: `teleop_joints`, else every feature of the leader arm;
    each a float feature of the leader arm and an action feature of the robot."""
    chosen = list(teleop_joints) if teleop_joints else list(teleop_features)
    if not chosen:
        raise ConfigError(f"teleoperator {teleop} declares no action features: nothing to own")
    repeated = sorted({j for j in chosen if chosen.count(j) > 1})
    if repeated:
        raise ConfigError(f"--teleop-joints names {repeated[0]!r} more than once")
    for name in chosen:
        if name not in teleop_features:
            raise ConfigError(
                f"teleoperator {teleop} has no action feature {name!r}; its action features: "
                f"{', '.join(teleop_features)}"
            )
        if not _is_float_feature(teleop_features[name]):
            raise ConfigError(
                f"teleoperator {teleop}'s action feature {name!r} is "
                f"{_kind_name(teleop_features[name])}, not a float"
            )
        if name not in joints:
            raise ConfigError(
                f"teleoperator {teleop}'s action feature {name!r} is not an action feature of "
                f"robot {robot} ({', '.join(joints)}); name the joints it should own with "
                "--teleop-joints"
            )
    return chosen


def _kind_name(kind: Any) -> str:
    return f"a {kind.__name__}" if isinstance(kind, type) else repr(kind)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
