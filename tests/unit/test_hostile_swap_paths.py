"""A swap path is what a client sent: a newline or an ESC in it never reaches the daemon's log
or status raw (`tempo status` shows swap.path and swap.detail; the log says which swap failed).
A swap's cancel answers the status socket at once; a swap's tokenizer is read bounded."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from controller.errors import PolicyError
from controller.link.policy_swap import Swapper
from controller.link.swap_checks import check_compatible
from policies.base import PolicySpec, PromptSpec

HOSTILE = "/tmp/ckpt\nINFO forged: every robot stopped\x1b[2J"


class RefusingPolicy:
    """A served policy whose new processes never start: each names the path it was given."""

    serving = True
    stopping = False
    config_json = json.dumps({"policy": {"kind": "reach"}})
    switch_lock = threading.Lock()

    def spawner_for(self, config_json: str) -> Any:
        raise PolicyError(f"no checkpoint at {json.loads(config_json)['policy']['path']}")


def test_a_swap_path_with_a_newline_and_esc_is_escaped_in_the_log_and_the_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    swapper = Swapper(RefusingPolicy())  # type: ignore[arg-type]
    caplog.set_level(logging.INFO)
    try:
        started = swapper.start(HOSTILE, now=True, name="default")
        deadline = time.monotonic() + 10
        while (swapper.status() or {}).get("phase") != "failed":
            assert time.monotonic() < deadline, swapper.status()
            time.sleep(0.01)
        status = swapper.status()
    finally:
        swapper.close()
    assert status is not None
    for shown in (started["path"], status["path"], status["detail"]):
        assert "\n" not in shown and "\x1b" not in shown, shown
    assert "\\n" in status["detail"] and "\\x1b" in status["detail"], status["detail"]
    lines = [record.getMessage() for record in caplog.records]
    assert any("failed" in line for line in lines), lines
    for line in lines:
        assert "\n" not in line and "\x1b" not in line, line


class BlockedBuildPolicy(RefusingPolicy):
    """A served policy whose swaps' builds wait until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def spawner_for(self, config_json: str) -> Any:
        self.release.wait(30)
        raise PolicyError("released")


def test_cancelling_a_swap_answers_at_once_while_its_process_ends() -> None:
    """`tempo swap --cancel` reaches the swapper on the status socket's one thread: it must not
    wait there for the swap to end (before, up to 3 s, while every other status request
    waited). The state it answers says the swap is still ending; the CLI watches status."""
    policy = BlockedBuildPolicy()
    swapper = Swapper(policy)  # type: ignore[arg-type]
    try:
        swapper.start("/tmp/some-checkpoint", now=True, name="default")
        started = time.monotonic()
        state = swapper.cancel()
        waited_s = time.monotonic() - started
        assert state["phase"] == "building"  # asked to end; its build has not returned yet
        assert waited_s < 1.5, f"cancel waited {waited_s:.1f} s on the status thread"
        policy.release.set()
        deadline = time.monotonic() + 10
        while (swapper.status() or {}).get("phase") != "cancelled":
            assert time.monotonic() < deadline, swapper.status()
            time.sleep(0.01)
    finally:
        policy.release.set()
        swapper.close()


def test_a_fifo_named_as_a_swaps_tokenizer_is_refused_not_waited_on(tmp_path: Path) -> None:
    """The swap compares the old and new tokenizers by their contents: a FIFO (or a device)
    named as one is read through the bounded reader, refused in one sentence, and the swap
    refused as tokenizing differently; before, reading it blocked the swap thread for good."""
    fifo = tmp_path / "tokenizer.model"
    os.mkfifo(fifo)
    real = tmp_path / "real.model"
    real.write_bytes(b"tokenizer")

    def spec(path: Path) -> PolicySpec:
        prompt = PromptSpec(tokenizer=str(path), max_length=8, vocab_size=100)
        return PolicySpec(cameras=(), state_size=2, joint_names=("a", "b"), chunk_size=4,
                          prompt=prompt)  # fmt: skip

    outcome: list[str] = []

    def compare() -> None:
        try:
            check_compatible(spec(real), spec(fifo))
            outcome.append("accepted")
        except PolicyError as exc:
            outcome.append(str(exc))

    thread = threading.Thread(target=compare, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "reading the FIFO blocked"
    assert outcome and "tokenizes prompts differently" in outcome[0], outcome
