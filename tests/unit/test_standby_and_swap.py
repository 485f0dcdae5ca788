"""The standby's config, a swap's checks and the swap command, without an inference process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import zmq

from controller.config import load_config
from controller.errors import ConfigError, PolicyError
from controller.feed.served_policy import served_here
from controller.link.policy_swap import config_with_path, resolve_policy_name, swap_command
from controller.link.serving_watch import serving_watch
from controller.link.standbys import standby_mode
from controller.link.swap_checks import check_compatible
from controller.observe.status_server import StatusServer, request_command, request_status
from policies.base import CameraSpec, Execution, PolicySpec, PromptSpec

# ---- supervision.standby ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "mode"),
    [
        ([], "spare"),
        (["supervision.standby=hot"], "hot"),
        (["supervision.standby=off"], "off"),  # YAML's bare off is false: taken as written
        (["supervision.standby_process=false"], "off"),  # the older name
        (["supervision.standby_process=true", "supervision.standby=hot"], "hot"),
    ],
)
def test_the_standby_mode_and_its_older_name(settings: list[str], mode: str) -> None:
    config = load_config(None, settings)
    assert config.supervision.standby == mode
    # The inference process reads the config back from JSON: the same mode there.
    again = load_config(None, []).model_validate(json.loads(config.model_dump_json()))
    assert again.supervision.standby == mode


def test_the_older_name_contradicting_the_new_one_is_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match="standby_process: false contradicts standby: hot"):
        load_config(None, ["supervision.standby_process=false", "supervision.standby=hot"])


def test_remote_policy_takes_the_older_bool_too() -> None:
    assert (standby_mode(True), standby_mode(False), standby_mode("hot")) == ("spare", "off", "hot")
    with pytest.raises(ValueError, match="not a standby mode"):
        standby_mode("warm")


# ---- a swap's checks ---------------------------------------------------------------------------


def _spec(**changes: Any) -> PolicySpec:
    fields: dict[str, Any] = {
        "cameras": (CameraSpec(name="front", height=96, width=128),),
        "state_size": 6,
        "joint_names": tuple(f"joint_{i}" for i in range(6)),
        "chunk_size": 20,
    }
    return PolicySpec(**{**fields, **changes})


def test_a_policy_for_the_same_robot_passes() -> None:
    narrow, wide = ((-1.0, 1.0),) * 6, ((-2.0, 2.0),) * 6
    check_compatible(_spec(state_bounds=narrow), _spec(state_bounds=wide))  # weights may differ
    check_compatible(_spec(state_bounds=wide), _spec())  # no bounds: any finite state


def test_what_the_daemon_keeps_from_the_old_policy_must_fit_the_new_one(tmp_path: Path) -> None:
    """The robots' states stay checked against the old range, their prompts stay tokenized
    by the old tokenizer, their chunks played by the old execution settings."""
    narrow, wide = ((-1.0, 1.0),) * 6, ((-2.0, 2.0),) * 6
    with pytest.raises(PolicyError, match="narrower range of states"):
        check_compatible(_spec(state_bounds=wide), _spec(state_bounds=narrow))
    with pytest.raises(PolicyError, match="narrower range of states"):
        check_compatible(_spec(), _spec(state_bounds=wide))
    with pytest.raises(PolicyError, match="execution settings"):
        check_compatible(_spec(), _spec(execution=Execution(query_period=4, ensemble="newest")))
    one, other = tmp_path / "a.model", tmp_path / "b.model"
    one.write_bytes(b"tokenizer one")
    other.write_bytes(b"tokenizer two")
    copy = tmp_path / "copy.model"
    copy.write_bytes(b"tokenizer one")

    def prompted(path: Path, length: int = 8) -> PolicySpec:
        return _spec(prompt=PromptSpec(tokenizer=str(path), max_length=length, vocab_size=100))

    check_compatible(prompted(one), prompted(copy))  # the same tokenizer in another folder
    for new in (prompted(other), prompted(one, length=16)):
        with pytest.raises(PolicyError, match="tokenizes prompts differently"):
            check_compatible(prompted(one), new)


@pytest.mark.parametrize(
    ("changes", "sentence"),
    [
        ({"joint_names": tuple("abcdef")}, "commands joints"),
        ({"joint_names": tuple(f"joint_{i}" for i in range(7))}, "commands joints"),
        ({"cameras": (CameraSpec(name="front", height=48, width=64),)}, "other cameras"),
        ({"cameras": (CameraSpec(name="wrist", height=96, width=128),)}, "other cameras"),
        ({"state_history": 2}, "another state"),
        ({"chunk_size": 50}, "chunks of 50 actions"),
        (
            {"prompt": PromptSpec(tokenizer="/t.model", max_length=8, vocab_size=100)},
            "reads a prompt",
        ),
    ],
)
def test_a_policy_for_another_robot_is_refused_in_one_sentence(
    changes: dict[str, Any], sentence: str
) -> None:
    with pytest.raises(PolicyError, match=sentence) as refused:
        check_compatible(_spec(), _spec(**changes))
    text = str(refused.value)
    assert "\n" not in text and text.endswith("nothing was changed")


def test_policy_names_resolve_through_one_function() -> None:
    assert resolve_policy_name(None, ("default",)) == "default"
    assert resolve_policy_name(None, ("left", "right")) == "left"  # the first is the default
    assert resolve_policy_name("right", ("left", "right")) == "right"
    with pytest.raises(PolicyError, match="no policy named 'arm' is served here"):
        resolve_policy_name("arm", ("default",))


def test_the_swapped_config_changes_the_policy_path_only() -> None:
    config = load_config(None, ["control.rate_hz=200"])
    swapped = json.loads(config_with_path(config.model_dump_json(), "/ckpt/new"))
    assert swapped["policy"]["path"] == "/ckpt/new" and swapped["policy"]["kind"] == "checkpoint"
    assert swapped["control"] == json.loads(config.model_dump_json())["control"]


# ---- the swap command on the status socket ---------------------------------------------------


class _Swappable:
    def __init__(self) -> None:
        self.asked: list[tuple[str, bool, str | None]] = []

    def swap(self, path: str, *, now: bool, name: str) -> dict[str, Any]:
        self.asked.append((path, now, name))
        if path == "/refused":
            raise PolicyError("the new policy reads no prompt, unlike the one serving")
        return {"id": 1, "phase": "building"}

    def cancel_swap(self) -> dict[str, Any]:
        self.asked.append(("cancel", False, None))
        return {"id": 1, "phase": "cancelled"}


def test_the_swap_command_cancels_and_refuses_a_path_with_a_cancel() -> None:
    policy = _Swappable()
    swap = swap_command({"default": policy, "wrist": policy})  # type: ignore[dict-item]
    cancel = {"kind": "swap", "cancel": True, "policy": "wrist"}
    assert swap(cancel) == {"swap": {"id": 1, "phase": "cancelled"}}
    both = swap({**cancel, "path": "/ckpt"})
    assert both == {"error": "a swap request either names a new checkpoint or cancels, not both"}
    unnamed = swap({"kind": "swap", "cancel": True})
    assert "name one with --policy" in unnamed["error"]
    assert policy.asked == [("cancel", False, None)]  # the refusals asked nobody
    here = served_here(_Swappable())  # type: ignore[arg-type]
    reply = swap_command({"default": here})({"kind": "swap", "cancel": True})
    assert reply["error"].startswith("no swap is under way")


def test_the_status_socket_answers_status_and_the_swap_command(tmp_path: Path) -> None:
    context = zmq.Context()
    policy = _Swappable()
    server = StatusServer(context, f"ipc://{tmp_path}/status.sock", lambda: {"tick": 7})
    server.commands["swap"] = swap_command({"default": policy, "wrist": policy})  # type: ignore[dict-item]
    endpoint = server.start()
    try:
        assert request_status(endpoint, 2.0, context) == {"tick": 7}
        swap = {"kind": "swap", "path": "/ckpt", "now": True, "policy": None}
        unnamed = request_command(endpoint, swap, 2.0, context)  # two policies: which one?
        assert unnamed == {
            "error": "this daemon serves several policies ('default', 'wrist'); name one with "
            "--policy"
        }
        refused = request_command(
            endpoint, {**swap, "path": "/refused", "policy": "default"}, 2.0, context
        )
        assert refused == {"error": "the new policy reads no prompt, unlike the one serving"}
        policy.asked.clear()
        missing = request_command(endpoint, {"kind": "swap"}, 2.0, context)
        assert missing == {"error": "a swap needs the new checkpoint's path"}
        # Any other map is a status request, as before.
        assert request_command(endpoint, {"kind": "reboot"}, 2.0, context) == {"tick": 7}
        # A kind that is no name (unhashable) is a status request too, and the socket serves on.
        assert request_command(endpoint, {"kind": []}, 2.0, context) == {"tick": 7}
        assert request_command(endpoint, {"kind": "reboot"}, 2.0, context) == {"tick": 7}
        named = request_command(endpoint, {**swap, "policy": "wrist"}, 2.0, context)
        unknown = request_command(endpoint, {**swap, "policy": "gripper"}, 2.0, context)
        assert named == {"swap": {"id": 1, "phase": "building"}}
        assert unknown == {
            "error": "no policy named 'gripper' is served here (served: 'default', 'wrist')"
        }
        assert policy.asked == [("/ckpt", True, "wrist")]  # the refusals asked nobody

    finally:
        server.stop()
        context.term()


def test_a_policy_served_in_the_daemons_process_cannot_be_swapped() -> None:
    here = served_here(_Swappable())  # type: ignore[arg-type]
    reply = swap_command({"default": here})({"kind": "swap", "path": "/ckpt", "now": True})
    assert "own process" in reply["error"]


# ---- the control loop sees every switch of process -------------------------------------------


def test_the_loop_is_told_not_serving_once_after_each_switch() -> None:
    class Policy:
        serving = True
        epoch = 1

    policy = Policy()
    serving = serving_watch(policy)  # type: ignore[arg-type]
    assert [serving(), serving()] == [True, True]
    policy.epoch = 2  # a hot standby took over between two ticks
    assert [serving(), serving()] == [False, True]
    policy.serving = False
    assert serving() is False
    here = served_here(policy)  # type: ignore[arg-type]
    assert here.epoch == 0 and serving_watch(here)() is True  # never switches processes


def test_tempo_swap_follows_the_swap_of_the_policy_it_named() -> None:
    from controller.tools.swap_cli import _swap_status

    def process(swap_id: int) -> dict[str, Any]:
        return {"process": {"swap": {"id": swap_id, "phase": "done"}}}

    one = {"policy": process(1)}
    several = {"policy": process(1), "policies": {"arm": {"policy": process(1)},
                                                   "wrist": {"policy": process(7)}}}  # fmt: skip
    assert _swap_status(one, "default")["id"] == 1
    assert _swap_status(several, "wrist")["id"] == 7  # not the default policy's swap 1
    assert _swap_status({}, "wrist") == {}
