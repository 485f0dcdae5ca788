"""A real daemon serving a policy that reads a prompt: each robot's task, said in hello and
changed at an episode start, reaches the policy as that robot's token ids and no other robot's,
whether the policy runs in the daemon's process or in its own inference process."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from controller.feed.served_policy import served_here
from controller.link.remote_policy import RemotePolicy
from controller.observe.status_view import render_status
from controller.wire.client import TempoClient
from policies.prompt_tokens import PromptTokenizer
from tests.conftest import ipc_config, running_daemon
from tests.prompt_fixtures import VOCAB_SIZE, train_tokenizer
from tests.prompt_policies import FRAME, JOINTS, PromptRecorder, prompt_spec

CHILD = Path(__file__).with_name("prompt_policy_inference.py")
TASKS = {"left": "pick up the red cube", "right": "open the drawer"}
STATES = {"left": 0.1, "right": 0.7}  # each robot's first state value tells them apart


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer.model")


def ids_of(model_file: Path, task: str) -> list[int]:
    tokens = PromptTokenizer(model_file, 24, VOCAB_SIZE).encode(task)
    return tokens.ids[: tokens.length].tolist()


def drive(daemon: Any, seen: Callable[[float], list[list[int]]]) -> dict[str, list[list[int]]]:
    """Two robots with two tasks stream observations; then `left` starts an episode with a new
    task (and a new state). Returns what the policy saw in each phase, by robot."""
    clients = {
        name: TempoClient(
            daemon.endpoint,
            name,
            JOINTS,
            {"front": (32, 48)},
            3,
            task=task,
            handshake_timeout_s=10.0,
        )
        for name, task in TASKS.items()
    }
    states = dict(STATES)

    def stream(until: Callable[[], bool]) -> None:
        """Both robots send and receive, as drivers do, until `until()` holds."""
        deadline = time.monotonic() + 30
        while not until() and time.monotonic() < deadline:
            for name, client in clients.items():
                client.send_observation({"front": FRAME.copy()}, [states[name], 0, 0])
                client.receive(timeout_s=0.01)

    try:
        for client in clients.values():
            client.connect()
        stream(lambda: all(seen(v) for v in STATES.values()))
        result = {name: seen(STATES[name]) for name in TASKS}
        states["left"] = 0.4
        clients["left"].send_observation(
            {"front": FRAME.copy()}, [0.4, 0, 0], episode_start=True, task="fold the towel"
        )
        stream(lambda: bool(seen(0.4)))
        result["left, new episode"] = seen(0.4)
        result["right, later"] = seen(STATES["right"])
        tasks = {robot["robot"]: robot["task"] for robot in daemon.status()["robots"]}
        assert tasks == {"left": "fold the towel", "right": TASKS["right"]}
        assert "task: fold the towel" in render_status(daemon.status())  # tempo status
        return result
    finally:
        for client in clients.values():
            client.close()


def check(seen: dict[str, list[list[int]]], model_file: Path) -> None:
    expected = {
        "left": ids_of(model_file, TASKS["left"]),
        "right": ids_of(model_file, TASKS["right"]),
        "left, new episode": ids_of(model_file, "fold the towel"),
        "right, later": ids_of(model_file, TASKS["right"]),
    }
    assert len({tuple(ids) for ids in expected.values()}) == 3
    for phase, ids in expected.items():
        assert seen[phase] and all(got == ids for got in seen[phase]), phase


def test_each_robots_prompt_reaches_only_its_own_context(tmp_path, model_file) -> None:
    policy = PromptRecorder(prompt_spec(model_file))
    config = ipc_config(tmp_path, "control.rate_hz=50")
    with running_daemon(config, served_here(policy)) as daemon:
        seen = drive(daemon, policy.prompts_for)
    check(seen, model_file)


def test_prompts_reach_a_policy_in_its_own_inference_process(tmp_path, model_file) -> None:
    log = tmp_path / "prompts.log"
    log.touch()
    policy = RemotePolicy(
        [sys.executable, str(CHILD)],
        hang_timeout_s=10.0,
        env={"PROMPT_TOKENIZER": str(model_file), "PROMPT_LOG": str(log)},
    )

    def seen(state0: float) -> list[list[int]]:
        rows = [line.split() for line in log.read_text().splitlines()]
        return [[int(i) for i in row[1:]] for row in rows if abs(float(row[0]) - state0) < 1e-3]

    policy.start()
    try:
        assert policy.spec.prompt is not None
        config = ipc_config(tmp_path, "control.rate_hz=50")
        with running_daemon(config, policy) as daemon:
            result = drive(daemon, seen)
    finally:
        policy.stop()
    check(result, model_file)
    np.testing.assert_equal(len(result["left"][0]), len(ids_of(model_file, TASKS["left"])))
