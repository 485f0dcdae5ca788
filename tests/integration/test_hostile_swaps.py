"""A swap at episode starts that never finishes (a robot that never starts an episode) must not
block the daemon's swaps for good: a later swap replaces it (`--now` or another one at episode
starts), `tempo swap --cancel` ends it, and it times out after
supervision.episode_swap_timeout_s, saying so once in the log and in the status. Each time the
old policy serves every robot again (or the later swap's does), and the pending swap's process
ends.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from controller import app
from controller.cli import main
from controller.config import load_config
from controller.feed.inference_feed import InferenceRequest
from controller.link.remote_policy import RemotePolicy
from policies.base import first_context
from policies.demo import make_demo_checkpoint
from tests.conftest import StreamingDriver, daemon_process, ipc_config, wait_for
from tests.integration.test_episode_swap import (
    JOINTS,
    Robots,
    _daemon_swap,
    _gone,
    _serving_act,
    _start_switching,
    _swap,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def _policy(tmp_path: Path, *overrides: str) -> Iterator[RemotePolicy]:
    policy = app.inference_process(ipc_config(tmp_path, *_serving_act(tmp_path), *overrides))
    policy.start()
    try:
        yield policy
    finally:
        policy.stop()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[RemotePolicy]:
    yield from _policy(tmp_path)


def _checkpoint(tmp_path: Path, seed: int) -> str:
    return str(make_demo_checkpoint(tmp_path / f"act{seed}", joint_names=JOINTS, seed=seed))


def _after_moving_at_once(robots: Robots, name: str) -> np.ndarray:
    """Robot `name`'s actions after every robot moved at once: as on a take-over, the feed
    fails the first request it takes after the switch (observed before it: the robot holds a
    tick), and serves the next."""
    robot, failures = robots.robots[name], robots.robots[name].counters["inference_failures"]
    robots.seq += 1
    context = first_context(robots.policy.spec, np.zeros(6, np.float32), step=robots.seq)
    images = {"front": np.zeros((96, 128, 3), np.uint8)}
    robots.feed.submit(robot, InferenceRequest(robots.seq, time.monotonic_ns(), 0, images, context))
    wait_for(
        lambda: (
            robots.feed.service(time.monotonic_ns() + 5_000_000)
            or (robot.chunks or robot.counters["inference_failures"] > failures)
        ),
        20,
    )
    robot.chunks.clear()
    return robots.ask(name, episode_start=False)


def _pending(policy: RemotePolicy, robots: Robots, tmp_path: Path) -> tuple[np.ndarray, int]:
    """A swap at episode starts that robot b (mid-episode, never starting another) holds
    pending; a has moved. The old policy's actions for b, and the pending swap's process."""
    reach = _start_switching(policy, robots, _checkpoint(tmp_path, 1))
    assert not np.allclose(robots.ask("a", episode_start=True), reach)  # a moved
    robots.idle(0.2)
    assert _swap(policy)["robots_on_old"] == 1
    return reach, _swap(policy)["pid"]


def test_a_later_swap_now_replaces_a_pending_episode_start_swap(
    served: RemotePolicy, tmp_path: Path
) -> None:
    policy, robots = served, Robots(served)
    reach, pending = _pending(policy, robots, tmp_path)
    later = _checkpoint(tmp_path, 2)
    state = policy.swap(later, now=True, name="default")  # refused before: "under way"
    assert state["phase"] == "building" and state["now"]
    wait_for(lambda: _swap(policy)["phase"] not in ("building", "switching"), 60)
    swap = _swap(policy)
    assert swap["phase"] == "done", swap["detail"]
    assert policy.pid == swap["pid"] != pending
    wait_for(lambda: _gone(pending), 10)  # the replaced swap's process has ended
    assert json.loads(policy.config_json or "")["policy"]["path"] == later
    # Every robot, b mid-episode too, is served by the later checkpoint now.
    now_b = _after_moving_at_once(robots, "b")
    assert not np.allclose(now_b, reach)
    assert np.allclose(robots.ask("a", episode_start=False), now_b)


def test_a_later_episode_start_swap_replaces_a_pending_one(
    served: RemotePolicy, tmp_path: Path
) -> None:
    policy, robots = served, Robots(served)
    reach, pending = _pending(policy, robots, tmp_path)
    policy.swap(_checkpoint(tmp_path, 2), now=False, name="default")
    wait_for(lambda: _swap(policy)["phase"] == "switching", 60)
    assert _swap(policy)["pid"] != pending
    wait_for(lambda: _gone(pending), 10)
    # The robot on the replaced swap's process went back to the old one, until its episode
    # starts again; b, mid-episode, is still on the old one.
    assert np.allclose(robots.ask("a", episode_start=False), reach)
    assert np.allclose(robots.ask("b", episode_start=False), reach)


def test_a_pending_episode_start_swap_times_out_saying_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert load_config(None, []).supervision.episode_swap_timeout_s == 300.0
    caplog.set_level(logging.INFO)
    for policy in _policy(tmp_path, "supervision.episode_swap_timeout_s=2"):
        robots = Robots(policy)
        old = policy.pid
        reach, pending = _pending(policy, robots, tmp_path)
        wait_for(lambda: _swap(policy)["phase"] != "switching", 30)  # noqa: B023
        swap = _swap(policy)
        assert swap["phase"] == "timed_out", swap
        assert "timed out after 2 s" in swap["detail"], swap["detail"]
        assert "1 robot still on the old policy" in swap["detail"], swap["detail"]
        assert policy.pid == old and policy.serving
        wait_for(lambda: _gone(pending), 10)  # noqa: B023
        assert np.allclose(robots.ask("a", episode_start=False), reach)
        said = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
        assert len(said) == 1, said
        assert not any(r.exc_info for r in caplog.records)
        # And a swap is taken again at once.
        assert policy.swap(_checkpoint(tmp_path, 2), now=True, name="default")["phase"] == (
            "building"
        )


def test_tempo_swap_cancel_ends_a_pending_swap_and_the_old_policy_serves_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = _checkpoint(tmp_path, 1)
    status_at = f"ipc://{tmp_path}/status.sock"
    endpoint = f"ipc://{tmp_path}/tempo.sock"
    with daemon_process(tmp_path, *_serving_act(tmp_path)):
        driver = StreamingDriver(endpoint, robot="first").start()
        try:
            wait_for(lambda: sum(r.kind == "action" for r in driver.records) >= 10, 30)
            old = _daemon_swap(status_at)["pid"]
            assert main(["swap", "--connect", status_at, "--path", checkpoint]) == 0
            capsys.readouterr()
            pending = _daemon_swap(status_at)["swap"]["pid"]
            # Nothing to cancel is said in one sentence; a swap needs --path or --cancel.
            assert main(["swap", "--connect", status_at, "--cancel"]) == 0
            out, err = capsys.readouterr()
            assert out.startswith("tempo swap: cancelled:"), out + err
            process = _daemon_swap(status_at)
            assert process["swap"]["phase"] == "cancelled", process["swap"]
            assert "tempo swap --cancel" in process["swap"]["detail"]
            assert process["pid"] == old
            wait_for(lambda: _gone(pending), 10)
            assert main(["swap", "--connect", status_at, "--cancel"]) == 2
            out, err = capsys.readouterr()
            assert "no swap is under way" in err and "Traceback" not in err, out + err
            seen = len(driver.records)
            wait_for(lambda: sum(r.kind == "action" for r in driver.records[seen:]) >= 10, 30)
        finally:
            driver.stop()
