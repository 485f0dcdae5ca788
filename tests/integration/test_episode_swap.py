"""`tempo swap` without --now: each robot moves to the new checkpoint at its next episode start,
while the others are still served by the old process; once none is left on it, it ends. The old
process failing meanwhile moves every robot at once; the new one failing aborts the swap.

Robots through the daemon's feed (RemoteFeed) of a RemotePolicy: the demo ACT (seed 0) serves
first, the swap brings the demo ACT with other weights (seed 1, same robot); which policy
answered a robot is told by its chunk (the two differ on the same observation; each gives the
same chunk for the same observation: `reach` below is the old policy's).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from controller.cli import main
from controller.feed.inference_feed import InferenceQueues, InferenceRequest
from controller.link.remote_feed import RemoteFeed
from controller.link.remote_policy import RemotePolicy
from controller.observe.status_server import request_status
from controller.observe.telemetry import Telemetry
from policies.base import first_context
from policies.demo import make_demo_checkpoint
from tests.conftest import StreamingDriver, daemon_process, ipc_config, wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

JOINTS = tuple(f"joint_{i}" for i in range(6))  # the reach policy's (robot.joints' default)
OVERRIDES = ("control.rate_hz=100", "supervision.standby=off", "runner.top_tier=eager_fp32")


def _serving_act(tmp_path: Path) -> tuple[str, ...]:
    """OVERRIDES serving the demo ACT of seed 0 (a swap from the scripted reach policy, which
    takes any finite state, to a checkpoint with a state range is refused)."""
    served = make_demo_checkpoint(tmp_path / "served", joint_names=JOINTS)
    return (*OVERRIDES, "policy.kind=checkpoint", f"policy.path={served}")


class Robots:
    """Two robots' queues fed through the policy's feed, as the daemon's loop feeds them."""

    def __init__(self, policy: RemotePolicy) -> None:
        self.policy = policy
        self.feed: RemoteFeed = policy.feed(Telemetry(enabled=False))
        self.feed.start()
        self.robots = {
            name: InferenceQueues(name, policy.spec, collections.Counter()) for name in "abc"
        }
        self.seq = 0

    def ask(self, name: str, *, episode_start: bool) -> np.ndarray:
        """One observation of robot `name`; the actions of the chunk that answers it."""
        robot = self.robots[name]
        self.seq += 1
        context = first_context(self.policy.spec, np.zeros(6, np.float32), step=self.seq)
        context = dataclasses.replace(context, episode_start=episode_start)
        images = {"front": np.zeros((96, 128, 3), np.uint8)}
        request = InferenceRequest(self.seq, time.monotonic_ns(), 0, images, context)
        self.feed.submit(robot, request)
        deadline = time.monotonic() + 20
        while not robot.chunks:
            assert time.monotonic() < deadline, f"robot {name} got no chunk: {robot.counters}"
            self.feed.service(time.monotonic_ns() + 5_000_000)
            time.sleep(0.002)
        return robot.chunks.popleft().actions

    def idle(self, seconds: float) -> None:
        """The loop's idle servicing (which counts the robots for a swap) for a while."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.feed.service(time.monotonic_ns() + 5_000_000)
            time.sleep(0.005)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[RemotePolicy, str]]:
    checkpoint = str(make_demo_checkpoint(tmp_path / "act", joint_names=JOINTS, seed=1))
    config = ipc_config(tmp_path, *_serving_act(tmp_path))
    command = [sys.executable, "-m", "controller.cli", "inference-process"]
    config_json = json.dumps(config.model_dump(mode="json"))
    policy = RemotePolicy(command, config_json=config_json, standby="off")
    policy.start()
    try:
        yield policy, checkpoint
    finally:
        policy.stop()


def _swap(policy: RemotePolicy) -> dict:
    return policy.status()["process"]["swap"]


def _start_switching(policy: RemotePolicy, robots: Robots, checkpoint: str) -> np.ndarray:
    """Both robots served by the old policy (b in an episode), then a swap without --now until
    it switches; the old policy's actions for b's observation."""
    robots.ask("a", episode_start=True)
    reach = robots.ask("b", episode_start=True)
    assert np.allclose(robots.ask("b", episode_start=False), reach)  # stateless: the same
    assert policy.swap(checkpoint, now=False, name="default")["phase"] == "building"
    wait_for(lambda: _swap(policy)["phase"] != "building", 30)
    assert _swap(policy)["phase"] == "switching", _swap(policy)["detail"]
    return reach


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z"


def test_each_robot_moves_at_its_episode_start_and_then_the_old_process_ends(
    served: tuple[RemotePolicy, str],
) -> None:
    policy, checkpoint = served
    robots = Robots(policy)
    old = policy.pid
    reach = _start_switching(policy, robots, checkpoint)
    new = _swap(policy)["pid"]
    act = robots.ask("a", episode_start=True)  # a's episode starts: the new checkpoint
    assert act.shape == reach.shape and not np.allclose(act, reach)
    assert np.allclose(robots.ask("b", episode_start=False), reach)  # b's goes on: the old
    assert np.allclose(robots.ask("a", episode_start=False), act)  # a stays on the new one
    # A robot connecting now starts its first episode: the new checkpoint serves it.
    assert np.allclose(robots.ask("c", episode_start=True), act)
    robots.idle(0.2)
    swap = _swap(policy)
    assert swap["phase"] == "switching"
    assert (swap["robots_moved"], swap["robots_on_old"]) == (2, 1)
    assert "2 moved, 1 still on the old policy" in swap["detail"]
    assert policy.pid == old and not _gone(old or 0)
    assert np.allclose(robots.ask("b", episode_start=True), act)  # b's episode starts
    robots.idle(0.1)
    wait_for(lambda: _swap(policy)["phase"] != "switching", 10)
    swap = _swap(policy)
    assert swap["phase"] == "done", swap["detail"]
    assert policy.pid == new != old
    wait_for(lambda: _gone(old or 0), 10)  # the old process has ended
    assert np.allclose(robots.ask("b", episode_start=False), act)
    assert json.loads(policy.config_json or "")["policy"]["path"] == checkpoint
    assert policy.restart_count == 0


def test_the_old_process_failing_during_the_swap_moves_every_robot(
    served: tuple[RemotePolicy, str],
) -> None:
    policy, checkpoint = served
    robots = Robots(policy)
    old, epoch = policy.pid, policy.epoch
    reach = _start_switching(policy, robots, checkpoint)
    new = _swap(policy)["pid"]
    act = robots.ask("a", episode_start=True)
    assert not np.allclose(act, reach)
    os.kill(old or 0, signal.SIGKILL)
    wait_for(lambda: _swap(policy)["phase"] != "switching", 10)
    swap = _swap(policy)
    assert swap["phase"] == "done", swap["detail"]
    assert "old process failed" in swap["detail"]
    assert policy.pid == new and policy.serving
    assert policy.epoch > epoch  # the loop holds every robot a tick, as on a take-over
    # b, mid-episode on the old policy, is now served by the new one.
    assert np.allclose(robots.ask("b", episode_start=False), act)
    assert [r.cause for r in policy.restarts] == ["exited", "swap_took_over"]


def test_the_new_process_failing_during_the_swap_aborts_it(
    served: tuple[RemotePolicy, str],
) -> None:
    policy, checkpoint = served
    robots = Robots(policy)
    old, epoch, config = policy.pid, policy.epoch, policy.config_json
    reach = _start_switching(policy, robots, checkpoint)
    new = _swap(policy)["pid"]
    assert not np.allclose(robots.ask("a", episode_start=True), reach)
    os.kill(new, signal.SIGKILL)
    wait_for(lambda: _swap(policy)["phase"] != "switching", 10)
    swap = _swap(policy)
    assert swap["phase"] == "failed"
    assert "aborted" in swap["detail"] and "served by the old policy again" in swap["detail"]
    assert policy.pid == old and policy.serving
    assert policy.epoch > epoch  # robots on the new one hold a tick and drop its plans
    # a returns to the old policy, at an episode start or not.
    assert np.allclose(robots.ask("a", episode_start=False), reach)
    assert np.allclose(robots.ask("a", episode_start=True), reach)
    assert policy.config_json == config  # the new checkpoint was not adopted
    wait_for(lambda: _gone(new), 10)


def _daemon_swap(status_at: str) -> dict:
    status = request_status(status_at, 2.0)
    assert status is not None
    return status["policy"]["process"]


def test_tempo_swap_moves_a_connecting_robot_and_ends_the_old_process_when_the_last_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = make_demo_checkpoint(tmp_path / "act", joint_names=JOINTS, seed=1)
    status_at = f"ipc://{tmp_path}/status.sock"
    endpoint = f"ipc://{tmp_path}/tempo.sock"
    with daemon_process(tmp_path, *_serving_act(tmp_path)):
        first = StreamingDriver(endpoint, robot="first").start()
        second: StreamingDriver | None = None
        try:
            wait_for(lambda: sum(r.kind == "action" for r in first.records) >= 10, 30)
            old = _daemon_swap(status_at)["pid"]
            code = main(["swap", "--connect", status_at, "--path", str(checkpoint)])
            out, err = capsys.readouterr()
            assert code == 0 and out.startswith("tempo swap: switching"), out + err
            second = StreamingDriver(endpoint, robot="second").start()  # on the new one
            wait_for(lambda: sum(r.kind == "action" for r in second.records) >= 10, 60)
            wait_for(lambda: _daemon_swap(status_at)["swap"]["robots_moved"] == 1, 30)
            process = _daemon_swap(status_at)
            assert process["swap"]["phase"] == "switching", process["swap"]
            assert process["swap"]["robots_on_old"] == 1, process["swap"]  # no episode start
            assert process["pid"] == old and not _gone(old)
            first.stop()  # the last robot on the old policy leaves
            wait_for(lambda: _daemon_swap(status_at)["swap"]["phase"] != "switching", 30)
            process = _daemon_swap(status_at)
            assert process["swap"]["phase"] == "done", process["swap"]["detail"]
            assert process["pid"] == process["swap"]["pid"] != old
            wait_for(lambda: _gone(old), 10)
            seen = len(second.records)
            wait_for(lambda: sum(r.kind == "action" for r in second.records[seen:]) >= 10, 60)
        finally:
            for driver in (first, second):
                if driver is not None:
                    driver.stop()
    assert process["restarts"] == []
