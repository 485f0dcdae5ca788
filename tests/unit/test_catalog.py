"""policies.catalog builds every servable policy from the config sections it is given."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config import load_config
from controller.errors import CheckpointError, ConfigError
from policies.catalog import build_benchmark_policy, build_tensor_policy, describe_source
from policies.demo import make_demo_checkpoint


def test_reach_takes_its_joints_and_cameras_from_the_robot_section() -> None:
    config = load_config(
        None,
        ["robot.joints=[a, b, c]", "robot.cameras=[{name: top, height: 8, width: 16}]"],
    )
    policy = build_tensor_policy(config.policy, config.robot)
    assert policy.spec.joint_names == ("a", "b", "c")
    assert [(c.name, c.height, c.width) for c in policy.spec.cameras] == [("top", 8, 16)]
    assert policy.spec.chunk_size == config.policy.section("reach").chunk_size
    assert describe_source(config.policy) == "built-in reach"


def test_reach_refusals_are_config_errors() -> None:
    config = load_config(None, ["policy.reach.target=[1, 2]"])  # the robot has 6 joints
    with pytest.raises(ConfigError, match=r"^policy.reach.target: reach target has 2 values"):
        build_tensor_policy(config.policy, config.robot)
    with pytest.raises(ConfigError, match="needs the robot section"):
        build_tensor_policy(config.policy)


def test_a_checkpoint_is_loaded_from_policy_path(tmp_path: Path) -> None:
    directory = make_demo_checkpoint(tmp_path / "demo")
    config = load_config(None, ["policy.kind=checkpoint", f"policy.path={directory}"])
    policy = build_tensor_policy(config.policy)  # a checkpoint needs no robot section
    assert policy.spec.camera_names == ("front",) and not policy.module.training
    # The daemon refuses states its normalization cannot represent: the bounds come along.
    assert policy.spec.state_bounds is not None
    assert len(policy.spec.state_bounds) == policy.spec.state_size
    assert describe_source(config.policy) == f"checkpoint {directory}"
    missing = load_config(None, ["policy.kind=checkpoint", f"policy.path={tmp_path / 'none'}"])
    with pytest.raises(CheckpointError, match="does not exist"):
        build_tensor_policy(missing.policy)


def test_benchmark_policies() -> None:
    policy, description = build_benchmark_policy("tiny")
    assert description == "tiny conv+MLP test policy" and policy.spec.chunk_size == 10
    with pytest.raises(ValueError, match="unknown benchmark policy"):
        build_benchmark_policy("huge")  # type: ignore[arg-type]
