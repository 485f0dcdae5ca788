"""A swap (policy_swap.Swapper) reads and calls only RemotePolicy's public members
(SwappablePolicy), and those say what the swap needs; no inference process is started."""

from __future__ import annotations

import json
import threading

import pytest

from controller.errors import PolicyError
from controller.link.policy_swap import Swapper
from controller.link.remote_policy import RemotePolicy


class PublicOnly:
    """A policy with SwappablePolicy's members and nothing private: an attribute the Swapper
    reached past them would raise AttributeError."""

    start_timeout_s = 1.0

    def __init__(self, config_json: str | None, serving: bool) -> None:
        self.config_json = config_json
        self.serving = serving
        self.stopping = False
        self.switch_lock = threading.Lock()


@pytest.mark.parametrize(
    ("config_json", "serving", "refusal"),
    [
        (None, True, "has no config to build from"),
        ("{}", False, "is not serving now"),
    ],
)
def test_a_swap_is_refused_from_the_policys_public_state(
    config_json: str | None, serving: bool, refusal: str
) -> None:
    swapper = Swapper(PublicOnly(config_json, serving))  # type: ignore[arg-type]
    try:
        with pytest.raises(PolicyError, match=refusal):
            swapper.start("/ckpt/new", now=True, name="arm")
    finally:
        swapper.close()


def test_remote_policy_tells_a_swap_its_config_spawner_lock_and_stopping() -> None:
    config = json.dumps({"policy": {"kind": "demo"}})
    policy = RemotePolicy(["true"], config_json=config, standby=False)
    assert policy.config_json == config
    swapped = policy.spawner_for('{"policy": {"path": "/ckpt/new"}}')
    assert swapped.stdin == b'{"policy": {"path": "/ckpt/new"}}'
    assert swapped.command == ["true"]
    assert isinstance(policy.switch_lock, type(threading.Lock()))
    assert not policy.stopping
    policy.stop()
    assert policy.stopping
    assert RemotePolicy(["true"], standby=False).config_json is None
