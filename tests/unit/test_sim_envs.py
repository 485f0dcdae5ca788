"""The simulated environments' bad input: an unknown name, a missing package, an observation
that does not fit the served policy; each one sentence."""

from __future__ import annotations

import sys

import pytest

from controller.errors import ConfigError, SpecMismatchError
from controller.sim.envs import ENV_NAMES, make_env
from tests.conftest import ipc_config, running_daemon


def test_an_unknown_environment_is_one_sentence_naming_the_choices():
    with pytest.raises(ConfigError) as caught:
        make_env("pushT")
    message = str(caught.value)
    assert "unknown environment 'pushT'" in message
    assert all(name in message for name in ENV_NAMES)
    assert "\n" not in message


def test_a_missing_environment_package_names_the_sim_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "gym_aloha", None)  # import gym_aloha: not found
    with pytest.raises(ConfigError) as caught:
        make_env("aloha-insertion")
    assert str(caught.value) == (
        "environment aloha-insertion needs gym-aloha, which is not installed: "
        "pip install 'tempo-controller[sim]'"
    )


@pytest.mark.parametrize(
    ("robot", "named"),
    [
        (["robot.cameras=[{name: image, height: 96, width: 96}]"], "state of 2 values"),
        (["robot.cameras=[{name: top, height: 96, width: 96}]"], "'image'"),
        (["robot.cameras=[{name: image, height: 384, width: 384}]"], "384x384"),
    ],
)
def test_an_environment_the_policy_does_not_fit_is_refused_naming_camera_or_state(
    tmp_path, robot, named
):
    from controller.sim.env_driver import connect_env_client
    from controller.sim.envs.pusht import PUSHT

    # The policy: reach, for a robot of 2 joints named as PushT's, but another camera or state.
    joints = "robot.joints=[x,y,z]" if "state" in named else "robot.joints=[x,y]"
    config = ipc_config(tmp_path, "policy.kind=reach", joints, *robot, "policy.chunk_size=2")
    with running_daemon(config):
        with pytest.raises(SpecMismatchError) as caught:
            connect_env_client(config.server.bind, PUSHT, frames_in_place=False)
    message = str(caught.value)
    assert message.startswith("env pusht gives camera image (pixels, 96x96) and a state of 2")
    assert named in message
    assert "\n" not in message
