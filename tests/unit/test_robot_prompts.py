"""Robots' tasks in the daemon: the task of hello (or the checkpoint's default) reaches the
policy as token ids in the robot's context; an episode start may change it (tokenized once);
a task anywhere else, too long, or for a policy that reads no prompt is refused with one
sentence, and so is a prompt policy's robot without a task."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.errors import CheckpointError, ErrorCode
from controller.wire.client import TempoClient
from controller.wire.header_schema import MAX_TASK_BYTES
from controller.wire.protocol import encode
from policies.prompt_tokens import PromptTokenizer
from tests.conftest import ipc_config, offline_daemon
from tests.prompt_fixtures import VOCAB_SIZE, train_tokenizer
from tests.prompt_policies import FRAME, JOINTS, PromptRecorder, prompt_spec

SPEC = {
    "joints": JOINTS,
    "cameras": [{"name": "front", "height": 32, "width": 48}],
    "state_size": 3,
}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.model")


def ids_of(model_file: Path, task: str, max_length: int = 24) -> list[int]:
    tokens = PromptTokenizer(model_file, max_length, VOCAB_SIZE).encode(task)
    return tokens.ids[: tokens.length].tolist()


def serve(tmp_path: Path, policy: PromptRecorder) -> tuple[Any, Any, Any]:
    dispatcher, loop, recorder, step = offline_daemon(ipc_config(tmp_path), policy)
    return dispatcher, recorder, step


def hello(
    dispatcher: Any, recorder: Any, identity: bytes, robot: str = "r", **fields: Any
) -> dict[str, Any]:
    frames = encode("hello", robot=robot, seq=1, time_ns=0, fields={"spec": SPEC, **fields})
    dispatcher.handle(identity, frames, time.monotonic_ns())
    _, kind, reply, _ = recorder.sent[-1]
    return {"kind": kind, **reply}


def observe(
    dispatcher: Any, identity: bytes, session: str, seq: int, robot: str = "r", **fields: Any
) -> None:
    state = np.array([0.01 * seq, 0.0, 0.0], np.float32)
    frames = encode(
        "obs",
        robot=robot,
        seq=seq,
        time_ns=time.monotonic_ns(),
        fields={"session": session, **fields},
        arrays={"front": FRAME, "state": state},
    )
    dispatcher.handle(identity, frames, time.monotonic_ns())


def refusal(recorder: Any) -> dict[str, Any]:
    _, kind, fields, _ = recorder.sent[-1]
    assert kind == "error", fields
    assert "\n" not in fields["message"]
    return fields


def newest_prompt(policy: PromptRecorder) -> list[int]:
    prompt = policy.contexts[-1].prompt
    assert prompt is not None and prompt.ids.shape == (24,)
    return prompt.ids[: prompt.length].tolist()


def test_the_task_of_hello_reaches_the_context_as_token_ids(tmp_path, model_file) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    dispatcher, recorder, _ = serve(tmp_path, policy)
    welcome = hello(dispatcher, recorder, b"L", task="pick up the red cube")
    assert welcome["kind"] == "welcome"
    observe(dispatcher, b"L", welcome["session"], 1)
    assert newest_prompt(policy) == ids_of(model_file, "pick up the red cube")
    assert dispatcher.registry.sessions[welcome["session"]].prompt.task == "pick up the red cube"


def test_an_episode_start_changes_the_task_tokenized_once(tmp_path, model_file) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    dispatcher, recorder, step = serve(tmp_path, policy)
    session = hello(dispatcher, recorder, b"L", task="open the drawer")["session"]
    observe(dispatcher, b"L", session, 1)
    tokenizer = dispatcher.prompts.tokenizer
    before = tokenizer.tokenized
    for seq in range(2, 8):  # the same new task at three episode starts, observations between
        step[0] = seq
        start = {"episode_start": True, "task": "close the door"} if seq % 2 == 0 else {}
        observe(dispatcher, b"L", session, seq, **start)
        assert newest_prompt(policy) == ids_of(model_file, "close the door")
    assert tokenizer.tokenized == before + 1
    step[0] = 9
    observe(dispatcher, b"L", session, 9, episode_start=True)  # no task: the robot keeps its own
    assert newest_prompt(policy) == ids_of(model_file, "close the door")


def test_a_task_on_an_observation_without_episode_start_is_refused(tmp_path, model_file) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    dispatcher, recorder, _ = serve(tmp_path, policy)
    session = hello(dispatcher, recorder, b"L", task="open the drawer")["session"]
    observe(dispatcher, b"L", session, 1, task="close the door")
    error = refusal(recorder)
    assert error["code"] == ErrorCode.NOT_ALLOWED.value and "episode_start" in error["message"]
    assert policy.contexts == []  # the observation was dropped
    assert dispatcher.registry.sessions[session].prompt.task == "open the drawer"


@pytest.mark.parametrize(
    "task", ["x" * (MAX_TASK_BYTES + 1), "é" * 501, "   "], ids=["long", "long_utf8", "blank"]
)
def test_a_task_too_long_or_blank_is_refused(tmp_path, model_file, task) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    dispatcher, recorder, _ = serve(tmp_path, policy)
    error = hello(dispatcher, recorder, b"L", task=task)
    assert error["kind"] == "error" and error["code"] == ErrorCode.NOT_ALLOWED.value
    assert "\n" not in error["message"] and not dispatcher.registry.sessions
    session = hello(dispatcher, recorder, b"L", task="open the drawer")["session"]
    observe(dispatcher, b"L", session, 1, episode_start=True, task=task)
    assert refusal(recorder)["code"] == ErrorCode.NOT_ALLOWED.value


def test_a_task_of_the_longest_length_is_served(tmp_path, model_file) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    dispatcher, recorder, _ = serve(tmp_path, policy)
    assert hello(dispatcher, recorder, b"L", task="é" * 500)["kind"] == "welcome"


def test_a_policy_without_prompts_refuses_a_task(tmp_path, model_file) -> None:
    policy = PromptRecorder(None)
    dispatcher, recorder, _ = serve(tmp_path, policy)
    error = hello(dispatcher, recorder, b"L", task="open the drawer")
    assert error["code"] == ErrorCode.NOT_ALLOWED.value and "no text prompt" in error["message"]
    session = hello(dispatcher, recorder, b"L")["session"]
    observe(dispatcher, b"L", session, 1, episode_start=True, task="open the drawer")
    assert "no text prompt" in refusal(recorder)["message"]
    observe(dispatcher, b"L", session, 2)
    assert policy.contexts[-1].prompt is None


def test_a_robot_without_a_task_gets_the_default_or_is_refused(tmp_path, model_file) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    dispatcher, recorder, _ = serve(tmp_path, policy)
    error = hello(dispatcher, recorder, b"L")
    assert error["code"] == ErrorCode.NOT_ALLOWED.value and "default task" in error["message"]
    policy = PromptRecorder(prompt_spec(model_file, default_task="fold the towel"))
    (tmp_path / "b").mkdir()
    dispatcher, recorder, _ = serve(tmp_path / "b", policy)
    session = hello(dispatcher, recorder, b"L")["session"]
    observe(dispatcher, b"L", session, 1)
    assert newest_prompt(policy) == ids_of(model_file, "fold the towel")


def test_a_truncated_task_is_said_once_per_robot(tmp_path, model_file, caplog) -> None:
    policy = PromptRecorder(prompt_spec(model_file, max_length=4))
    dispatcher, recorder, step = serve(tmp_path, policy)
    long_task = "pick up the red cube and place it in the box"
    caplog.set_level(logging.WARNING, logger="controller.daemon.prompts")
    robots = {b"L": "left", b"R": "right"}  # two robots: a name is one session at a time
    sessions = [hello(dispatcher, recorder, i, robots[i], task=long_task)["session"]
                for i in robots]  # fmt: skip
    for seq in range(1, 4):
        step[0] = seq
        for identity, session in zip(robots, sessions, strict=True):
            observe(dispatcher, identity, session, seq, robots[identity], episode_start=True,
                    task=long_task)  # fmt: skip
    lines = [r.getMessage() for r in caplog.records if "tokens, more than" in r.getMessage()]
    assert len(lines) == 2  # one per robot, not per episode
    assert policy.contexts[-1].prompt.ids.tolist() == ids_of(model_file, long_task)[:4]


def test_the_client_checks_a_task_before_sending(tmp_path) -> None:
    client = TempoClient(
        f"ipc://{tmp_path}/none.sock", robot="r", joints=JOINTS, cameras={"front": (32, 48)},
        state_size=3,
    )  # fmt: skip
    state = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="episode_start=True"):
        client.send_observation({"front": FRAME}, state, task="open the drawer")
    with pytest.raises(ValueError, match="at most 1000"):
        client.send_observation({"front": FRAME}, state, episode_start=True, task="x" * 1001)
    with pytest.raises(ValueError, match="at most 1000"):
        TempoClient(
            f"ipc://{tmp_path}/none.sock", robot="r", joints=JOINTS, cameras={"front": (32, 48)},
            state_size=3, task="y" * 1001,
        )  # fmt: skip


def test_a_daemon_whose_policy_names_a_missing_tokenizer_does_not_start(tmp_path) -> None:
    policy = PromptRecorder(prompt_spec(tmp_path / "absent.model"))
    with pytest.raises(CheckpointError, match=r"prompt\.tokenizer") as refused:
        offline_daemon(ipc_config(tmp_path), policy)
    assert "absent.model" in str(refused.value) and "\n" not in str(refused.value)
