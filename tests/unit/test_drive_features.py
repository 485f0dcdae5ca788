"""tempo drive's mapping of a LeRobot robot's features to Tempo's joints, state and cameras,
on objects with the attributes LeRobot's `Robot` and `Teleoperator` have (no LeRobot needed)."""

from __future__ import annotations

import numpy as np
import pytest

from controller.drive.feature_map import FeatureMap
from controller.errors import ConfigError, ObservationError

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
JOINTS = [f"{m}.pos" for m in MOTORS]


class FakeSO101:
    """The features LeRobot's SO-101 follower declares: a float per motor, a camera image."""

    def __init__(self, cameras: dict[str, tuple[int, ...]] | None = None) -> None:
        self.action_features = dict.fromkeys(JOINTS, float)
        self.observation_features = {
            **self.action_features,
            **(cameras if cameras is not None else {"front": (96, 128, 3)}),
        }


def so101_map(**kwargs) -> FeatureMap:  # type: ignore[no-untyped-def]
    robot = FakeSO101(kwargs.pop("cameras", None))
    return FeatureMap.from_features(
        "so101_follower", robot.observation_features, robot.action_features, **kwargs
    )


def test_joints_state_and_cameras_are_lerobots_dataset_names():
    features = so101_map(cameras={"front": (480, 640, 3), "wrist": (240, 320, 3)})
    assert features.joints == tuple(JOINTS)  # a dataset's `action` names, in order
    assert features.state == tuple(JOINTS)  # `observation.state`'s: every float, in order
    assert features.cameras == {"front": (480, 640), "wrist": (240, 320)}
    assert features.teleop_joints == ()


def test_state_is_every_float_observation_in_order_even_beyond_the_joints():
    """A mobile base (LeKiwi) reports velocities beside its arm: all of them are the state."""
    observation = {"arm.pos": float, "front": (96, 128, 3), "x.vel": float, "theta.vel": float}
    action = {"arm.pos": float, "x.vel": float}
    features = FeatureMap.from_features("lekiwi", observation, action)
    assert features.state == ("arm.pos", "x.vel", "theta.vel")
    assert features.joints == ("arm.pos", "x.vel")
    assert list(features.cameras) == ["front"]


@pytest.mark.parametrize(
    ("cameras", "named"),
    [
        ({"front_depth": (96, 128, 1)}, "'front_depth'"),  # a RealSense's depth map
        ({"lidar": (360,)}, "'lidar'"),
        ({"front": (0, 128, 3)}, "'front'"),
    ],
)
def test_an_image_tempo_cannot_send_is_refused_naming_the_feature(cameras, named):
    with pytest.raises(ConfigError) as refused:
        so101_map(cameras=cameras)
    assert named in str(refused.value)
    assert len(str(refused.value).splitlines()) == 1


def test_a_feature_neither_float_nor_image_is_refused_naming_it():
    observation = {"a.pos": float, "mode": str}
    with pytest.raises(ConfigError, match="'mode' is a str, neither a float"):
        FeatureMap.from_features("odd_robot", observation, {"a.pos": float})
    with pytest.raises(ConfigError, match="action feature 'mode' is a str, not a float"):
        FeatureMap.from_features("odd_robot", {"a.pos": float}, {"mode": str})
    with pytest.raises(ConfigError, match="declares no action features"):
        FeatureMap.from_features("odd_robot", {"a.pos": float}, {})


def test_observation_becomes_frames_and_a_float32_state_in_feature_order():
    features = so101_map()
    frame = np.zeros((96, 128, 3), np.uint8)
    obs = {name: float(i) * 1.5 for i, name in enumerate(reversed(JOINTS))} | {"front": frame}
    images, state = features.observation(obs)
    assert images["front"] is frame  # sent as the robot gave it: the client checks it
    assert state.dtype == np.float32
    np.testing.assert_array_equal(state, [obs[name] for name in JOINTS])


def test_an_observation_without_a_declared_feature_names_it():
    features = so101_map()
    obs = dict.fromkeys(JOINTS, 0.0)  # no camera frame
    with pytest.raises(ObservationError, match="observation has no 'front'"):
        features.observation(obs)
    obs = {**dict.fromkeys(JOINTS, 0.0), "front": np.zeros((96, 128, 3), np.uint8)}
    obs["elbow_flex.pos"] = "stuck"
    with pytest.raises(ObservationError, match="'elbow_flex.pos' is str, not a number"):
        features.observation(obs)


def test_action_becomes_send_actions_dict_in_joint_order():
    features = so101_map()
    action = features.action(np.arange(6, dtype=np.float32))
    assert list(action) == JOINTS
    assert action["gripper.pos"] == 5.0 and isinstance(action["gripper.pos"], float)


def test_a_leader_arm_owns_every_joint_it_has_by_default():
    leader = dict.fromkeys(JOINTS, float)  # SO-101 leader: the follower's names
    features = so101_map(teleop="so101_leader", teleop_features=leader)
    assert features.teleop_joints == tuple(JOINTS)


def test_teleop_values_carry_the_owned_joints_and_zero_elsewhere():
    leader = dict.fromkeys(JOINTS, float)
    features = so101_map(
        teleop="so101_leader",
        teleop_features=leader,
        teleop_joints=["gripper.pos", "wrist_roll.pos"],
    )
    assert features.teleop_joints == ("gripper.pos", "wrist_roll.pos")
    values = features.teleop_values({name: 10.0 + i for i, name in enumerate(JOINTS)})
    assert values.dtype == np.float32
    np.testing.assert_array_equal(values, [0, 0, 0, 0, 14.0, 15.0])
    with pytest.raises(ObservationError, match="no 'gripper.pos', a joint the operator owns"):
        features.teleop_values({"wrist_roll.pos": 1.0})


@pytest.mark.parametrize(
    ("leader", "owned", "message"),
    [
        (dict.fromkeys(JOINTS, float), ["elbow.pos"], "has no action feature 'elbow.pos'"),
        ({"x.pos": float}, None, "'x.pos' is not an action feature of robot so101_follower"),
        ({"gripper.pos": str}, None, "'gripper.pos' is a str, not a float"),
        (dict.fromkeys(JOINTS, float), ["gripper.pos", "gripper.pos"], "more than once"),
        ({}, None, "declares no action features"),
    ],
)
def test_a_leader_arm_that_does_not_fit_is_refused_naming_the_feature(leader, owned, message):
    with pytest.raises(ConfigError, match=message):
        so101_map(teleop="so101_leader", teleop_features=leader, teleop_joints=owned)


def test_teleop_joints_without_a_leader_arm_are_refused():
    with pytest.raises(ConfigError, match="add --teleop.type"):
        so101_map(teleop_joints=["gripper.pos"])


def test_describe_names_what_the_robot_became():
    line = so101_map(
        teleop="so101_leader",
        teleop_features=dict.fromkeys(JOINTS, float),
        teleop_joints=["gripper.pos"],
    ).describe()
    assert "joints shoulder_pan.pos" in line and "cameras front 96x128" in line
    assert line.endswith("the operator owns gripper.pos")
